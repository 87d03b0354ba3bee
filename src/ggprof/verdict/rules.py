"""The rules every backend is judged by: decode and prefill against their physical ceilings,
decode against the backend's expected band, and whether the model fits the device."""

from __future__ import annotations

from ggprof.llamacpp import BACKEND_TITLES, rebuild_command
from ggprof.machine.device import ExpectedSpeed
from ggprof.machine.measurements import MAX_BANDWIDTH_SPREAD
from ggprof.physics.roofline import Prediction, expected_decode
from ggprof.physics.speculative import expected_speculative
from ggprof.units import fmt_bytes, fmt_rate, pct, sig3, tps
from ggprof.verdict.backend import NOT_ONE_STREAM_CAUSES, PREFILL_TOO_FAST_CAUSES, TOO_FAST_CAUSES, Backend
from ggprof.verdict.busy import busy_next_step, contention_of, first_causes
from ggprof.verdict.devices import derived_placement, devices_causes, devices_evidence, placement_evidence
from ggprof.verdict.drafting import above_drafting, drafting_causes, drafting_evidence
from ggprof.verdict.finding import BASE_TOLERANCE, MAX_TOLERANCE, NOISY_CV, Finding, JudgeCase
from ggprof.verdict.fit import fit_findings


def _next(case: JudgeCase, reported: str | None, measured: str | None = None) -> str | None:
    """A finding's next step: for a number reported from elsewhere, `reported` (which may send the
    user to `ggprof profile`); for a run ggprof has just measured, `measured` (None: no step adds
    what the run has not already shown)."""
    return reported if case.source == "reported" else measured


def _too_fast(p: Prediction, first: tuple[str, ...] = TOO_FAST_CAUSES) -> tuple[str, ...]:
    """What makes a speed too fast, `first` first; speculative decoding left out where the claim
    already drafts (its own ceiling judged it)."""
    rest = tuple(c for c in NOT_ONE_STREAM_CAUSES if c not in first)
    return tuple(c for c in (*first, *rest) if p.step is None or not c.startswith("speculative decoding"))


def expected_for(b: Backend, case: JudgeCase) -> ExpectedSpeed | None:
    """The decode band a case is judged against (the same function `predict` shows)."""
    p = case.prediction
    if p is None:
        return None
    if p.step is not None:
        return expected_speculative(p.step, p.band, b.compute_roof(case))
    return expected_decode(p.decode_ceiling_tok_s, p.band, b.compute_roof(case))


def findings(b: Backend, case: JudgeCase) -> list[Finding]:
    """Fit, decode and prefill findings for a run on backend `b`."""
    if case.prediction is None:
        return [
            *gpu_findings(b, case),
            Finding(
                severity="unknown",
                code="NO_BANDWIDTH",
                title="no bandwidth is known for the device: decode cannot be judged",
                next_step="run `ggprof host`, or pass --device ID or --bandwidth GB/s",
                plugin=b.name,
            ),
        ]
    return (
        gpu_findings(b, case)
        + fit_findings(b, case)
        + noise_findings(b, case)
        + decode_findings(b, case)
        + prefill_findings(b, case)
    )


def gpu_findings(b: Backend, case: JudgeCase) -> list[Finding]:
    """A run that asked for a GPU (-ngl, --device) and ran on the CPU: suspicious, whatever its
    speed, with the reason first (it is judged as the CPU run it was, never against the GPU)."""
    ctx = case.context
    if ctx is None or ctx.gpu_requested is None or b.name != "cpu":
        return []
    gpu, backend = ctx.gpu_requested, ctx.gpu_requested_backend or "gpu"
    title = BACKEND_TITLES.get(backend, backend)
    built = "/".join(BACKEND_TITLES.get(x, x) for x in ctx.backends_compiled) or "unknown"
    command = rebuild_command(backend)
    if backend not in ctx.backends_compiled:
        first = f"this llama.cpp build ({ctx.engine} engine) has no {title} backend, only {built}" + (
            f": rebuild with {command}" if command and ctx.engine == "python" else ""
        )
    else:
        first = f"the {title} backend is built in but placed no layer on {gpu} (driver, device not found, -ngl 0)"
    offloaded = ctx.n_gpu_layers_offloaded
    layers = f"{offloaded}/{ctx.n_layers}" if offloaded is not None and ctx.n_layers else "no"
    return [
        Finding(
            severity="suspicious",
            code="GPU_NOT_USED",
            title=f"asked for {gpu} ({title}), but llama.cpp ran on the CPU",
            expected=f"layers on {gpu} (-ngl {ctx.n_gpu_layers_requested})",
            observed=f"{layers} layers offloaded; backends used: {', '.join(ctx.backends_used).upper()}",
            evidence=(f"backends in this build: {built}", "judged as the CPU run it was, not against the GPU"),
            causes=(first, "the GPU's driver or runtime is missing, or another program holds its memory"),
            next_step=(f"{command}, or --engine llama-bench=PATH with your {title} build of llama.cpp")
            if command
            else f"--engine llama-bench=PATH with your {title} build of llama.cpp",
            plugin=b.name,
        )
    ]


def noise_findings(b: Backend, case: JudgeCase) -> list[Finding]:
    """Repetitions that disagree too much to judge the run, or a measured bandwidth whose own
    repetitions do: suspicious, naming the noise."""
    found = []
    bw = case.prediction.device.bandwidth if case.prediction else None
    if bw is not None and bw.source == "measured" and bw.spread is not None and bw.spread > MAX_BANDWIDTH_SPREAD:
        found.append(
            Finding(
                severity="suspicious",
                code="BANDWIDTH_UNRELIABLE",
                title=f"the measured bandwidth this verdict rests on is unreliable: its repetitions "
                f"disagree by {bw.spread:.0%}",
                expected=f"at most {MAX_BANDWIDTH_SPREAD:.0%} between the best and the worst repetition",
                observed=f"{bw.spread:.0%} ({fmt_rate(bw.value)} best; {bw.detail})",
                causes=(
                    "another program used memory while the bandwidth was measured",
                    "power or thermal limits changed the clock during the measurement",
                ),
                next_step="`ggprof host --refresh` on a quiet machine, or pass --device ID / --bandwidth GB/s",
                plugin=b.name,
            )
        )
    for test, tok_s, cv in (
        ("decode", case.measured_tg_tok_s, case.tg_cv),
        ("prefill", case.measured_pp_tok_s, case.pp_cv),
    ):
        if tok_s is None or cv is None or cv <= NOISY_CV:
            continue
        found.append(
            Finding(
                severity="suspicious",
                code="RUN_TOO_NOISY",
                title=f"{test} repetitions vary by {cv:.0%} (coefficient of variation): too noisy to judge",
                expected=f"at most {NOISY_CV:.0%}",
                observed=f"{cv:.0%} (stddev {sig3(cv * tok_s)} tok/s on {tps(tok_s)})",
                causes=_noise_causes(case),
                next_step=busy_next_step(case, "run again on a quiet machine, with more repetitions (-r)"),
                plugin=b.name,
            )
        )
    return found


NOISE_CAUSES = (
    "another program competed for the device or its memory (two benchmarks at once)",
    "power or thermal limits changed the clock during the run",
    "too few repetitions or tokens for this machine's noise",
)


def _noise_causes(case: JudgeCase) -> tuple[str, ...]:
    """Why repetitions disagree: the busy machine itself where the run saw one (it is the first
    generic cause, measured), else the generic list."""
    busy = contention_of(case)
    return (busy.cause(), *NOISE_CAUSES[1:]) if busy is not None else NOISE_CAUSES


def decode_findings(b: Backend, case: JudgeCase) -> list[Finding]:
    p, tg = case.prediction, case.measured_tg_tok_s
    if p is None or tg is None:
        return []
    ceiling = p.decode_ceiling_tok_s
    bytes_per_token = p.decode_bytes_per_token + p.kv_bytes_at_depth
    evidence = (
        f"bytes per token {fmt_bytes(bytes_per_token, binary=False)} (weights "
        f"{fmt_bytes(p.decode_bytes_per_token, binary=False)} + KV at depth {case.depth:,} "
        f"{fmt_bytes(p.kv_bytes_at_depth, binary=False)})",
        f"bandwidth {fmt_rate(p.bandwidth_bytes_per_s)} [{_bandwidth_source(p)}]",
        *((case.roof_note,) if case.roof_note else ()),
        *devices_evidence(p),
        *placement_evidence(p),
    )
    if p.step is not None:
        evidence = (*evidence, *drafting_evidence(p))
        if tg > p.decode_limit_tok_s * (1 + case.tolerance):
            return [above_drafting(b, case, p, tg, evidence)]
        ceiling = p.decode_limit_tok_s
    elif tg > ceiling * (1 + case.tolerance):
        return [_above_ceiling(b, case, p, tg, evidence)]
    expected = expected_for(b, case)
    share = f"{tg / ceiling:.0%} of the {tps(ceiling)} ceiling"
    if expected is not None and tg < expected.low_tok_s * (1 - case.tolerance):
        diagnosis = b.diagnose(case)
        shared, shared_checks = _server_load(case)
        return [
            Finding(
                severity="suspicious",
                code="DECODE_BELOW_BAND",
                title=f"decode at {tps(tg)} is {share}, below the expected band",
                expected=_band_text(expected),
                observed=tps(tg),
                evidence=(*evidence, *shared_checks, *diagnosis.checks),
                causes=first_causes(
                    case, diagnosis.causes, b.causes.slow, (*devices_causes(p), *drafting_causes(p), *shared)
                ),
                next_step=busy_next_step(case, _next(case, b.causes.slow_next_step)),
                plugin=b.name,
            )
        ]
    if expected is not None and tg < expected.low_tok_s:
        # below the band, but not by more than the tolerance: say which tolerance makes it plausible
        evidence = (
            *evidence,
            f"{1 - tg / expected.low_tok_s:.1%} below the band's low end ({tps(expected.low_tok_s)}), within the "
            f"{case.tolerance:.0%} tolerance ({tolerance_text(case)})",
        )
    return [
        Finding(
            severity="plausible",
            code="DECODE_PLAUSIBLE",
            title=f"decode at {tps(tg)} is {share}",
            expected=_band_text(expected) if expected else f"at most {tps(ceiling)}",
            observed=tps(tg),
            evidence=evidence,
            plugin=b.name,
        )
    ]


def tolerance_text(case: JudgeCase) -> str:
    """How a case's tolerance is made: `5% + 2 x the repetitions' CV 2.1%`, capped."""
    cv = max(case.tg_cv or 0.0, 0.0)
    text = f"{BASE_TOLERANCE:.0%} measurement tolerance" + (f" + 2 x the repetitions' CV {cv:.1%}" if cv else "")
    if case.model_uncertainty:
        text += f" + {case.model_uncertainty:.0%} for a model estimated from a log"
    return text + (f", capped at {MAX_TOLERANCE:.0%}" if case.tolerance >= MAX_TOLERANCE else "")


def _server_load(case: JudgeCase) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A server busy with other users' requests shares the device between them (causes, checks)."""
    ctx = case.context
    if ctx is None or ctx.other_requests is None:
        return (), ()
    slots = f" of {ctx.server_slots}" if ctx.server_slots else ""
    check = f"server slots busy with other requests when the run started: {ctx.other_requests}{slots}"
    if not ctx.other_requests:
        return (), (check,)
    cause = (
        f"the server was serving {ctx.other_requests} other request(s): its parallel slots share the "
        "device's bandwidth and compute"
    )
    return (cause,), (check,)


def _band_text(e: ExpectedSpeed) -> str:
    return f"{tps(e.low_tok_s)} to {tps(e.high_tok_s)} ({e.basis})"


def _above_ceiling(b: Backend, case: JudgeCase, p: Prediction, tg: float, evidence: tuple[str, ...]) -> Finding:
    ceiling = p.decode_ceiling_tok_s
    bytes_per_token = p.decode_bytes_per_token + p.kv_bytes_at_depth
    flops_needed = tg * 2 * p.active_params  # a token multiplies every active weight once, at the least
    if p.peak_flops and p.active_params and flops_needed > p.peak_flops * (1 + case.tolerance):
        # no cache explains this: the arithmetic alone is more than the device can do
        peak = p.device.peak_flops.describe() if p.device.peak_flops else ""
        return Finding(
            severity="impossible",
            code="DECODE_ABOVE_COMPUTE",
            title=f"decode at {tps(tg)} needs {sig3(flops_needed / 1e12)} TFLOP/s at the least; the device peaks "
            f"at {sig3(p.peak_flops / 1e12)}",
            expected=f"at most {tps(p.peak_flops / (2 * p.active_params))} from compute alone",
            observed=tps(tg),
            evidence=(
                *evidence,
                f"2 x {sig3(p.active_params / 1e6)}M active params = {sig3(2 * p.active_params / 1e9)} GFLOP a token",
                f"peak {sig3(p.peak_flops / 1e12)} TFLOP/s [{peak}]",
                f"tolerance {case.tolerance:.0%}",
            ),
            causes=(
                _too_fast(
                    p, (*TOO_FAST_CAUSES, "a broken or lying timer", "the device's peak FLOP/s figure is too low")
                )
                if case.source == "reported"
                else ("the timings are not a decode of this model (a lying or broken timer, another model)",)
            ),
            next_step=_next(
                case,
                "check what produced these timings; ggprof profile runs the model here and times it itself",
                "check the program that timed it (--engine): it reports what no decode of this model can do",
            ),
            plugin=b.name,
        )
    llc = p.device.llc_bytes
    if llc and bytes_per_token <= llc:
        return Finding(
            severity="unknown",
            code="DECODE_CEILING_NOT_APPLICABLE",
            title="the model fits in the last-level cache: the DRAM ceiling does not apply",
            expected=f"at most {tps(ceiling)} from DRAM",
            observed=tps(tg),
            evidence=(*evidence, f"last-level cache {fmt_bytes(llc)}"),
            causes=("weights stay in the LLC between tokens",),
            next_step="judge a model larger than the LLC",
            plugin=b.name,
        )
    needed = tg * bytes_per_token
    bw = p.device.bandwidth
    if case.source == "measured" and bw is not None and bw.source == "measured":
        # a run this machine just produced, faster than the bandwidth measured on it allows:
        # the host figure is what is wrong (or the weights stay in cache), never the run
        return Finding(
            severity="unknown",
            code="BANDWIDTH_BELOW_RUN",
            title=f"decode at {tps(tg)} moved {fmt_rate(needed)}, more than the {fmt_rate(p.bandwidth_bytes_per_s)} "
            "measured on this host: decode cannot be judged against that figure",
            expected=f"at most {tps(ceiling)} at the measured bandwidth",
            observed=tps(tg),
            evidence=(
                *evidence,
                f"{sig3(tg)} tok/s x {fmt_bytes(bytes_per_token, binary=False)} = {fmt_rate(needed)}",
                "the run was measured on this machine: the host figure, not the run, is too low",
            ),
            causes=(
                "the bandwidth measurement read less than this machine delivers (measured at a busy moment, "
                "or on fewer cores than the run used)",
                "part of the model's weights stay in the CPU's caches between tokens",
            ),
            next_step="`ggprof host --refresh` on a quiet machine, or pass --bandwidth GB/s",
            plugin=b.name,
        )
    return Finding(
        severity="impossible",
        code="DECODE_ABOVE_CEILING",
        title=f"decode at {tps(tg)} needs {fmt_rate(needed)}; the device moves {fmt_rate(p.bandwidth_bytes_per_s)}",
        expected=f"at most {tps(ceiling)}",
        observed=tps(tg),
        evidence=(
            *evidence,
            f"{sig3(tg)} tok/s x {fmt_bytes(bytes_per_token, binary=False)} = {fmt_rate(needed)}",
            f"tolerance {case.tolerance:.0%} above the ceiling",
        ),
        causes=_too_fast(p, b.causes.impossible) if case.source == "reported" else b.causes.impossible,
        next_step=_next(
            case,
            "check which device and model really ran (ggprof profile runs it here and records the context)",
            "check the bandwidth it was judged against (--device, --bandwidth): this run was timed here",
        ),
        plugin=b.name,
    )


def prefill_findings(b: Backend, case: JudgeCase) -> list[Finding]:
    p, pp = case.prediction, case.measured_pp_tok_s
    if p is None or pp is None:
        return []
    ceiling = p.prefill_ceiling_tok_s
    if ceiling is None:
        return [
            Finding(
                severity="unknown",
                code="PREFILL_NO_PEAK",
                title="no peak FLOP/s is known for this device: prefill cannot be judged",
                observed=tps(pp),
                next_step="pass --flops TFLOPS or --device ID",
                plugin=b.name,
            )
        ]
    flops_token = p.prefill_flops_per_token
    peak_tflops = sig3((p.peak_flops or 0) / 1e12)
    evidence = (
        f"{sig3(flops_token / 1e9)} GFLOP per prompt token (2 x {sig3(p.active_params / 1e6)}M active "
        "params + attention; LM head once per batch, as llama.cpp does)",
        f"peak {peak_tflops} TFLOP/s [{p.device.peak_flops.describe() if p.device.peak_flops else ''}]",
        *derived_placement(p),
    )
    if pp > ceiling * (1 + case.tolerance):
        return [
            Finding(
                severity="impossible",
                code="PREFILL_ABOVE_CEILING",
                title=f"prefill at {tps(pp)} needs {sig3(pp * flops_token / 1e12)} TFLOP/s; the device peaks at "
                f"{peak_tflops}",
                expected=f"at most {tps(ceiling)}",
                observed=tps(pp),
                evidence=evidence,
                causes=(*PREFILL_TOO_FAST_CAUSES, *b.causes.impossible)
                if case.source == "reported"
                else b.causes.impossible,
                next_step="check which device and model really ran",
                plugin=b.name,
            )
        ]
    band = p.prefill_band
    expected = f"at most {tps(ceiling)}"
    if band is not None:
        expected = (
            f"{tps(band.low * ceiling)} to {tps(band.high * ceiling)} ({pct(band.low)}-{pct(band.high)} of the "
            f"compute ceiling; {band.source})"
        )
        if band.judged and pp < band.low * ceiling * (1 - case.tolerance):
            diagnosis = b.diagnose_prefill(case)
            return [
                Finding(
                    severity="suspicious",
                    code="PREFILL_BELOW_BAND",
                    title=f"prefill at {tps(pp)} is {pp / ceiling:.1%} of the compute ceiling {tps(ceiling)}, "
                    "below the expected band",
                    expected=expected,
                    observed=tps(pp),
                    evidence=(*evidence, *diagnosis.checks),
                    causes=first_causes(case, diagnosis.causes, b.prefill_causes),
                    next_step=busy_next_step(
                        case,
                        _next(
                            case,
                            "check the build (GPU/BLAS support, release mode), -ngl and -ub; `ggprof profile` records "
                            "them",
                            "check the build: release mode, with the device's GPU or BLAS support",
                        ),
                    ),
                    plugin=b.name,
                )
            ]
    return [
        Finding(
            severity="plausible",
            code="PREFILL_PLAUSIBLE",
            title=f"prefill at {tps(pp)} is {pp / ceiling:.1%} of the compute ceiling {tps(ceiling)}",
            expected=expected,
            observed=tps(pp),
            evidence=evidence,
            plugin=b.name,
        )
    ]


def _bandwidth_source(p: Prediction) -> str:
    bw = p.device.bandwidth
    return bw.describe() if bw else "unknown"

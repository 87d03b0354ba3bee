"""`ggprof profile`: inspect -> host -> bench -> predict -> judge, for every depth it ran."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace
from types import EllipsisType

from ggprof.bench import roofs
from ggprof.bench.context import UNKNOWN_PLACEMENT, RunContext
from ggprof.bench.results import WARMUP_PROMPT_CPU, BenchParams, BenchResult, ThreadProbe
from ggprof.bench.stopping import PlausibleRange, probe_threads, range_key
from ggprof.calibration import reach_band
from ggprof.engines import Engine, EnginePlan, ProgressFn
from ggprof.errors import GGProfError
from ggprof.llamacpp import BACKEND_TITLES, rebuild_command
from ggprof.machine.cache import fingerprint
from ggprof.machine.device import Device, with_build
from ggprof.machine.host import HostReport, describe_host
from ggprof.machine.load import BUSY_SHARE, Load
from ggprof.machine.target import DeviceChoice, Target, resolve_target
from ggprof.model.spec import ModelSpec, load_model
from ggprof.physics.roofline import PredictInputs, Prediction, drafted, is_partial_offload
from ggprof.physics.rpc import Member
from ggprof.physics.speculative import Drafting, DraftPlacement, acceptance_from, drafting_for
from ggprof.pipelines.extensions import Extensions
from ggprof.pipelines.judged import Judged
from ggprof.pipelines.predict import predict_with
from ggprof.pipelines.rpc import predict_split
from ggprof.pipelines.sweep import ConcurrencySweep, ThreadSweep, concurrency_sweep, sweep_counts, thread_sweep
from ggprof.units import fmt_rate
from ggprof.verdict.finding import BASE_TOLERANCE, JudgeCase, worst
from ggprof.verdict.judge import judge


@dataclass(frozen=True, kw_only=True)
class ProfileReport:
    model: ModelSpec
    host: HostReport | None
    device: Device | None
    device_note: str
    bench: BenchResult | None
    judged: tuple[Judged, ...]
    threads: ThreadSweep | None = None  # with --threads-sweep
    engine: str = "python"  # what ran llama.cpp, in words
    concurrency: ConcurrencySweep | None = None  # a server measured at several users at once

    @property
    def severity(self) -> str:
        return worst([j.verdict for j in self.judged])


# Other processes using more than this share of the CPUs a run may use, just before it: llama.cpp's
# spinning threads stall behind them (decode steps of 2.4 s beside a 15 ms median were seen with
# one busy loop on a 2-core VM), so the run is kept to BUSY_MAX_REPS repetitions a test rather
# than repeating noisy tests to the cap, and the user is told before anything is measured.
BUSY_MAX_REPS = 3


def busy_note(load: Load | None, shortened: bool = True) -> str | None:
    """The one line said before a run on a busy machine (None: quiet enough); `shortened`:
    whether the run is kept short for it (not with --ignore-load)."""
    if load is None or load.share <= BUSY_SHARE:
        return None
    what = (
        f"the run is kept short (at most {BUSY_MAX_REPS} repetitions a test; --ignore-load runs it in full)"
        if shortened
        else "the run is not shortened (--ignore-load)"
    )
    return (
        f"the machine is busy: {load.describe()}; llama.cpp's threads will wait for them, so tok/s will "
        f"read low and vary, and {what}"
    )


def for_load(params: BenchParams, load: Load | None) -> BenchParams:
    """The run's parameters on a busy machine: its stop rule capped at BUSY_MAX_REPS (a fixed -r stands)."""
    if busy_note(load) is None or params.stop is None or params.stop.max_reps <= BUSY_MAX_REPS:
        return params
    stop = replace(params.stop, max_reps=BUSY_MAX_REPS, min_reps=min(params.stop.min_reps, BUSY_MAX_REPS))
    return replace(params, stop=stop)


def run_profile(
    spec: ModelSpec,
    params: BenchParams,
    choice: DeviceChoice,
    ext: Extensions,
    engine: Engine,
    host: HostReport | None = None,
    progress: ProgressFn | None = None,
    threads_sweep: bool = False,
    split: tuple[Member, ...] = (),
    load: Load | None = None,
    plan: EnginePlan | None = None,
) -> ProfileReport:
    """Measure the host (or reuse its cached measurement), run the benchmark, judge every depth.
    `host`: this host, when the caller already described it (facts are gathered once). `split`:
    the remote devices of an RPC run (params.rpc), with their links. `load`: how busy this
    machine was before the run (sample_load): a busy one gets a short run (for_load). `plan`:
    what the engine knows before it runs, when the caller has asked it (once per run)."""
    params = for_load(params, load)
    if host is None:
        host = describe_host(ext.backends.values(), ext.profiles, measure=True, quick=True, refine=True)
    plan = plan or engine.plan(host.facts)
    planned = planned_backend(spec, params, host, choice, plan)
    # the thread probe measures this CPU's compute roof: not in an RPC split (the servers
    # compute) nor where one GPU holds every layer (threads only feed it)
    on_gpu = planned not in (None, "cpu")
    params = replace(params, probe_threads=None if params.rpc or on_gpu else probe_threads(params.n_threads))
    if params.stop is not None and (ranges := plausible_ranges(spec, params, host, choice, plan, ext, planned)):
        # verdict-aware stopping on the device known before the run; on the CPU a warm-up that
        # reads every weight without a whole prompt's time (GPUs keep llama-bench's full-size one)
        stop = replace(params.stop, ranges=ranges, ranges_backend=planned or "cpu")
        params = replace(params, stop=stop, warmup_prompt=params.warmup_prompt if on_gpu else WARMUP_PROMPT_CPU)
    result = engine.run(spec, params, host.facts, progress=progress)
    requested = gpu_requested(host, choice, params, ext)
    if requested is not None:
        context = replace(result.context, gpu_requested=requested[0], gpu_requested_backend=requested[1])
        result = replace(result, context=context)
    backend = backend_of(result.context, ext)
    if backend == UNKNOWN_PLACEMENT and choice.device_id is not None:
        backend = ext.profiles.get(choice.device_id).backends[0]  # the device the user says it runs on
    if requested is not None and backend == "cpu" and choice.device_id is not None:
        # never judged against the GPU profile that did not run: this host's CPU (figures the
        # user gave by hand, --bandwidth, are the user's word for whatever ran, and stand)
        choice = DeviceChoice()
    target = _device_for(backend, host, choice, ext)
    if backend == "rpc" and split and host.cpu is not None:
        target = Target(device=host.cpu, cpu=host.cpu, description=_split_note(split))
    if target is not None and (build := result.context.build) is not None:
        target = replace(target, device=with_build(target.device, build))  # its era, its matrix cores
    judged = [_judge_depth(spec, params, result, target, backend, depth, ext, split) for depth in params.n_depth]
    if backend == "cpu" and choice.needs_host:
        keep_roofs(spec, result, host)
    threads = sweep_threads(spec, params, host, engine, progress) if threads_sweep else None
    return ProfileReport(
        engine=engine.describe(),
        concurrency=concurrency_sweep(result, judged[0].prediction if judged else None),
        model=spec,
        host=host,
        device=target.device if target else None,
        device_note=target.description if target else "",
        bench=result,
        judged=tuple(judged),
        threads=threads,
    )


def keep_roofs(spec: ModelSpec, result: BenchResult, host: HostReport) -> None:
    """Keep each depth's thread probe, so `check`, `predict` and `fit` judge this model on this
    host with the compute roof measured here (ggprof.bench.roofs). A cache that cannot be
    written loses only that reuse."""
    threads, busy = result.context.n_threads, result.context.cpu_load_during_percent
    for row in result.rows:
        if row.probe is not None and threads and row.probe.n_threads < threads and row.n_parallel == 1:
            with contextlib.suppress(OSError):
                roofs.save(fingerprint(host.facts), spec, row.n_depth, threads, row.probe, busy)


def plausible_ranges(
    spec: ModelSpec,
    params: BenchParams,
    host: HostReport,
    choice: DeviceChoice,
    engine: Engine | EnginePlan,
    ext: Extensions,
    planned: str | EllipsisType | None = ...,
) -> tuple[PlausibleRange, ...]:
    """Where each test's verdict is plausible whatever the run's noise, from the prediction
    made before the run: decode above the low end of the expected band and below the
    ceiling, prefill below its ceiling (above its band's low end where it has one), each
    with the smallest tolerance a verdict gives (BASE_TOLERANCE). A test whose interval lies
    wholly inside stops: its verdict cannot change within it. The thread probe, run before
    the decode, can only lower the band's low end (to a compute roof): each decode range
    carries that roof per probe tok/s, for the engine to apply once its probe has run. Only
    where the device is known before the run (`planned_backend`), and on a GPU only where
    the prediction has the model and its cache fit in the GPU's memory. `planned`: the
    backend planned_backend named for the run, where the caller has asked it already."""
    plan = _plan(engine, host)
    backend = planned_backend(spec, params, host, choice, plan) if isinstance(planned, EllipsisType) else planned
    if backend is None:
        return ()
    if backend == "cpu" and (threads := plan.host_cpu_threads) is not None:
        params = replace(params, n_threads=threads, probe_threads=probe_threads(threads))
    target = _device_for(backend, host, choice, ext)
    out: list[PlausibleRange] = []
    for depth in params.n_depth:
        p = prediction_for(spec, target, inputs_of(params, depth), ext)
        if p is None:
            continue
        if backend != "cpu" and not all(m.fits for m in p.memory):
            return ()  # a model that may not fit runs partly elsewhere, or not at all
        ceiling = p.decode_ceiling_tok_s
        low = p.band.low * ceiling * (1 - BASE_TOLERANCE) if p.band else 0.0
        roof = roof_per_probe_tok_s(spec, params, p, depth, ext) * (1 - BASE_TOLERANCE) if backend == "cpu" else 0.0
        out.append(PlausibleRange(range_key("tg", depth), low, ceiling * (1 + BASE_TOLERANCE), roof))
        pp_ceiling, pp_band = p.prefill_ceiling_tok_s, p.prefill_band
        if pp_ceiling:
            pp_low = pp_band.low * pp_ceiling * (1 - BASE_TOLERANCE) if pp_band and pp_band.judged else 0.0
            out.append(PlausibleRange(range_key("pp", depth), pp_low, pp_ceiling * (1 + BASE_TOLERANCE)))
    return tuple(out)


def _plan(engine: Engine | EnginePlan, host: HostReport) -> EnginePlan:
    """The run's plan: as the caller asked it once, or asked of the engine now."""
    return engine if isinstance(engine, EnginePlan) else engine.plan(host.facts)


def planned_backend(
    spec: ModelSpec, params: BenchParams, host: HostReport, choice: DeviceChoice, engine: Engine | EnginePlan
) -> str | None:
    """The backend a run will use, known before it runs: this host's CPU for an engine whose
    build has only the CPU (or told -ngl 0) or a local server that runs on it; the GPU
    backend of the engine's build when this host has exactly one device of the build's GPU
    backends and every layer is offloaded. None where only the run can tell: an RPC split,
    a device given by --device or figures, several GPUs, a partial offload, a build not
    known before it runs (a server on a GPU or on another machine)."""
    if params.rpc or not choice.needs_host:
        return None
    plan = _plan(engine, host)
    compiled = plan.compiled_backends
    if plan.host_cpu_threads is not None or params.n_gpu_layers == 0 or compiled == ("cpu",):
        return "cpu"
    if compiled is None or is_partial_offload(params.n_gpu_layers, spec.n_layers):
        return None
    gpus = [d for d in host.devices if d.backend != "cpu" and d.backend in compiled]
    return gpus[0].backend if len(gpus) == 1 else None


def roof_per_probe_tok_s(spec: ModelSpec, params: BenchParams, p: Prediction, depth: int, ext: Extensions) -> float:
    """The low end of the compute roof the CPU backend draws from a thread probe, per probe
    tok/s (0: none): the decode's verdict will take the lower of it and the band's low end.
    Asked at a probe of 1 and of 2 tok/s; used only where the roof scales with the probe."""
    backend = ext.backends.get("cpu")
    if backend is None or not params.probe_threads or params.probe_threads >= params.n_threads:
        return 0.0
    lows = []
    for tok_s in (1, 2):
        probe = ThreadProbe(n_threads=params.probe_threads, n_gen=tok_s, samples_ns=(10**9,))
        context = RunContext(backends_used=("cpu",), n_threads=params.n_threads)
        case = JudgeCase(model=spec, backend="cpu", prediction=p, depth=depth, context=context, probe=probe)
        try:
            roof = backend.compute_roof(case)
        except Exception:  # the verdict calls it again and names the failure; stopping stays cautious
            return 0.0
        lows.append(roof.low_tok_s if roof else 0.0)
    return lows[0] if lows[0] > 0 and math.isclose(lows[1], 2 * lows[0], rel_tol=1e-9) else 0.0


def sweep_threads(
    spec: ModelSpec, params: BenchParams, host: HostReport, engine: Engine, progress: ProgressFn | None
) -> ThreadSweep:
    """Prefill and decode at 1 .. physical cores (+1), at depth 0: the best -t and why it stops."""
    runs = [
        engine.run(spec, replace(params, n_threads=n, probe_threads=None, n_depth=(0,)), host.facts, progress=progress)
        for n in sweep_counts(host.facts)
    ]
    cpu = host.cpu
    return thread_sweep(runs, host.facts, spec.decode_bytes_per_token, cpu.bandwidth_bytes_per_s if cpu else None)


def inputs_of(params: BenchParams, depth: int) -> PredictInputs:
    """Every llama.cpp parameter the run used, as the prediction's inputs."""
    prompt, gen = params.n_prompt[0], params.n_gen[0]
    return PredictInputs(
        depth=depth,
        prompt=prompt,
        gen=gen,
        ctx=depth + prompt + gen + 1,
        cache_type_k=params.type_k,
        cache_type_v=params.type_v,
        n_gpu_layers=params.n_gpu_layers,
        n_batch=params.n_batch,
        n_ubatch=params.n_ubatch,
        flash_attn=params.flash_attn,
    )


def _judge_depth(
    spec: ModelSpec,
    params: BenchParams,
    result: BenchResult,
    target: Target | None,
    backend: str,
    depth: int,
    ext: Extensions,
    split: tuple[Member, ...] = (),
) -> Judged:
    tg_row, pp_row = result.row("tg", depth), result.row("pp", depth)
    if backend == "rpc":
        prediction = split_prediction(spec, target, split, params, depth, ext)
    else:
        prediction = prediction_for(spec, target, inputs_of(params, depth), ext)
        drafting = drafting_of(spec, result.context)
        if prediction is not None and drafting is not None:
            prediction = drafted(prediction, drafting, reach_band())
    case = JudgeCase(
        model=spec,
        backend=backend,
        prediction=prediction,
        measured_tg_tok_s=tg_row.avg_ts if tg_row else None,
        measured_pp_tok_s=pp_row.avg_ts if pp_row else None,
        n_prompt=params.n_prompt[0],
        depth=depth,
        tg_cv=tg_row.cv if tg_row else None,
        pp_cv=pp_row.cv if pp_row else None,
        context=result.context,
        probe=tg_row.probe if tg_row else None,
        tg_samples_tok_s=tuple(tg_row.samples_ts) if tg_row else (),
    )
    return Judged(
        label=f"depth {depth:,}",
        depth=depth,
        prediction=prediction,
        tg=case.measured_tg_tok_s,
        pp=case.measured_pp_tok_s,
        verdict=judge(case, ext.backends, ext.extra_findings),
        tg_row=tg_row,
        pp_row=pp_row,
    )


def drafting_of(spec: ModelSpec, context: RunContext) -> Drafting | None:
    """How a run drafted (a server's command line; its timings' drafted and accepted tokens), or
    None. A server that drafted without saying how is judged as an n-gram drafter of llama.cpp's
    largest default n-max (drafts free): the ceiling the most generous reading allows."""
    given = dict(context.drafting)
    n_drafted, kept = context.draft_n or 0, context.draft_n_accepted or 0
    if not given and not n_drafted:
        return None
    draft = None
    if (path := given.get("model_draft")) is not None:
        with contextlib.suppress(GGProfError, OSError):
            draft = load_model(path)
    kind = given.get("spec_type") or ("draft-simple" if draft is not None else "ngram-cache")
    acceptance = acceptance_from(kept, n_drafted)
    said = f"the server's timings: {kept:,} of {n_drafted:,} drafted tokens accepted" if n_drafted else ""
    try:
        where = DraftPlacement.of(given)
        drafting = drafting_for(
            spec, kind, given.get("spec_draft_n_max"), draft, acceptance, said, draft_placement=where
        )
    except GGProfError:
        return None  # told to draft with what is not here (a draft model elsewhere): judged as plain
    steps = context.draft_steps
    if drafting is None or not steps:
        return drafting
    return replace(drafting, drafted_per_step=n_drafted / steps, tokens_per_step=(steps + kept) / steps)


def split_prediction(
    spec: ModelSpec, target: Target | None, split: tuple[Member, ...], params: BenchParams, depth: int, ext: Extensions
) -> Prediction | None:
    """The prediction over an RPC split (None when its devices are not known: judged unknown)."""
    if not split or target is None:
        return None
    inputs = inputs_of(params, depth)
    return predict_split(spec, target.device, split, inputs, ext, tensor_split=params.tensor_split)


def _split_note(split: tuple[Member, ...]) -> str:
    parts = []
    for m in split:
        link = "an unknown link"
        if m.link:
            rate, rtt_ms = fmt_rate(m.link.throughput_bytes_per_s), m.link.rtt_s * 1e3
            link = f"the {m.link.name} link ({rate}, {rtt_ms:.2g} ms round trip)"
        parts.append(f"{m.device.name} at {m.label} over {link}")
    return "this host with RPC: " + ", ".join(parts)


def backend_of(context: RunContext, ext: Extensions) -> str:
    """The backend that did the work: the plugins say whether a run used them (an accelerator
    before the CPU, which always holds the input embedding)."""
    used = [name for name, b in ext.backends.items() if b.used_by(context)]
    return next((n for n in used if n != "cpu"), used[0] if used else context.backends_used[0])


def gpu_requested(
    host: HostReport, choice: DeviceChoice, params: BenchParams, ext: Extensions
) -> tuple[str, str] | None:
    """The GPU a run asked for (name, backend): a --device profile of a GPU, or a GPU this host
    has with layers to offload (-ngl not 0). None: the run asked for the CPU."""
    if choice.device_id is not None:
        profile = ext.profiles.get(choice.device_id)
        gpus = [b for b in profile.backends if b != "cpu"]
        return (profile.name, gpus[0]) if gpus and "cpu" not in profile.backends else None
    if params.n_gpu_layers == 0:
        return None
    gpu = next((d for d in host.devices if d.backend != "cpu"), None)
    return (gpu.name, gpu.backend) if gpu is not None else None


def gpu_left_out(
    engine: Engine | EnginePlan, host: HostReport, choice: DeviceChoice, params: BenchParams, ext: Extensions
) -> str | None:
    """The warning before a run when the GPU it asks for has no backend in the engine's build
    (the CPU-only llama-cpp-python a plain `pip install` builds), with the rebuild command."""
    requested = gpu_requested(host, choice, params, ext)
    if requested is None:
        return None
    plan = _plan(engine, host)
    compiled = plan.compiled_backends
    if compiled is None or requested[1] in compiled:
        return None
    name, backend = requested
    title = BACKEND_TITLES.get(backend, backend)
    built = "/".join(BACKEND_TITLES.get(b, b) for b in compiled)
    command = rebuild_command(backend)
    rebuild = f"rebuild it with {command}" if command else f"rebuild it with the {title} backend"
    return (
        f"{name} needs llama.cpp's {title} backend, but the {plan.name} engine's build has only {built}: "
        f"this run will use the CPU; {rebuild}, or run your own build with --engine llama-bench=PATH"
    )


def _device_for(backend: str, host: HostReport, choice: DeviceChoice, ext: Extensions) -> Target | None:
    """The device the run used: a given profile or figures, else this host's device of that backend."""
    if not choice.needs_host:
        return resolve_target(choice, profiles=ext.profiles, host=host, backend=backend)
    device = host.device_of(backend)
    if device is None or device.bandwidth is None:
        return None
    when = (
        "measured now"
        if not host.from_cache
        else "cached measurement, refined now"
        if host.refined_now
        else "cached measurement"
    )
    note = f"this host ({device.id}), bandwidth {device.bandwidth.describe()} ({when})"
    return Target(device=device, cpu=host.cpu if device.is_discrete_gpu else None, description=note)


def prediction_for(spec: ModelSpec, target: Target | None, inputs: PredictInputs, ext: Extensions) -> Prediction | None:
    """None when the device has no bandwidth, or a split model's CPU part has none (judged unknown)."""
    if target is None or target.device.bandwidth is None:
        return None
    partial = is_partial_offload(inputs.n_gpu_layers, spec.n_layers)
    if partial and target.device.is_discrete_gpu and (target.cpu is None or target.cpu.bandwidth is None):
        return None
    return predict_with(spec, target, inputs, ext)

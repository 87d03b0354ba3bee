"""`ggprof check --log`: judge every speed in a pasted log against what the log says ran.

Each run of the log (a model load and the speeds after it) gets a model (the file given beside
the log, else an estimate from the log's lines), a device (the log's GPU matched to a profile,
or --device/--bandwidth), the placement the log shows (layers offloaded, the KV cache's
buffer), and each of its speeds is judged by the same rules as `check` and `profile`. This
host is never used for the log's machine.
"""

from __future__ import annotations

import array
import io
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Literal

from ggprof.bench.context import RunContext
from ggprof.bench.llamabench import BadRows, backend_of_row, rows_from_text
from ggprof.errors import BadInputError
from ggprof.llamacpp import physical_batch
from ggprof.logs.figures import BadFigure
from ggprof.logs.model import LogModel, model_from_log
from ggprof.logs.parse import parse_lines
from ggprof.logs.patterns import flash_attn
from ggprof.logs.records import MAX_RUNS, Fact, LogDevice, LogRun, ParsedLog, Speed
from ggprof.logs.text import Line, LogText
from ggprof.logs.triage import Cause, backend_of, causes, every_layer_on_gpu, gpu_device, is_partial, tiny_prefill
from ggprof.machine.device import BuildFacts, Device
from ggprof.machine.profiles import Profile, with_gfx_target
from ggprof.machine.target import DeviceChoice, device_from_profile
from ggprof.model.spec import ModelSpec
from ggprof.pipelines.check import Checker, Reported
from ggprof.pipelines.extensions import Extensions
from ggprof.pipelines.judged import Judged
from ggprof.pipelines.logfacts import drafting_of, named, placed_in_ram
from ggprof.pipelines.logplacement import LogPlacement, log_placement
from ggprof.pipelines.placements import FIT_LEAVES, FitAsked, fit_asked
from ggprof.units import clean_name
from ggprof.verdict.backend import NEEDS_LAYERS_ON_CPU
from ggprof.verdict.finding import RANK, Severity

COMPARE_RATIO = 1.5  # speeds of one kind this far apart in one log are compared


@dataclass
class Measurement:
    run: int
    speed: Speed
    judged: Judged | None
    note: str | None = None  # why it was not judged

    @property
    def severity(self) -> Severity:
        return self.judged.verdict.severity if self.judged is not None else "unknown"


@dataclass
class RunCheck:
    index: int
    run: LogRun
    backend: str
    backend_line: Fact | None
    model: LogModel
    device_note: str  # which device the speeds were judged against, and where it came from
    profile: Profile | None
    missing: list[str] = field(default_factory=list)  # what the log leaves out, and what it costs
    measurements: list[Measurement] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    placement: LogPlacement | None = None  # each device's buffers, --fit's choice, ggprof's bytes

    @property
    def severity(self) -> Severity:
        judged = [m.severity for m in self.measurements]
        return max(judged, key=lambda s: RANK[s]) if judged else "unknown"


@dataclass
class LogCheck:
    log: LogText
    parsed: ParsedLog
    runs: list[RunCheck]
    comparison: list[str]

    @property
    def severity(self) -> Severity:
        s = [r.severity for r in self.runs]
        return max(s, key=lambda x: RANK[x]) if s else "unknown"


def check_log(
    log: LogText,
    ext: Extensions,
    choice: DeviceChoice,
    spec: ModelSpec | None = None,
    backend: str | None = None,
    spill: str | None = None,
) -> LogCheck:
    """Every speed of `log` judged; its lines are streamed through the parser once, never kept;
    `spill`: how the GPU's driver served what was over its memory (a log that loaded a Windows DLL:
    its system-memory fallback)."""
    try:
        parsed = _bench_json(log.lines, log.name)
        if not isinstance(parsed, ParsedLog):
            parsed = parse_lines(parsed)
    except BadFigure as e:
        raise BadInputError(f"{log.name}: {e}") from None
    runs = [_check_run(i, r, log.name, ext, choice, spec, backend, spill) for i, r in enumerate(parsed.runs)]
    return LogCheck(log=log, parsed=parsed, runs=runs, comparison=_compare(runs))


_JSON_PROBE_LINES = 50  # llama-bench JSON names avg_ts within its first rows
LOG_JSON_ITEMS = 400_000  # a log's llama-bench JSON is parsed whole: 9,000 real rows, about 40 MB


def _bench_json(lines: Iterator[Line], name: str) -> ParsedLog | Iterator[Line]:
    """llama-bench's `-o json` / `-o jsonl` pasted as a log: its rows as the run's speeds (one
    run per model file), each row's fields as facts. Else the log's lines, to be read as lines
    (JSON of another shape or a broken paste too: its text is kept to be parsed, within the
    log's caps, and its lines given back from it)."""
    head = list(itertools.islice(lines, _JSON_PROBE_LINES))
    first = next((line.text for line in head if line.text.strip()), "")
    if not first.lstrip().startswith(("[", "{")) or not any('"avg_ts"' in line.text for line in head):
        return itertools.chain(head, lines)
    text, numbers = io.StringIO(), array.array("q")
    for line in itertools.chain(head, lines):
        text.write(line.text)
        text.write("\n")
        numbers.append(line.number)
    try:
        rows = rows_from_text(text.getvalue(), name, max_items=LOG_JSON_ITEMS)
    except BadRows:
        raise  # llama-bench's rows, but with a figure no run can have, or more than may be parsed
    except BadInputError:  # JSON of another shape, or a broken paste: read as lines
        text.seek(0)
        return (Line(n, t.rstrip("\n")) for n, t in zip(numbers, text, strict=False))
    runs: dict[str, LogRun] = {}
    dropped: set[str] = set()
    for row in rows:
        if row.model_filename not in runs and len(runs) >= MAX_RUNS:
            dropped.add(row.model_filename)  # a row of yet another model: no run kept for it
            continue
        run = runs.setdefault(row.model_filename, LogRun(first_line=row.index))
        at = Line(row.index, f"row {row.index}: {row.model_filename or 'model'} {row.test} {row.avg_ts:g} t/s")
        run.setdefault(
            "model_file", clean_name(row.model_filename.replace("\\", "/").rsplit("/", 1)[-1], 200) or None, at
        )
        run.setdefault("model_size_bytes", row.model_size, at)
        run.setdefault("model_params", row.model_n_params, at)
        if row.model_type:
            run.setdefault("model_desc", row.model_type, at)
            run.setdefault("architecture", row.model_type.split(" ")[0][:40], at)
            quant = row.model_type.split(" ", 2)[2:] if len(row.model_type.split(" ")) > 2 else []
            if quant:
                run.setdefault("quant", quant[0][:40], at)
        run.setdefault("threads", row.n_threads, at)
        if row.build_commit:
            run.setdefault("build", f"b{row.build_number or 0} ({row.build_commit})", at)
        backend = backend_of_row(row.backends)
        kind: Literal["prefill", "decode"] = "prefill" if row.n_prompt and not row.n_gen else "decode"
        if row.n_prompt and row.n_gen:
            continue  # a pp+tg test is neither
        n = row.n_prompt if kind == "prefill" else row.n_gen
        run.add_speed(
            Speed(
                kind,
                row.avg_ts,
                n,
                row.index,
                at.text,
                "llama-bench JSON",
                depth=row.n_depth,
                cv=row.stddev_ts / row.avg_ts,
                backend=backend,
                n_gpu_layers=row.n_gpu_layers,
                n_prompt=n if kind == "prefill" else None,
            )
        )
    return ParsedLog(runs=list(runs.values()), formats=["llama-bench JSON"], runs_dropped=len(dropped))


def _profile_for(run: LogRun, backend: str, ext: Extensions) -> tuple[Profile | None, str | None]:
    d = gpu_device(run, backend)
    if d is None:
        return None, None
    return ext.profiles.match(_match_name(d), kinds=("gpu", "soc"))


def _match_name(d: LogDevice) -> str:
    """A log device's name as profiles match it: a ROCm device line's gfx target beside it, which
    names the chip where the name does not ("AMD Radeon Graphics, gfx1151")."""
    return with_gfx_target(d.name, d.compute)


def _check_run(
    index: int,
    run: LogRun,
    name: str,
    ext: Extensions,
    choice: DeviceChoice,
    given: ModelSpec | None,
    backend_override: str | None,
    spill: str | None = None,
) -> RunCheck:
    backend, backend_line = backend_of(run)
    if backend_override:
        backend, backend_line = backend_override, None
    model = (
        LogModel(given, given.path.name, None, (), ())
        if given is not None
        else model_from_log(run, f"{name} (run {index + 1})" if index else name, ext.swa_default)
    )
    missing = list(model.missing)
    profiles = ext.profiles
    chosen = profiles.get(choice.device_id) if choice.device_id else None
    if chosen is not None and chosen.kind == "gpu" and backend == "cpu":
        # the log's run was on the CPU: a GPU's bandwidth is not what it read its weights at
        missing.append(
            f"the CPU's memory: --device {chosen.id} is a GPU, but the run was on the CPU"
            + (f" (line {backend_line.line})" if backend_line else "")
            + "; give --device a memory profile (ddr5-6000-dual) or --bandwidth GB/s"
        )
        chosen = None
    profile, match_note = _profile_for(run, backend, ext) if backend not in ("cpu", "unknown") else (None, None)
    cpu: Device | None = None
    device_choice: DeviceChoice | None
    if chosen is not None and chosen.kind != "cpu-memory":
        device_choice, note = DeviceChoice(device_id=chosen.id, flops=choice.flops), f"profile {chosen.id} (--device)"
        profile = chosen
    elif profile is not None:
        device_choice = DeviceChoice(device_id=profile.id, flops=choice.flops)
        d = gpu_device(run, backend)
        note = f"profile {profile.id}, matched from the log's {_match_name(d) if d else 'device'!r}" + (
            f" ({match_note})" if match_note else ""
        )
    elif backend == "cpu" and (chosen is not None or choice.bandwidth is not None):
        device_choice = DeviceChoice(
            device_id=chosen.id if chosen else None, bandwidth=choice.bandwidth, flops=choice.flops
        )
        note = (
            f"profile {chosen.id} (--device)"
            if chosen
            else f"{choice.bandwidth.detail if choice.bandwidth else ''} (--bandwidth)"
        )
    elif choice.bandwidth is not None and backend != "unknown":
        device_choice = DeviceChoice(bandwidth=choice.bandwidth, flops=choice.flops)
        note = "user-given bandwidth (--bandwidth)"
    else:
        device_choice, note = None, "none"
        d = gpu_device(run, backend)
        if backend == "unknown":
            missing.append("which backend ran the model (no device, offload or buffer line): give --backend")
        elif backend == "cpu":
            if not any(m.startswith("the CPU's memory") for m in missing):
                missing.append(
                    "the CPU's memory bandwidth (a log does not print it): give --device (a memory profile, "
                    "`ggprof profiles`) or --bandwidth GB/s"
                )
        elif d is not None:
            missing.append(f"a profile for {d.name!r} (none matches): give --device ID or --bandwidth GB/s")
        else:
            missing.append("the GPU's name (no device line in the log): give --device ID or --bandwidth GB/s")
    # where the command line put the weights the GPU does not hold: -ncmoe, -nkvo (ggprof.runfacts)
    # ... or where --fit put them, as its lines say (its -ngl and the experts it moved to RAM)
    fitted = log_placement(run, model.spec)
    fit_facts = dict(fitted.fit_facts) if fitted is not None else {}
    placed = placed_in_ram(run) or tuple((n, v) for n, v in fit_facts.items() if n != "n_gpu_layers" and v)
    if (is_partial(run) or (placed and backend != "cpu")) and device_choice is not None:
        if chosen is not None and chosen.kind == "cpu-memory":
            cpu = device_from_profile(chosen)
        elif choice.bandwidth is not None and profile is not None:
            cpu = Device(id="user", name="system RAM (user-given)", backend="cpu", bandwidth=choice.bandwidth)
        else:
            missing.append(
                f"the system RAM's bandwidth for {'the layers not offloaded' if is_partial(run) else named(placed)}: "
                "give --device (a memory profile such as ddr5-6000-dual) or --bandwidth GB/s"
            )
    rc = RunCheck(
        index=index,
        run=run,
        backend=backend,
        backend_line=backend_line,
        model=model,
        device_note=note,
        profile=profile,
        missing=missing,
    )
    rc.causes = causes(run, backend)
    rc.placement = fitted
    if not run.speeds:
        rc.missing.append("any speed (no timing, rate or llama-bench line)")
    spec = model.spec
    spill = spill or ("fallback" if run.value("windows") else None)  # a CUDA GPU's alone (with_spill)
    checker = (
        Checker(spec, device_choice, ext, use_host=False, cpu=cpu, spill=spill)
        if spec is not None and device_choice
        else None
    )
    context = _context(run, backend, spec)
    fit = fit_of_log(run, fitted, context.build_number)
    said_ctx = dict(run.value("command_facts") or ()).get("n_ctx")
    for s in run.speeds:
        if tiny_prefill(s):
            rc.measurements.append(
                Measurement(
                    index, s, None, f"a prompt of {s.n_tokens} tokens is too small a batch to judge a prefill rate"
                )
            )
            continue
        drafting = drafting_of(run, spec) if s.kind == "decode" else None
        if s.kind == "decode" and drafting is None and (spec_fact := run.facts.get("speculative")) is not None:
            rc.measurements.append(
                Measurement(
                    index,
                    s,
                    None,
                    f"speculative decoding ({spec_fact.value}, line {spec_fact.line}): "
                    "several tokens per read of the weights, and the log does not say how it drafted",
                )
            )
            continue
        if placed and backend != "cpu" and cpu is None and checker is not None:
            rc.measurements.append(
                Measurement(index, s, None, f"not judged: {named(placed)} read at the RAM's bandwidth, not known")
            )
            continue
        if checker is None:
            rc.measurements.append(
                Measurement(
                    index,
                    s,
                    None,
                    "not judged: " + ("no model estimate" if spec is None else "no figures for the device"),
                )
            )
            continue
        assert spec is not None  # a checker is made only with a model
        ngl = run.value("layers_offloaded") if is_partial(run) else None
        ngl = s.n_gpu_layers if s.n_gpu_layers is not None and s.n_gpu_layers < (spec.n_layers + 1) else ngl
        depth = min(s.depth, max(spec.context_length - 1, 0)) if spec.context_length else s.depth
        r = Reported(
            tg_tok_s=s.tok_s if s.kind == "decode" else None,
            pp_tok_s=s.tok_s if s.kind == "prefill" else None,
            depth=depth,
            n_prompt=s.n_tokens or 512 if s.kind == "prefill" else 512,
            backend=backend if backend != "unknown" else None,
            n_gpu_layers=ngl if backend != "cpu" else None,
            placement=(placed_in_ram(run, s) or placed) if backend != "cpu" else (),
            drafting=drafting,
            cv=s.cv,
            model_uncertainty=model.uncertainty,  # the estimate's spread widens the tolerance, as noise does
            label=f"{s.kind} {s.tok_s:,.4g} tok/s (line {s.line})",
            context=context,
            build=build_facts(run, backend, context, s),
            fit=fit if backend != "cpu" else None,
            n_ctx=(said_ctx or spec.context_length) if fit and said_ctx is not None else None,  # -c 0: the model's
        )
        judged = checker.check(r)
        known = model.source != "the log" or run.value("n_layers") or run.value("layers_total")
        shown = every_layer_on_gpu(run, s, spec.n_layers if known else None)
        if backend not in ("cpu", "unknown") and shown is not None:
            judged = _ruled_out(judged, shown)
        rc.measurements.append(Measurement(index, s, judged))
    return rc


def fit_of_log(run: LogRun, fitted: LogPlacement | None, build: int | None) -> FitAsked | None:
    """Whether llama.cpp's --fit placed a log's run without its lines saying what it chose (a log at
    the default verbosity): its command line says --fit on, -fitt or -fitc, or its build fits
    unasked (b7474 on, not llama-bench), and it gives no -ngl, -ncmoe, -ot or -ts and no offload
    line. None: not, or its own lines said (log_placement reads them)."""
    if (fitted is not None and fitted.fit) or run.value("layers_offloaded") is not None:
        return None
    given = dict(run.value("command_facts") or ())
    if any(given.get(n) not in (None, 0, ()) for n in FIT_LEAVES):
        return None
    bench = "llama-bench" in str(run.value("command") or "")  # it never fits unasked
    said, target, min_ctx = given.get("fit"), given.get("fit_target"), given.get("fit_min_ctx")
    return fit_asked(said, target, min_ctx, given.get("n_ctx") is not None, None if bench else build)


def _ruled_out(judged: Judged, shown: str) -> Judged:
    """The findings without the causes the log's own facts rule out (layers left on the CPU where
    it shows every layer on the GPU), each named in the evidence with the fact that rules it out."""
    findings = []
    for f in judged.verdict.findings:
        out = [c for c in f.causes if c.startswith(NEEDS_LAYERS_ON_CPU)]
        if out:
            why = tuple(f"ruled out by the log: {c.split(':')[0].split(' (')[0]} ({shown})" for c in out)
            f = replace(f, causes=tuple(c for c in f.causes if c not in out), evidence=(*f.evidence, *why))
        findings.append(f)
    return replace(judged, verdict=replace(judged.verdict, findings=tuple(findings)))


def build_facts(run: LogRun, backend: str, context: RunContext, speed: Speed | None = None) -> BuildFacts | None:
    """What the bands use of a log's build: its number, on Vulkan the banner's matrix cores,
    int8 dot products and driver, on SYCL its GGML_SYCL_F16 and reorder optimizations, and the
    context's flash attention (`flash_attn = 1`, `enabled`; `auto` says nothing), or the speed's
    own (a llama-bench table's fa column) (a log does not show a ROCm run's ROCBLAS_USE_HIPBLASLT)."""
    d = gpu_device(run, backend) if backend == "vulkan" else None
    f16 = run.value("sycl_f16") if backend == "sycl" else None
    reorder = run.value("sycl_reorder") if backend == "sycl" else None
    build = BuildFacts(
        number=context.build_number,
        matrix_cores=d.matrix_cores if d else None,
        int_dot=d.int_dot if d else None,
        vulkan_driver=d.driver if d else None,
        sycl_f16=f16 if isinstance(f16, bool) else None,
        sycl_reorder=reorder if isinstance(reorder, bool) else None,
        flash_attn=(
            speed.flash_attn
            if speed is not None and speed.flash_attn is not None
            else flash_attn(run.value("flash_attn"))
        ),
        n_ubatch=(
            speed.n_ubatch
            if speed is not None and speed.n_ubatch is not None
            else physical_batch(run.value("n_ubatch"), run.value("n_batch"))
        ),
    )
    return build if build else None


def _context(run: LogRun, backend: str, spec: ModelSpec | None) -> RunContext:
    ngl = run.value("n_gpu_layers_requested")
    offloaded = run.value("layers_offloaded")
    d = run.devices[0] if run.devices else None
    requested = None
    if backend == "cpu" and (run.warnings or (ngl and offloaded == 0)):
        requested = d.name if d else "a GPU"
    build = run.value("build") or ""
    number = int(build[1:].split()[0]) if build.startswith("b") and build[1:].split()[0].isdigit() else None
    compiled = tuple(run.value("backends_compiled") or run.value("backends_loaded") or ())
    used = (backend,) if backend in ("cpu", "unknown") else ((backend, "cpu") if is_partial(run) else (backend,))
    return RunContext(
        backends_used=used if backend != "unknown" else ("unknown",),
        engine="log",
        build_number=number,
        build_commit=build.split("(")[-1].rstrip(")") if "(" in build else None,
        gpu_info=d.name if d else "",
        gpu_requested=requested,
        gpu_requested_backend=d.backend if requested and d else None,
        n_threads=run.value("threads"),
        n_gpu_layers_requested=ngl,
        n_gpu_layers_offloaded=offloaded,
        n_layers=spec.n_layers if spec else run.value("n_layers"),
        backends_compiled=(*(b for b in compiled if b != "cpu"), "cpu") if compiled else (),
    )


def _shown(v: object) -> object:
    return "not in the log" if v is None else v


def _compare(runs: list[RunCheck]) -> list[str]:
    """Speeds of one kind far apart in one log: before and after a change, side by side."""
    out = []
    for kind in ("decode", "prefill"):
        ms = [m for r in runs for m in r.measurements if m.speed.kind == kind and not tiny_prefill(m.speed)]
        if len(ms) < 2:
            continue
        lo = min(ms, key=lambda m: m.speed.tok_s)
        hi = max(ms, key=lambda m: m.speed.tok_s)
        if hi.speed.tok_s < COMPARE_RATIO * lo.speed.tok_s:
            continue
        line = (
            f"{kind}: {hi.speed.tok_s:,.4g} tok/s (line {hi.speed.line}) vs {lo.speed.tok_s:,.4g} tok/s "
            f"(line {lo.speed.line}): {hi.speed.tok_s / lo.speed.tok_s:.1f}x apart"
        )
        if hi.run != lo.run:
            a, b = runs[hi.run].run, runs[lo.run].run
            diffs = [
                k
                for k in (
                    "layers_offloaded",
                    "threads",
                    "build",
                    "n_ctx",
                    "flash_attn",
                    "n_gpu_layers_requested",
                    "quant",
                )
                if a.value(k) != b.value(k) and (a.value(k) is not None or b.value(k) is not None)
            ]
            if diffs:
                line += "; the runs differ in " + ", ".join(
                    f"{k} ({_shown(a.value(k))} vs {_shown(b.value(k))})" for k in diffs
                )
        out.append(line)
    return out

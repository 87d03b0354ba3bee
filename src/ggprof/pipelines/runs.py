"""A run's life, from the options the command line parsed to its results: the engine built and
prepared, the model resolved, the parameters made, the host measured, the servers probed, the
run started, watched and stopped. `bench` and `profile` hand their requests here and print
what comes back; no process is started or stopped, and no engine is built, anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ggprof.bench.results import BenchParams, BenchResult
from ggprof.bench.stopping import StopRule
from ggprof.engines import CAPABILITIES, Engine, ModelSource, engine_from
from ggprof.errors import BadInputError
from ggprof.llamacpp import GGML_MAX_N_THREADS, REPETITIONS, STOP_TARGET
from ggprof.machine.facts import HostFacts
from ggprof.machine.host import HostReport, describe_host
from ggprof.machine.target import DeviceChoice
from ggprof.model.spec import ModelSpec
from ggprof.pipelines.extensions import Extensions
from ggprof.pipelines.rpc import RpcChoice
from ggprof.units import MAX_TOKENS, clean_name, warn


class Progress(Protocol):
    """What shows a run's progress (the CLI's bar): called per repetition, closed at the end."""

    def __call__(self, test: str, rep: int, reps: int) -> None: ...

    def close(self) -> None: ...


ProgressFactory = Callable[[int], Progress]  # total steps -> a progress


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """llama-bench's options as `bench` and `profile` take them, parsed (lists still as given)."""

    model: str | None
    prompt: str = "512"
    gen: str = "128"
    depth: str = "0"
    engine: str | None = None
    threads: str | None = None
    reps: int | None = None
    timeout_s: float | None = None
    repack: str = "auto"
    facts: dict[str, Any] = field(default_factory=dict)  # run facts (ggprof.runfacts): n_ubatch, -fa, ...
    rpc: RpcChoice = field(default_factory=RpcChoice)


def int_list(text: str, name: str, low: int = 0, high: int = MAX_TOKENS) -> tuple[int, ...]:
    """'512' or '0,4096' -> (0, 4096); an empty item, a value outside low..high or anything
    malformed is one error, worded the same for every list option."""
    shown = clean_name(text, 60)
    parts = [v.strip() for v in text.split(",")]
    whole = all(v.lstrip("-").isdigit() and v.count("-") <= int(v.startswith("-")) and len(v) <= 11 for v in parts)
    if not whole or len(parts) > 64:
        raise BadInputError(f"{name} takes whole numbers separated by commas (up to 64), got {shown!r}")
    values = tuple(int(v) for v in parts)
    if any(v < low for v in values):
        raise BadInputError(f"{name} values must be {low} or more, got {shown!r}")
    if any(v > high for v in values):
        limit = f"{high} (llama.cpp's int32)" if high == MAX_TOKENS else str(high)
        raise BadInputError(f"{name} values must be at most {limit}, got {shown!r}")
    return values


def check_model_context(spec: ModelSpec, tokens: int, what: str) -> None:
    """`tokens` (depth + prompt + gen) must fit the context the model was trained for: bench and
    check refuse the same numbers with the same words."""
    if spec.context_length and tokens > spec.context_length:
        raise BadInputError(f"{what} = {tokens:,} is over the model's context length {spec.context_length:,}")


def thread_counts(threads: str | None, facts: HostFacts) -> tuple[int, ...]:
    """-t N or -t 1,2,4 (each 1 to GGML_MAX_N_THREADS); the default is the physical (performance)
    cores this process may use (its affinity set and cgroup quota: HostFacts.default_threads)."""
    counts = int_list(threads, "-t", low=1, high=GGML_MAX_N_THREADS) if threads else (facts.default_threads,)
    for n in counts:
        if n > facts.usable_cores < facts.physical_cores and facts.cpus is not None:
            warn(
                f"-t {n} is more than the {facts.usable_cores} cores this process may use "
                f"(limited by {facts.cpus.limited_by}): llama.cpp's threads will wait for CPU time"
            )
        elif n > facts.logical_cores:
            warn(
                f"-t {n} is more than this machine's {facts.logical_cores} logical cores: "
                "llama.cpp's threads will contend for them"
            )
    return counts


def make_bench_params(
    spec: ModelSpec, path: Path, facts: HostFacts, request: RunRequest, adaptive: bool = False
) -> BenchParams:
    """The run's parameters (with the first of -t's counts; `thread_counts` gives all of them).
    `adaptive`: without -r, repeat each test until its tok/s is known (`profile`)."""
    p, n, d = int_list(request.prompt, "-p"), int_list(request.gen, "-n"), int_list(request.depth, "-d")
    if not any(p) and not any(n):
        raise BadInputError("nothing to run: -p and -n are both 0")
    check_model_context(spec, max(d) + max(p) + max(n) + 1, "depth + prompt + gen + 1")
    reps, stop = request.reps, None
    if reps is None:  # no -r: the main job stops when the answer is known; bench runs llama-bench's 5
        reps, stop = REPETITIONS, StopRule(target=STOP_TARGET) if adaptive else None
    return BenchParams(
        model=path,
        n_prompt=p,
        n_gen=n,
        n_depth=d,
        reps=reps,
        stop=stop,
        n_threads=thread_counts(request.threads, facts)[0],
        timeout_s=request.timeout_s,
        repack=request.repack,
        **request.facts,
    )


def build_engine(text: str | None, ext: Extensions) -> Engine:
    """`--engine NAME[=OPTION]` among the registered engines."""
    return engine_from(text, ext.engines)


def check_capabilities(engine: Engine, given: dict[str, bool], ext: Extensions) -> None:
    """Each flag given whose measurement the engine cannot make (engines.CAPABILITIES): one
    error, naming the engines that can."""
    for flag, attribute, what in CAPABILITIES:
        if given.get(flag) and not getattr(engine, attribute, False):
            able = sorted(n for n, factory in ext.engines.items() if getattr(factory, attribute, False))
            raise BadInputError(
                f"{flag} measures {what}, which the {engine.name} engine cannot"
                + (f"; engines that can: {', '.join(able)}" if able else "")
                + ("; --server [URL] runs the server engine" if "server" in able else "")
            )


@dataclass(frozen=True, kw_only=True)
class BenchOutcome:
    spec: ModelSpec
    facts: HostFacts
    params: BenchParams
    results: list[BenchResult]


def run_bench(
    request: RunRequest,
    ext: Extensions,
    source: ModelSource,
    progress: ProgressFactory,
    parallel: tuple[int, ...] | None = None,
) -> BenchOutcome:
    """`ggprof bench`: the run at each of -t's thread counts (a batch sweep with `parallel`)."""
    from ggprof.pipelines.profile import gpu_left_out

    engine = build_engine(request.engine, ext)
    given = {"-d": set(int_list(request.depth, "-d")) != {0}, "--rpc": request.rpc.active}
    check_capabilities(engine, {**given, "--parallel": parallel is not None}, ext)
    spec = source.load(request.model)
    path = spec.path
    host = describe_host(ext.backends.values(), ext.profiles, measure=False)
    facts = host.facts
    counts = thread_counts(request.threads, facts)
    params = make_bench_params(spec, path, facts, request)
    params = replace(params, rpc=request.rpc.endpoints, tensor_split=request.rpc.tensor_split)
    if request.rpc.endpoints:
        from ggprof.pipelines.rpc import probe_servers

        probe_servers(request.rpc.endpoints, measure=False)  # a wrong endpoint fails now, in one line
    if (left_out := gpu_left_out(engine, host, DeviceChoice(), params, ext)) is not None:
        warn(left_out)
    if parallel is not None:
        from ggprof.pipelines.sweep import check_batch_memory

        params = replace(params, n_parallel=parallel, n_prompt=(0,), n_depth=(0,))
        check_batch_memory(spec, parallel, params.n_gen[0], facts)
    bar = progress(len(params.tests()) * params.reps * len(counts))
    try:
        results = [engine.run(spec, replace(params, n_threads=n), facts, progress=bar) for n in counts]
    finally:
        bar.close()
    return BenchOutcome(spec=spec, facts=facts, params=params, results=results)


@dataclass(frozen=True, kw_only=True)
class ProfileRequest:
    """`ggprof profile`'s request beyond llama-bench's options."""

    run: RunRequest
    choice: DeviceChoice
    server: str | None = None  # --server [URL] ("" for the usual ports)
    concurrency: tuple[int, ...] | None = None
    threads_sweep: bool = False
    ignore_load: bool = False


@dataclass(frozen=True, kw_only=True)
class ProfileOutcome:
    report: Any  # ggprof.pipelines.profile.ProfileReport
    spec: ModelSpec
    host: HostReport


def run_profile_request(
    request: ProfileRequest,
    ext: Extensions,
    source: ModelSource,
    progress: ProgressFactory,
    say: Callable[[str], None],
) -> ProfileOutcome:
    """The main job, from its request to its report: the engine built and prepared, the model
    resolved, the load sampled, the host measured, an RPC split probed, the run made and judged."""
    from ggprof.machine.facts import gather_facts
    from ggprof.machine.load import sample_load
    from ggprof.physics.rpc import Member
    from ggprof.pipelines.profile import busy_note, for_load, gpu_left_out, run_profile
    from ggprof.pipelines.sweep import sweep_counts

    run, rpc = request.run, request.run.rpc
    if run.threads and len(int_list(run.threads, "-t", low=1, high=GGML_MAX_N_THREADS)) > 1:
        raise BadInputError("profile runs at one -t; --threads-sweep sweeps 1 .. the physical cores")
    engine_text = run.engine
    if request.server is not None:
        if engine_text not in (None, "python", "server") and not (engine_text or "").startswith("server="):
            raise BadInputError("--server measures the server: leave out --engine")
        engine_text = f"server={request.server}" if request.server else "server"
    engine = build_engine(engine_text, ext)
    given = {
        "-d": set(int_list(run.depth, "-d")) != {0},
        "--rpc": rpc.active,
        "--threads-sweep": request.threads_sweep,
        "--concurrency": bool(request.concurrency),
    }
    check_capabilities(engine, given, ext)
    if rpc.devices and not rpc.endpoints:
        raise BadInputError("--rpc-device describes the servers of --rpc HOST:PORT,...: give --rpc too")
    engine.timeout_s = run.timeout_s  # every request it makes before the run is bounded by it too
    engine.prepare(run.model)  # a bad engine option (a server's URL) fails before anything is measured
    spec = engine.resolve_model(run.model, source)
    facts = gather_facts()
    # the run's parameters before anything is measured: a bad -p, -n or -d fails at once
    params = make_bench_params(spec, spec.path, facts, run, adaptive=True)
    if request.concurrency is not None:
        params = replace(params, n_parallel=request.concurrency)
    # how busy this machine is, before anything is measured on it (a remote server's is not)
    load = sample_load(facts.cpus.affinity if facts.cpus else None) if engine.runs_on_this_host() else None
    if (busy := busy_note(load, shortened=not request.ignore_load)) is not None:
        warn(busy)
    if request.ignore_load:
        load = None  # named, not acted on
    say("measuring the host (or reusing its cached measurement) and running llama.cpp...")
    host = describe_host(ext.backends.values(), ext.profiles, measure=True, quick=True, refine=True, facts=facts)
    for w in host.warnings:
        warn(w)
    split: tuple[Member, ...] = ()
    if rpc.active:
        from ggprof.pipelines.rpc import measure_local_devices, probe_servers, split_members

        near = getattr(engine, "program", None)
        servers = probe_servers(rpc.endpoints, near=near() if callable(near) else None)
        split = split_members(rpc, servers, ext.profiles, host.cpu)
        params = replace(params, rpc=rpc.endpoints, tensor_split=rpc.tensor_split)
        split = measure_local_devices(spec, params, engine, host.facts, split)
    engine.attach(host)
    plan = engine.plan(host.facts)  # asked once; passed down
    if (left_out := gpu_left_out(plan, host, request.choice, params, ext)) is not None:
        warn(left_out)
    params = for_load(params, load)
    sweep_runs = len(sweep_counts(host.facts)) * (len(params.tests()) // max(len(params.n_depth), 1))
    tests = engine.planned_tests(params)
    bar = progress((tests + (sweep_runs if request.threads_sweep else 0)) * params.max_reps)
    try:
        report = run_profile(
            spec,
            params,
            request.choice,
            ext,
            engine,
            host=host,
            progress=bar,
            threads_sweep=request.threads_sweep,
            split=split,
            load=load,
            plan=plan,
        )
    finally:
        bar.close()
    return ProfileOutcome(report=report, spec=spec, host=host)

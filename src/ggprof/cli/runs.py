"""Commands that run or judge: bench, profile, check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ggprof.cli.base import (
    LAYERS,
    ON_OFF,
    POSITIVE_TOKENS,
    TOK_S,
    TOKENS,
    bench_options,
    check_capabilities,
    check_model_context,
    check_plot,
    cli,
    device_options,
    draw,
    extensions,
    int_list,
    load_model_arg,
    make_bench_params,
    model_source,
    on_off,
    parse_build_number,
    parse_vulkan_driver,
    remote_options,
    resolve_engine,
    resolve_model,
    rpc_options,
    show,
    thread_counts,
)
from ggprof.cli.history import db_options, record, save_run
from ggprof.llamacpp import GGML_MAX_N_THREADS, N_PROMPT
from ggprof.machine.device import HIPBLASLT_SETTINGS, MATRIX_CORES, BuildFacts
from ggprof.units import clean_name, warn

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ggprof.bench.llamabench import LlamaBenchRow
    from ggprof.machine.target import DeviceChoice
    from ggprof.physics.rpc import Member
    from ggprof.pipelines.judged import Judged
    from ggprof.pipelines.rpc import RpcChoice
    from ggprof.verdict.finding import Severity


@cli.command()
@click.argument("model", metavar="[MODEL.gguf]", required=False)
@bench_options
@click.option(
    "-o",
    "--output",
    "fmt",
    type=click.Choice(["table", "md", "csv", "json", "jsonl"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.option("--json", "as_json", is_flag=True, help="Same as -o json.")
@click.option(
    "--parallel",
    metavar="B[,B...]",
    help="Decode B sequences together (a batch sweep: 1,2,4,8,16); generation only, -n tokens each.",
)
@click.option("--plot", type=click.Path(dir_okay=False), help="With --parallel: draw the curves (.png or .svg).")
@rpc_options
@db_options
def bench(
    model: str | None,
    rpc: RpcChoice,
    fmt: str,
    as_json: bool,
    parallel: str | None,
    plot: str | None,
    db: str | None,
    no_save: bool,
    prompt: str,
    gen: str,
    depth: str,
    **kw: Any,
) -> None:
    """Measure prefill (pp) and decode (tg) through llama.cpp, like llama-bench, in a child process.

    Without MODEL, runs the default synthetic model (see `ggprof synth --list`). -t takes a
    list to sweep threads; --parallel a list of batch sizes.
    """
    from dataclasses import replace

    from ggprof.bench.llamabench import render
    from ggprof.cli.progress import ProgressBar
    from ggprof.machine.host import describe_host
    from ggprof.machine.target import DeviceChoice
    from ggprof.pipelines.profile import gpu_left_out

    if as_json and fmt not in ("table", "json"):
        raise click.UsageError(f"--json and -o {fmt} contradict each other: give one output format")
    if plot is not None and parallel is None:
        raise click.UsageError("--plot draws a batch sweep: give --parallel too")
    plot_path = check_plot(plot)
    engine = resolve_engine(kw["engine"])
    check_capabilities(
        engine, {"-d": set(int_list(depth, "-d")) != {0}, "--rpc": rpc.active, "--parallel": parallel is not None}
    )
    spec, path = resolve_model(model)
    ext = extensions()
    host = describe_host(ext.backends.values(), ext.profiles, measure=False)
    facts = host.facts
    counts = thread_counts(kw.get("threads"), facts)
    params = make_bench_params(spec, path, facts, prompt, gen, depth, **kw)
    params = replace(params, rpc=rpc.endpoints, tensor_split=rpc.tensor_split)
    if rpc.endpoints:
        from ggprof.pipelines.rpc import probe_servers

        probe_servers(rpc.endpoints, measure=False)  # a wrong endpoint fails now, in one line
    if (left_out := gpu_left_out(engine, host, DeviceChoice(), params, ext)) is not None:
        warn(left_out)
    if parallel is not None:
        from ggprof.pipelines.sweep import check_batch_memory

        batches = int_list(parallel, "--parallel", low=1, high=4096)
        params = replace(params, n_parallel=batches, n_prompt=(0,), n_depth=(0,))
        check_batch_memory(spec, batches, params.n_gen[0], facts)
    bar = ProgressBar(len(params.tests()) * params.reps * len(counts))
    try:
        results = [engine.run(spec, replace(params, n_threads=n), facts, progress=bar) for n in counts]
    finally:
        bar.close()
    if parallel is None:
        click.echo(render(results, "json" if as_json else fmt))
        _save_bench(db, no_save, spec, facts, results)
        return
    from ggprof.pipelines.sweep import batch_sweep
    from ggprof.report.sweep import batch_sweep_dict, batch_sweep_text

    sweeps = [(r, batch_sweep(r, _ridge_prediction(spec, params))) for r in results]
    show(as_json or fmt == "json", batch_sweep_dict, batch_sweep_text, sweeps)
    _save_bench(db, no_save, spec, facts, results)
    if plot_path is not None:
        from ggprof.report.plots import plot_batch_sweeps

        draw(lambda p: plot_batch_sweeps(sweeps, p), plot_path)


def _save_bench(db: str | None, no_save: bool, spec: Any, facts: Any, results: list[Any]) -> None:
    from ggprof.bench.llamabench import context_dict, row_dict

    rows = [row_dict(res, r) for res in results for r in res.rows]
    result = {"rows": rows, "context": context_dict(results[0]) if results else None}
    save_run(db, no_save, lambda: record("bench", spec, facts, [], result))


def _ridge_prediction(spec: Any, params: Any) -> Any:
    """This host's prediction at the sweep's average depth, for the predicted ridge (None: unknown)."""
    from ggprof.errors import BadInputError
    from ggprof.machine.target import DeviceChoice
    from ggprof.physics.roofline import PredictInputs
    from ggprof.pipelines.predict import predict_on

    n = params.n_gen[0]
    try:
        return predict_on(spec, PredictInputs(depth=n // 2, prompt=1, gen=n, ctx=n + 1), DeviceChoice(), extensions())[
            0
        ]
    except BadInputError:
        return None


@cli.command()
@click.argument("model", metavar="[MODEL.gguf]", required=False)
@bench_options
@device_options
@click.option(
    "--threads-sweep", is_flag=True, help="Also run at 1 .. physical cores (+1): the best -t, and why it stops."
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    help="Draw the roofline (and with --threads-sweep the thread curve, as FILE-threads): .png or .svg.",
)
@click.option(
    "--server",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[URL]",
    help="Measure a running llama-server, Ollama or LM Studio (without URL: the usual local ports).",
)
@click.option(
    "--concurrency",
    metavar="N[,N...]",
    help="With --server: also send N requests at once (1,2,4,8): aggregate and per-user tok/s per level.",
)
@click.option(
    "--ignore-load",
    is_flag=True,
    help="Run in full even when other processes keep the CPUs busy (a busy machine gets a shorter run).",
)
@rpc_options
@db_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def profile(
    model: str | None,
    choice: DeviceChoice,
    rpc: RpcChoice,
    threads_sweep: bool,
    server: str | None,
    concurrency: str | None,
    ignore_load: bool,
    plot: str | None,
    db: str | None,
    no_save: bool,
    as_json: bool,
    prompt: str,
    gen: str,
    depth: str,
    **kw: Any,
) -> int:
    """The main job: inspect, measure the host, predict, run llama.cpp, and judge the result.

    Without MODEL, profiles the default synthetic model. Exit status from the worst finding:
    0 plausible (or unknown), 3 suspicious, 4 impossible.
    """
    from dataclasses import replace

    from ggprof.cli.progress import ProgressBar
    from ggprof.machine.facts import gather_facts
    from ggprof.machine.host import describe_host
    from ggprof.machine.load import sample_load
    from ggprof.pipelines.profile import busy_note, for_load, gpu_left_out, run_profile
    from ggprof.pipelines.sweep import sweep_counts
    from ggprof.report.verdict import profile_dict, profile_text
    from ggprof.verdict.finding import EXIT

    ext = extensions()
    plot_path = check_plot(plot)
    if kw.get("threads") and len(int_list(kw["threads"], "-t", low=1, high=GGML_MAX_N_THREADS)) > 1:
        raise click.UsageError("profile runs at one -t; --threads-sweep sweeps 1 .. the physical cores")
    if server is not None:
        if kw["engine"] not in ("python", "server") and not kw["engine"].startswith("server="):
            raise click.UsageError("--server measures the server: leave out --engine")
        kw["engine"] = f"server={server}" if server else "server"
    engine = resolve_engine(kw["engine"])
    check_capabilities(
        engine,
        {
            "-d": set(int_list(depth, "-d")) != {0},
            "--rpc": rpc.active,
            "--threads-sweep": threads_sweep,
            "--concurrency": bool(concurrency),
        },
    )
    if rpc.devices and not rpc.endpoints:
        raise click.UsageError("--rpc-device describes the servers of --rpc HOST:PORT,...: give --rpc too")
    engine.timeout_s = kw.get("timeout_s")  # every request it makes before the run is bounded by it too
    engine.prepare(model)  # a bad engine option (a server's URL) fails before anything is measured
    spec = engine.resolve_model(model, model_source())
    path = spec.path
    facts = gather_facts()
    # the run's parameters before anything is measured: a bad -p, -n or -d fails at once
    params = make_bench_params(spec, path, facts, prompt, gen, depth, adaptive=True, **kw)
    if concurrency is not None:
        params = replace(params, n_parallel=int_list(concurrency, "--concurrency", low=1, high=256))
    # how busy this machine is, before anything is measured on it (a remote server's is not)
    load = sample_load(facts.cpus.affinity if facts.cpus else None) if engine.runs_on_this_host() else None
    if (busy := busy_note(load, shortened=not ignore_load)) is not None:
        warn(busy)
    if ignore_load:
        load = None  # named, not acted on
    if not as_json:
        click.echo("measuring the host (or reusing its cached measurement) and running llama.cpp...", err=True)
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
    if (left_out := gpu_left_out(plan, host, choice, params, ext)) is not None:
        warn(left_out)
    params = for_load(params, load)
    sweep_runs = len(sweep_counts(host.facts)) * (len(params.tests()) // max(len(params.n_depth), 1))
    tests = engine.planned_tests(params)
    bar = ProgressBar((tests + (sweep_runs if threads_sweep else 0)) * params.max_reps)
    try:
        report = run_profile(
            spec,
            params,
            choice,
            ext,
            engine,
            host=host,
            progress=bar,
            threads_sweep=threads_sweep,
            split=split,
            load=load,
            plan=plan,
        )
    finally:
        bar.close()
    result = profile_dict(report)
    show(as_json, lambda r: result, profile_text, report)
    devices = [d.name for d in host.devices if d.backend != "cpu"]
    save_run(db, no_save, lambda: record("profile", spec, host.facts, devices, result))
    if plot_path is not None:
        from ggprof.report.plots import plot_roofline, plot_thread_sweep

        draw(lambda p: plot_roofline(result, p), plot_path)
        if (sweep := report.threads) is not None:
            threads_path = plot_path.with_name(f"{plot_path.stem}-threads{plot_path.suffix}")
            draw(lambda p: plot_thread_sweep(sweep, p), threads_path)
    return int(EXIT[report.severity])


@cli.command()
@click.argument("model", metavar="[MODEL.gguf]", required=False)
@remote_options
@click.option("--tg", "tg", type=float, callback=TOK_S, help="Reported decode speed, tok/s.")
@click.option("--pp", "pp", type=float, callback=TOK_S, help="Reported prefill speed, tok/s.")
@click.option("--depth", type=TOKENS, default=0, show_default=True, help="KV depth of the report.")
@click.option(
    "--prompt",
    "n_prompt",
    type=POSITIVE_TOKENS,
    default=N_PROMPT,
    show_default=True,
    help="Prompt length behind --pp.",
)
@device_options
@click.option(
    "--backend",
    callback=lambda ctx, param, value: value.strip().lower() if value else value,
    help="The backend that ran it: cpu, cuda, metal, vulkan, rocm, sycl (llama-bench's spelling too: CUDA, ROCm).",
)
@click.option("--n-gpu-layers", "-ngl", type=LAYERS, help="Layers offloaded in the report.")
@click.option(
    "--build",
    "build_number",
    metavar="BUILD",
    callback=parse_build_number,
    help=(
        "The report's llama.cpp build (5315 or b5315): its age sets the prompt band (Vulkan, ROCm), "
        "and builds before b4200 are judged by their era."
    ),
)
@click.option(
    "--matrix-cores",
    type=click.Choice(MATRIX_CORES, case_sensitive=False),
    help="What the report's ggml_vulkan banner says of matrix cores (with --backend vulkan): the prefill ceiling.",
)
@click.option(
    "--int-dot",
    type=click.Choice(("0", "1")),
    help="What the report's ggml_vulkan banner says of int dot (with --backend vulkan; with --build, "
    "whether its int8 dot-product kernels set the prefill ceiling).",
)
@click.option(
    "--vulkan-driver",
    metavar="NAME",
    callback=parse_vulkan_driver,
    help="The driver the report's ggml_vulkan banner names, its last parenthesis (with --backend vulkan): "
    "radv, NVIDIA, Honeykrisp, AMD open-source driver (AMDVLK); a slow prompt names a driver known to be slow.",
)
@click.option(
    "--rocblas-use-hipblaslt",
    "hipblaslt",
    type=click.Choice(HIPBLASLT_SETTINGS),
    help="The report's ROCBLAS_USE_HIPBLASLT (with --backend rocm): a slow prompt names rocBLAS without hipBLASLt.",
)
@click.option(
    "--sycl-f16",
    type=click.Choice(("yes", "no")),
    help="What the report's SYCL log says of GGML_SYCL_F16 (with --backend sycl): the prefill ceiling "
    "(the XMX units with it, the vector units without).",
)
@click.option(
    "--flash-attn",
    type=ON_OFF,
    callback=on_off,
    help="Whether the reported run used flash attention (llama-bench's -fa 1, a log's `flash_attn = 1`): "
    "on ROCm, a slow prompt with it on names a build without rocWMMA's kernels as a cause to check.",
)
@click.option(
    "-ub",
    "--ubatch-size",
    "n_ubatch",
    type=POSITIVE_TOKENS,
    help="The reported run's physical batch (llama-bench's and llama.cpp's -ub, at most its -b; a log's "
    "`n_ubatch`): a slow prompt below 512 names it, with how much speed public runs lost at that size; "
    "512 or more rules it out.",
)
@click.option(
    "--sycl-reorder",
    type=ON_OFF,
    callback=on_off,
    help="Whether the report's SYCL run reordered quantized weights (with --backend sycl; its log's "
    "`GGML_SYCL_ENABLE_OPT: 1`, or `GGML_SYCL_DISABLE_OPT: 0` on older builds, is on): a slow decode with "
    "them off names it.",
)
@click.option(
    "--llama-bench",
    "llama_bench",
    metavar="FILE",
    help="Judge each row of llama-bench's JSON (-o json or jsonl) output (- for stdin).",
)
@click.option(
    "--log",
    "log_path",
    metavar="FILE",
    help="Judge every speed in a pasted llama.cpp, llama-server, llama-bench or Ollama log (- for stdin).",
)
@rpc_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def check(
    model: str | None,
    rpc: RpcChoice,
    tg: float | None,
    pp: float | None,
    depth: int,
    n_prompt: int,
    choice: DeviceChoice,
    backend: str | None,
    n_gpu_layers: int | None,
    build_number: int | None,
    matrix_cores: str | None,
    int_dot: str | None,
    vulkan_driver: str | None,
    hipblaslt: str | None,
    sycl_f16: str | None,
    sycl_reorder: bool | None,
    flash_attn: bool | None,
    n_ubatch: int | None,
    llama_bench: str | None,
    log_path: str | None,
    as_json: bool,
) -> int:
    """Judge a reported number (a bug report, a README, a forum post, a pasted log) without running anything."""
    build_given = any(
        x is not None
        for x in (
            build_number,
            matrix_cores,
            int_dot,
            vulkan_driver,
            hipblaslt,
            sycl_f16,
            sycl_reorder,
            flash_attn,
            n_ubatch,
        )
    )
    if log_path is not None:
        if llama_bench is not None or tg is not None or pp is not None:
            raise click.UsageError("--log reads its speeds from the log: no --tg, --pp or --llama-bench beside it")
        if build_given:
            raise click.UsageError(
                "--log reads the build, the Vulkan banner and -ub from the log: no build options or -ub"
            )
        return _check_log(log_path, model, choice, backend, as_json)
    from ggprof.bench.llamabench import read_rows
    from ggprof.pipelines.check import Checker, Reported, judge_chunks, reported_from_row
    from ggprof.report.predict import predict_dict
    from ggprof.report.verdict import RowEncoder, check_lines, spool_json_chunk, write_check_json
    from ggprof.verdict.finding import EXIT, RANK

    if llama_bench is None and tg is None and pp is None:
        raise click.UsageError("give --tg and/or --pp, or --llama-bench RESULTS.json")
    if llama_bench is not None:
        if build_given:
            raise click.UsageError(
                "--llama-bench reads each row's build and -ub from the JSON: no build options or -ub"
            )
        rows = read_rows(llama_bench)
        spec = load_model_arg(model or _row_model(rows))
        for row in rows:  # a row past the model's context claims KV the model cannot have
            tokens = row.n_depth + row.n_prompt + row.n_gen
            check_model_context(
                spec, tokens, f"{clean_name(llama_bench, 60)}: row {row.index}'s n_depth + n_prompt + n_gen"
            )
        # with --rpc-device/--rpc, a row whose backends name RPC ran on that split; without them a
        # row of an older llama-bench, which printed RPC beside its local backend whenever RPC was
        # compiled in (before llama.cpp PR #14917), is judged by its local backend
        reports = [reported_from_row(row, backend or _rpc_backend(row.backends, rpc)) for row in rows]
    else:
        if model is None:
            raise click.UsageError("Missing argument 'MODEL.gguf'.")
        spec = load_model_arg(model)
        # what bench would refuse to run is refused as a claim too: a depth past the model's context
        check_model_context(spec, depth + (n_prompt if pp is not None else 0) + 1, "--depth + prompt + 1")
        vulkan_facts = (("--matrix-cores", matrix_cores), ("--int-dot", int_dot), ("--vulkan-driver", vulkan_driver))
        for name, value in vulkan_facts:
            if value is not None and backend != "vulkan":
                raise click.UsageError(f"{name} is what a ggml_vulkan banner says: give it with --backend vulkan")
        if hipblaslt is not None and backend != "rocm":
            raise click.UsageError("--rocblas-use-hipblaslt is rocBLAS's setting: give it with --backend rocm")
        for name, given in (("--sycl-f16", sycl_f16 is not None), ("--sycl-reorder", sycl_reorder is not None)):
            if given and backend != "sycl":
                raise click.UsageError(f"{name} is a SYCL build's setting: give it with --backend sycl")
        build = BuildFacts(
            number=build_number,
            matrix_cores=_matrix_cores(matrix_cores),
            int_dot=None if int_dot is None else int_dot == "1",
            vulkan_driver=vulkan_driver,
            rocblas_use_hipblaslt=hipblaslt,
            sycl_f16=None if sycl_f16 is None else sycl_f16 == "yes",
            sycl_reorder=sycl_reorder,
            flash_attn=flash_attn,
            n_ubatch=n_ubatch,
        )
        reports = [
            Reported(
                tg_tok_s=tg,
                pp_tok_s=pp,
                depth=depth,
                n_prompt=n_prompt,
                backend=backend,
                n_gpu_layers=n_gpu_layers,
                build=build if build else None,
            )
        ]
    checker = Checker(spec, choice, extensions())
    if rpc.active:  # RPC rows are judged against this split (this host, or --device, is the main host)
        from ggprof.pipelines.rpc import split_setup

        checker.split = split_setup(choice, checker.ext, rpc)
        checker.tensor_split = rpc.tensor_split
    import sys

    out = sys.stdout
    # Both formats stream: each row written as it is judged (100,000 rows of llama-bench output
    # never sit in memory as findings and lines), many rows judged on every core
    note = choice.describe()
    if as_json:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory(prefix="ggprof-check-") as folder:
            encoder = RowEncoder(spec, checker.index_of)
            chunks = judge_chunks(checker, reports, lambda i, js: spool_json_chunk(Path(folder), i, encoder, js))
            made = lambda: (predict_dict(spec, p, note) for p in checker.predictions())  # noqa: E731
            return int(EXIT[write_check_json(Path(folder), chunks, out, made)])
    severities: list[Severity] = []
    blocks = (b for chunk in judge_chunks(checker, reports, _text_chunk) for b in chunk)
    for lines in check_lines(spec, blocks, note, severities):
        out.write("\n".join(lines) + "\n")  # buffered: one flush at the end, not one per row
    out.flush()
    return int(EXIT[max(severities, key=lambda s: RANK[s]) if severities else "unknown"])


def _matrix_cores(value: str | None) -> str | None:
    """--matrix-cores in the banner's own spelling."""
    return next((m for m in MATRIX_CORES if value and m.lower() == value.lower()), None)


def _check_log(path: str, model: str | None, choice: DeviceChoice, backend: str | None, as_json: bool) -> int:
    import json
    import sys

    from ggprof.logs.text import read_log
    from ggprof.pipelines.logcheck import check_log
    from ggprof.report.logcheck import log_dict, log_text
    from ggprof.verdict.finding import EXIT

    log = read_log(path)
    spec = load_model_arg(model) if model else None  # the real header replaces the log's estimate
    checked = check_log(log, extensions(), choice, spec, backend)
    if as_json:
        sys.stdout.write(json.dumps(log_dict(checked), indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(log_text(checked))
    return int(EXIT[checked.severity])


def _text_chunk(index: int, judged: Iterator[Judged]) -> list[tuple[Severity, list[str]]]:
    """A chunk of `check`'s text: each row's severity and lines (made where it was judged)."""
    from ggprof.report.verdict import judged_lines

    return [(j.verdict.severity, judged_lines(j)) for j in judged]


def _rpc_backend(backends: str, rpc: RpcChoice) -> str | None:
    from ggprof.llamacpp import backend_names

    return "rpc" if rpc.active and "rpc" in backend_names(backends) else None


def _row_model(rows: list[LlamaBenchRow]) -> str:
    names = {r.model_filename for r in rows}
    if len(names) != 1 or not next(iter(names)):
        raise click.UsageError("the llama-bench rows name several models (or none): pass MODEL.gguf")
    return names.pop()

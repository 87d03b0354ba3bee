"""Commands that run llama.cpp: bench and profile (the run itself lives in ggprof.pipelines.runs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ggprof.cli.base import (
    check_plot,
    cli,
    draw,
    extensions,
    model_source,
    show,
)
from ggprof.cli.history import db_options, record, save_run
from ggprof.cli.options import (
    BENCH_FACTS,
    bench_options,
    device_options,
    rpc_options,
)
from ggprof.pipelines.runs import int_list

if TYPE_CHECKING:
    from ggprof.machine.target import DeviceChoice
    from ggprof.pipelines.rpc import RpcChoice


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
    from ggprof.bench.llamabench import render
    from ggprof.cli.progress import ProgressBar
    from ggprof.pipelines.runs import run_bench

    if as_json and fmt not in ("table", "json"):
        raise click.UsageError(f"--json and -o {fmt} contradict each other: give one output format")
    if plot is not None and parallel is None:
        raise click.UsageError("--plot draws a batch sweep: give --parallel too")
    plot_path = check_plot(plot)
    batches = int_list(parallel, "--parallel", low=1, high=4096) if parallel is not None else None
    outcome = run_bench(
        run_request(model, rpc, prompt, gen, depth, kw), extensions(), model_source(), ProgressBar, batches
    )
    spec, facts, params, results = outcome.spec, outcome.facts, outcome.params, outcome.results
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


def run_request(model: str | None, rpc: RpcChoice, prompt: str, gen: str, depth: str, kw: dict[str, Any]) -> Any:
    """llama-bench's options, as bench_options parsed them, as one request."""
    from ggprof.pipelines.runs import RunRequest

    return RunRequest(
        model=model,
        prompt=prompt,
        gen=gen,
        depth=depth,
        engine=kw["engine"],
        threads=kw["threads"],
        reps=kw["reps"],
        timeout_s=kw["timeout_s"],
        repack=kw["repack"],
        facts={name: kw[name] for name in BENCH_FACTS},
        rpc=rpc,
    )


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
    "--vs-bench",
    is_flag=True,
    help="With --server: why it is slower than llama-bench, term by term (settings, depth, sampler chain, "
    "streaming, prompt cache), each measured; -t, -ub, ... give llama-bench's run as you ran it.",
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
    vs_bench: bool,
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
    from ggprof.cli.progress import ProgressBar
    from ggprof.pipelines.runs import ProfileRequest, run_profile_request
    from ggprof.report.verdict import profile_dict, profile_text
    from ggprof.verdict.finding import EXIT

    plot_path = check_plot(plot)
    if vs_bench:
        from ggprof.cli.gap import gap

        others = [f for f, on in (("--concurrency", concurrency), ("--threads-sweep", threads_sweep)) if on]
        return gap(run_request(model, rpc, prompt, gen, depth, kw), server, as_json, db, no_save, plot_path, others)
    request = ProfileRequest(
        run=run_request(model, rpc, prompt, gen, depth, kw),
        choice=choice,
        server=server,
        concurrency=int_list(concurrency, "--concurrency", low=1, high=256) if concurrency is not None else None,
        threads_sweep=threads_sweep,
        ignore_load=ignore_load,
    )
    say = (lambda text: None) if as_json else (lambda text: click.echo(text, err=True))
    outcome = run_profile_request(request, extensions(), model_source(), ProgressBar, say)
    report, spec, host = outcome.report, outcome.spec, outcome.host
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

"""Commands that run or judge: bench, profile, check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ggprof.cli.base import (
    LAYERS,
    POSITIVE_TOKENS,
    TOK_S,
    TOKENS,
    bench_options,
    cli,
    device_options,
    extensions,
    load_model_arg,
    make_bench_params,
    resolve_model,
    show,
    warn,
)

if TYPE_CHECKING:
    from ggprof.bench.llamabench import LlamaBenchRow
    from ggprof.machine.target import DeviceChoice


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
def bench(model: str | None, fmt: str, as_json: bool, prompt: str, gen: str, depth: str, **kw: Any) -> None:
    """Measure prefill (pp) and decode (tg) through llama.cpp, like llama-bench, in a child process.

    Without MODEL, runs the default synthetic model (see `ggprof synth --list`).
    """
    from ggprof.bench.llamabench import render
    from ggprof.bench.runner import run_bench
    from ggprof.cli.progress import ProgressBar
    from ggprof.machine.facts import gather_facts

    if as_json and fmt not in ("table", "json"):
        raise click.UsageError(f"--json and -o {fmt} contradict each other: give one output format")
    spec, path = resolve_model(model)
    facts = gather_facts()
    params = make_bench_params(spec, path, facts, prompt, gen, depth, **kw)
    bar = ProgressBar(len(params.tests()) * params.reps)
    try:
        result = run_bench(params, facts, progress=bar)
    finally:
        bar.close()
    click.echo(render(result, "json" if as_json else fmt))


@cli.command()
@click.argument("model", metavar="[MODEL.gguf]", required=False)
@bench_options
@device_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def profile(
    model: str | None,
    choice: DeviceChoice,
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
    from ggprof.machine.host import describe_host
    from ggprof.pipelines.profile import run_profile
    from ggprof.report.verdict import profile_dict, profile_text
    from ggprof.verdict.finding import EXIT

    ext = extensions()
    spec, path = resolve_model(model)
    if not as_json:
        click.echo("measuring the host (or reusing its cached measurement) and running llama.cpp...", err=True)
    host = describe_host(ext.backends.values(), ext.profiles, measure=True, quick=True)
    for w in host.warnings:
        warn(w)
    params = make_bench_params(spec, path, host.facts, prompt, gen, depth, **kw)
    bar = ProgressBar(len(params.tests()) * params.reps)
    try:
        report = run_profile(spec, params, choice, ext, host=host, progress=bar)
    finally:
        bar.close()
    show(as_json, profile_dict, profile_text, report)
    return int(EXIT[report.severity])


@cli.command()
@click.argument("model", metavar="[MODEL.gguf]", required=False)
@click.option("--tg", "tg", type=float, callback=TOK_S, help="Reported decode speed, tok/s.")
@click.option("--pp", "pp", type=float, callback=TOK_S, help="Reported prefill speed, tok/s.")
@click.option("--depth", type=TOKENS, default=0, show_default=True, help="KV depth of the report.")
@click.option(
    "--prompt",
    "n_prompt",
    type=POSITIVE_TOKENS,
    default=512,
    show_default=True,
    help="Prompt length behind --pp.",
)
@device_options
@click.option("--backend", help="The backend that ran it: cpu, cuda, metal, vulkan, rocm.")
@click.option("--n-gpu-layers", "-ngl", type=LAYERS, help="Layers offloaded in the report.")
@click.option(
    "--llama-bench",
    "llama_bench",
    type=click.Path(dir_okay=False),
    help="Judge each row of llama-bench's JSON (-o json or jsonl) output.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def check(
    model: str | None,
    tg: float | None,
    pp: float | None,
    depth: int,
    n_prompt: int,
    choice: DeviceChoice,
    backend: str | None,
    n_gpu_layers: int | None,
    llama_bench: str | None,
    as_json: bool,
) -> int:
    """Judge a reported number (a bug report, a README, a forum post) without running anything."""
    from ggprof.bench.llamabench import read_rows
    from ggprof.pipelines.check import Checker, Reported, reported_from_row
    from ggprof.report.verdict import check_dict, check_text
    from ggprof.verdict.finding import EXIT, worst

    if llama_bench is None and tg is None and pp is None:
        raise click.UsageError("give --tg and/or --pp, or --llama-bench RESULTS.json")
    if llama_bench is not None:
        rows = read_rows(llama_bench)
        spec = load_model_arg(model or _row_model(rows))
        reports = [reported_from_row(row, backend) for row in rows]
    else:
        if model is None:
            raise click.UsageError("Missing argument 'MODEL.gguf'.")
        spec = load_model_arg(model)
        reports = [
            Reported(
                tg_tok_s=tg, pp_tok_s=pp, depth=depth, n_prompt=n_prompt, backend=backend, n_gpu_layers=n_gpu_layers
            )
        ]
    checker = Checker(spec, choice, extensions())
    judged = [checker.check(r) for r in reports]
    show(as_json, check_dict, check_text, spec, judged, choice.describe())
    return int(EXIT[worst([j.verdict for j in judged])])


def _row_model(rows: list[LlamaBenchRow]) -> str:
    names = {r.model_filename for r in rows}
    if len(names) != 1 or not next(iter(names)):
        raise click.UsageError("the llama-bench rows name several models (or none): pass MODEL.gguf")
    return names.pop()

"""`ggprof check`: judge a reported number, a llama-bench file or a pasted log without running anything."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ggprof.cli.base import (
    cli,
    extensions,
    load_model_arg,
)
from ggprof.cli.build_options import BuildChoice, build_options
from ggprof.cli.cpu_option import cpu_option
from ggprof.cli.fit_option import fit_asked, fit_options, refuse_fit_beside_placement
from ggprof.cli.options import (
    POSITIVE_TOKENS,
    TOK_S,
    TOKENS,
    bandwidth_figure,
    device_options,
    drafting_options,
    fact_option,
    placement_options,
    remote_options,
    rpc_options,
)
from ggprof.cli.spill_option import spill_option
from ggprof.llamacpp import CACHE_TYPE, N_PROMPT
from ggprof.pipelines.runs import check_model_context
from ggprof.units import clean_name

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ggprof.bench.llamabench import LlamaBenchRow
    from ggprof.figures import Figure
    from ggprof.machine.target import DeviceChoice
    from ggprof.pipelines.judged import Judged
    from ggprof.pipelines.rpc import RpcChoice
    from ggprof.verdict.finding import Severity


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
@fact_option("n_gpu_layers", default=None, help="Layers offloaded in the report.")
@fact_option("type_k", param="cache_type_k", default=None, help="K cache type [default: f16].")
@fact_option("type_v", param="cache_type_v", default=None, help="V cache type [default: f16].")
@fact_option(
    "n_ctx",
    default=None,
    help="The context the run allocated (llama-server's -c; 0: the model's): its whole KV cache counts "
    "toward the GPU's memory.",
)
@fit_options
@placement_options
@drafting_options
@build_options
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
@click.option(
    "--ram-bandwidth",
    metavar="BW",
    callback=bandwidth_figure,
    help="The bandwidth of the RAM that held the weights not on the GPU (-ngl, -ncmoe, -ot): 90 (GB/s). "
    "Without it: this host's measured RAM, else the RAM's class (a wide band, never impossible below its top).",
)
@spill_option
@cpu_option(
    "The CPU beside the GPU ('Ryzen 9 7950X', 'EPYC 9654'): where the RAM is not given, its platform's "
    "channels and rates bound the RAM's bandwidth (llama-bench's cpu_info is read without it)."
)
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
    cache_type_k: str | None,
    cache_type_v: str | None,
    n_ctx: int | None,
    fit: str | None,
    fit_target: int | None,
    fit_min_ctx: int | None,
    placement: tuple[tuple[str, Any], ...],
    drafting: dict[str, Any],
    reported_build: BuildChoice,
    llama_bench: str | None,
    log_path: str | None,
    ram_bandwidth: Figure | None,
    spill: str | None,
    cpu_name: str | None,
    as_json: bool,
) -> int:
    """Judge a reported number (a bug report, a README, a forum post, a pasted log) without running anything."""
    build_given = reported_build.given
    if drafting and (log_path is not None or llama_bench is not None):
        raise click.UsageError(
            "--spec-type, --spec-draft-n-max, -md and --draft-acceptance describe a reported speed (--tg): "
            "llama-bench does not draft, and a log says how it drafted"
        )
    run_facts = {"-c": n_ctx, "-ctk": cache_type_k, "-ctv": cache_type_v, "--fit": fit}
    run_facts |= {"--fit-target": fit_target, "--fit-ctx": fit_min_ctx}
    given = [flag for flag, v in run_facts.items() if v is not None]
    if given and (log_path is not None or llama_bench is not None):
        raise click.UsageError(
            f"{', '.join(given)}: for --tg or --pp; a llama-bench row states its own (type_k, type_v, what "
            "each test needs), a log its own"
        )
    if log_path is not None:
        if llama_bench is not None or tg is not None or pp is not None:
            raise click.UsageError("--log reads its speeds from the log: no --tg, --pp or --llama-bench beside it")
        if build_given:
            raise click.UsageError(
                "--log reads the build, the Vulkan banner and -ub from the log: no build options or -ub"
            )
        if cpu_name is not None:
            raise click.UsageError("--cpu names the RAM of --tg, --pp or --llama-bench; a log's is --device PROFILE")
        return _check_log(log_path, model, choice, backend, as_json, spill)
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
        named = {row.cpu_info for row in rows if row.cpu_info}
        cpu_name = cpu_name or (named.pop() if len(named) == 1 else None)  # rows of several CPUs: none
    else:
        if model is None:
            raise click.UsageError("Missing argument 'MODEL.gguf'.")
        spec = load_model_arg(model)
        # what bench would refuse to run is refused as a claim too: a depth past the model's context
        check_model_context(spec, depth + (n_prompt if pp is not None else 0) + 1, "--depth + prompt + 1")
        build = reported_build.facts(backend)
        # -c 0 is the model's whole context, which --fit leaves (llama.cpp PR #19070: fit_params_min_ctx)
        explicit = fit_asked(fit, fit_target, fit_min_ctx, n_ctx is not None)
        refuse_fit_beside_placement(explicit, n_gpu_layers, placement, rpc.active)
        asked = explicit or fit_asked(fit, None, None, n_ctx is not None, build.number if build else None)
        reports = [
            Reported(
                tg_tok_s=tg,
                pp_tok_s=pp,
                depth=depth,
                n_prompt=n_prompt,
                backend=backend,
                n_gpu_layers=n_gpu_layers,
                placement=placement,
                drafting=_drafting(spec, drafting),
                build=build if build else None,
                cache_types=((cache_type_k or CACHE_TYPE).lower(), (cache_type_v or CACHE_TYPE).lower()),
                n_ctx=(n_ctx or spec.context_length) if n_ctx is not None else None,
                fit=asked,
            )
        ]
    from ggprof.machine.platforms import given_ram

    # the bandwidth given is the RAM; a CPU named is kept apart (this host's, its measured RAM)
    checker = Checker(spec, choice, extensions(), cpu=given_ram(ram_bandwidth), cpu_name=cpu_name, spill=spill)
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


def _drafting(spec: Any, given: dict[str, Any]) -> Any:
    """How the reported run drafted (ggprof.physics.speculative.Drafting), or None."""
    if not given:
        return None
    from ggprof.physics.speculative import DraftPlacement, drafting_for

    draft = load_model_arg(given["model_draft"]) if "model_draft" in given else None
    acceptance = given.get("acceptance")
    where = DraftPlacement.of(given)
    n_max = given.get("spec_draft_n_max")
    return drafting_for(
        spec, given.get("spec_type"), n_max, draft, acceptance, "--draft-acceptance", draft_placement=where
    )


def _check_log(
    path: str, model: str | None, choice: DeviceChoice, backend: str | None, as_json: bool, spill: str | None
) -> int:
    import json
    import sys

    from ggprof.logs.text import read_log
    from ggprof.pipelines.logcheck import check_log
    from ggprof.report.logcheck import log_dict, log_text
    from ggprof.verdict.finding import EXIT

    log = read_log(path)
    spec = load_model_arg(model) if model else None  # the real header replaces the log's estimate
    checked = check_log(log, extensions(), choice, spec, backend, spill)
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

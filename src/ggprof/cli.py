"""The thin Click layer: parse options, call the core, render. Nothing else imports click."""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import click

from ggprof import __version__
from ggprof.errors import BadInputError, ExitStatus, GGProfError


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, allow_nan=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ggprof")
def cli() -> None:
    """How fast should a GGUF model run on this machine, how fast does it run,
    and is that number believable?

    Exit status: 0 ok/plausible, 1 internal error, 2 bad input or usage,
    3 suspicious, 4 impossible.
    """


@cli.command()
@click.argument("model", metavar="MODEL.gguf")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def inspect(model: str, as_json: bool) -> None:
    """Read a GGUF model's header: size, architecture, bytes a token reads."""
    from ggprof.report.inspect import inspect_dict, inspect_text

    spec = _load_model(model)
    if as_json:
        emit_json(inspect_dict(spec))
    else:
        click.echo(inspect_text(spec))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def plugins(as_json: bool) -> None:
    """List loaded plugins and the hooks each implements."""
    from dataclasses import asdict

    from ggprof.plugins import backends, plugin_infos

    infos = plugin_infos()
    if as_json:
        emit_json([asdict(i) | {"hooks": list(i.hooks)} for i in infos])
        return
    names = sorted(backends())
    for info in infos:
        origin = "built-in" if info.builtin else f"{info.distribution} {info.version or ''}".strip()
        status = f"FAILED: {info.error}" if info.error else ", ".join(info.hooks)
        click.echo(f"{info.name:<14} {origin:<22} {status}")
    click.echo(f"backends: {', '.join(names) or 'none'}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quick", is_flag=True, help="A ~2 s measurement (smaller arrays, fewer repetitions).")
@click.option("--refresh", is_flag=True, help="Measure again even if a cached measurement exists.")
@click.option("--no-measure", is_flag=True, help="Measure nothing; show a cached measurement if any.")
def host(as_json: bool, quick: bool, refresh: bool, no_measure: bool) -> None:
    """Detect this machine's devices and measure its memory bandwidth and FLOP/s."""
    from ggprof.host import describe_host
    from ggprof.report.host import host_dict, host_text

    if refresh and no_measure:
        raise click.UsageError("--refresh and --no-measure contradict each other")
    if not no_measure and not as_json:
        click.echo("measuring memory bandwidth...", err=True)
    report = describe_host(measure=not no_measure, quick=quick, refresh=refresh)
    if as_json:
        emit_json(host_dict(report))
    else:
        click.echo(host_text(report))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def profiles(as_json: bool) -> None:
    """List the hardware profiles (built-in, from plugins, and your own)."""
    from ggprof.profiles import load_profiles
    from ggprof.report.host import profile_dict, profiles_text

    found = sorted(load_profiles().values(), key=lambda p: (p.kind, p.id))
    if as_json:
        emit_json([profile_dict(p) for p in found])
    else:
        click.echo(profiles_text(found))


CACHE_TYPES = click.Choice(
    ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"], case_sensitive=False
)


def device_options(f: Any) -> Any:
    """--device / --bandwidth / --flops, shared by every command that reasons about a device."""
    f = click.option("--flops", metavar="TFLOPS", help="Peak FLOP/s override, in TFLOP/s.")(f)
    f = click.option("--bandwidth", metavar="BW", help="Bandwidth override: 90 (GB/s), 850GB/s, 1.2TB/s.")(f)
    f = click.option("--device", "device_id", metavar="ID", help="Reason about a profile's device (ggprof profiles).")(
        f
    )
    return f


@cli.command()
@click.argument("model", metavar="MODEL.gguf")
@device_options
@click.option(
    "--depth", type=click.IntRange(min=0), default=0, show_default=True, help="Tokens already in the KV cache."
)
@click.option("--prompt", type=click.IntRange(min=0), default=512, show_default=True, help="Prompt tokens (prefill).")
@click.option("--gen", type=click.IntRange(min=0), default=128, show_default=True, help="Generated tokens.")
@click.option(
    "--ctx",
    type=click.IntRange(min=1),
    help="Context to allocate [default: 4096, or the model's, or depth+prompt+gen if larger].",
)
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True, help="Sequences decoded together.")
@click.option("--cache-type-k", type=CACHE_TYPES, default="f16", show_default=True)
@click.option("--cache-type-v", type=CACHE_TYPES, default="f16", show_default=True)
@click.option(
    "--n-gpu-layers", "-ngl", type=click.IntRange(min=-1), help="Layers offloaded (-1 or more than the model has: all)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def predict(
    model: str,
    device_id: str | None,
    bandwidth: str | None,
    flops: str | None,
    depth: int,
    prompt: int,
    gen: int,
    ctx: int | None,
    batch: int,
    cache_type_k: str,
    cache_type_v: str,
    n_gpu_layers: int | None,
    as_json: bool,
) -> None:
    """Predict decode and prefill ceilings, latency and memory fit for a model on a device."""
    from ggprof.predict import PredictInputs
    from ggprof.predict import predict as run_predict
    from ggprof.report.predict import predict_dict, predict_text
    from ggprof.target import efficiency_band, resolve_target

    spec = _load_model(model)
    ctx = _context(spec, ctx, depth, prompt, gen)
    partial = n_gpu_layers is not None and 0 <= n_gpu_layers <= spec.n_layers
    target = resolve_target(device_id, bandwidth, flops, need_host_cpu=partial)
    inputs = PredictInputs(depth, prompt, gen, ctx, batch, cache_type_k.lower(), cache_type_v.lower(), n_gpu_layers)
    if partial and target.device.backend != "cpu" and target.cpu is None:
        raise BadInputError(
            "--n-gpu-layers splits the model, but this host's CPU bandwidth is unknown: run `ggprof host` first"
        )
    result = run_predict(spec, target.device, inputs, efficiency_band(spec, target.device), target.cpu)
    if as_json:
        emit_json(predict_dict(spec, result, target.description))
    else:
        click.echo(predict_text(spec, result, target.description))


def _context(spec: Any, ctx: int | None, depth: int, prompt: int, gen: int) -> int:
    needed = depth + prompt + gen
    if ctx is None:
        return max(min(4096, spec.context_length or 4096), needed)
    if depth > ctx:
        raise click.UsageError(f"--depth {depth} is larger than --ctx {ctx}")
    if needed > ctx:
        raise click.UsageError(f"--depth + --prompt + --gen = {needed} does not fit in --ctx {ctx}")
    return ctx


def int_list(text: str, name: str) -> tuple[int, ...]:
    """'512' or '0,4096' -> (0, 4096); negative or malformed values are usage errors."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise click.UsageError(f"{name} takes whole numbers separated by commas, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise click.UsageError(f"{name} values must be 0 or more, got {text!r}")
    return values


def bench_options(f: Any) -> Any:
    """llama-bench's options, shared by `bench` and `profile`."""
    options = [
        click.option(
            "--repack",
            type=click.Choice(["auto", "on", "off"]),
            default="auto",
            show_default=True,
            help="llama.cpp's repacking buffers (auto: off where its AMX path is compiled in).",
        ),
        click.option(
            "--timeout",
            "timeout_s",
            type=click.FloatRange(min=0, min_open=True),
            help="Give up on the run after this many seconds.",
        ),
        click.option("-ub", "--ubatch-size", "n_ubatch", type=click.IntRange(min=1), default=512, show_default=True),
        click.option("-b", "--batch-size", "n_batch", type=click.IntRange(min=1), default=2048, show_default=True),
        click.option("--cache-type-v", "-ctv", type=CACHE_TYPES, default="f16", show_default=True),
        click.option("--cache-type-k", "-ctk", type=CACHE_TYPES, default="f16", show_default=True),
        click.option(
            "--flash-attn", "-fa", type=click.Choice(["on", "off", "auto"]), default="auto", show_default=True
        ),
        click.option(
            "-ngl",
            "--n-gpu-layers",
            "n_gpu_layers",
            type=click.IntRange(min=-1),
            default=-1,
            show_default=True,
            help="Layers to offload (-1: all).",
        ),
        click.option(
            "-t",
            "--threads",
            "n_threads",
            type=click.IntRange(min=1),
            help="Threads [default: physical cores, not efficiency cores].",
        ),
        click.option("-r", "--repetitions", "reps", type=click.IntRange(min=1), default=5, show_default=True),
        click.option("-d", "--n-depth", "depth", default="0", show_default=True, help="KV depth(s), e.g. 0,4096."),
        click.option("-n", "--n-gen", "gen", default="128", show_default=True, help="Generated tokens (tg test)."),
        click.option("-p", "--n-prompt", "prompt", default="512", show_default=True, help="Prompt tokens (pp test)."),
    ]
    for option in options:
        f = option(f)
    return f


def make_bench_params(spec: Any, path: Any, prompt: str, gen: str, depth: str, **kw: Any) -> Any:
    from ggprof.bench.results import BenchParams
    from ggprof.bench.runner import default_threads

    p, n, d = int_list(prompt, "-p"), int_list(gen, "-n"), int_list(depth, "-d")
    if not any(p) and not any(n):
        raise click.UsageError("nothing to run: -p and -n are both 0")
    longest = max(d) + max(p) + max(n) + 1
    if spec.context_length and longest > spec.context_length:
        raise click.UsageError(
            f"depth + prompt + gen = {longest - 1} is over the model's context length {spec.context_length}"
        )
    kw["n_threads"] = kw.get("n_threads") or default_threads()
    kw["type_k"], kw["type_v"] = kw.pop("cache_type_k").lower(), kw.pop("cache_type_v").lower()
    return BenchParams(model=path, n_prompt=p, n_gen=n, n_depth=d, **kw)


def resolve_model(model: str | None) -> tuple[Any, Any]:
    """The model to run: the given file (inspected first), or the default synthetic model."""
    from pathlib import Path

    if model is None:
        from ggprof.synth import DEFAULT_QUANT, DEFAULT_SHAPE, default_path, ensure_model

        if not default_path(DEFAULT_SHAPE, DEFAULT_QUANT).exists():
            click.echo(f"writing the default synthetic model ({DEFAULT_SHAPE}, {DEFAULT_QUANT})...", err=True)
        path = ensure_model()
        return _load_model(str(path)), path
    return _load_model(model), Path(model)


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
    from ggprof.bench.output import render
    from ggprof.bench.progress import ProgressBar
    from ggprof.bench.runner import run_bench

    spec, path = resolve_model(model)
    params = make_bench_params(spec, path, prompt, gen, depth, **kw)
    bar = ProgressBar(len(params.tests()) * params.reps)
    try:
        result = run_bench(params, progress=bar)
    finally:
        bar.close()
    click.echo(render(result, "json" if as_json else fmt))


@cli.command()
@click.option("--shape", default="small", show_default=True, help="A shape from --list.")
@click.option("--quant", type=click.Choice(["q4_0", "q8_0", "f16"]), default="q4_0", show_default=True)
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), help="Write here instead of the cache.")
@click.option("--list", "list_shapes", is_flag=True, help="List the shapes with their sizes.")
@click.option("--json", "as_json", is_flag=True, help="With --list: a JSON list; else the written file as JSON.")
def synth(shape: str, quant: str, output: str | None, list_shapes: bool, as_json: bool) -> None:
    """Write a synthetic GGUF model (random weights, a real shape llama.cpp runs)."""
    from pathlib import Path

    from ggprof import synth as synth_mod
    from ggprof.units import fmt_bytes

    if list_shapes:
        rows = [
            {
                "shape": s.name,
                "description": s.description,
                "n_params": s.n_params,
                **{f"size_bytes_{q}": s.size_bytes(q) for q in synth_mod.QUANTS},
            }
            for s in synth_mod.SHAPES.values()
        ]
        if as_json:
            emit_json(rows)
            return
        click.echo(f"{'shape':<11} {'params':>7} {'q4_0':>9} {'q8_0':>9} {'f16':>9}  description")
        for s in synth_mod.SHAPES.values():
            sizes = " ".join(f"{fmt_bytes(s.size_bytes(q), binary=False):>9}" for q in synth_mod.QUANTS)
            click.echo(f"{s.name:<11} {s.n_params / 1e6:6.0f}M {sizes}  {s.description}")
        click.echo("sizes in GB/MB (1e9/1e6 bytes)")
        return
    spec_shape = synth_mod.get_shape(shape)
    if output is None:
        path = synth_mod.ensure_model(shape, quant)
    else:
        path = synth_mod.write_model(spec_shape, quant, Path(output))
    if as_json:
        emit_json({"path": str(path), "shape": shape, "quant": quant, "file_size_bytes": path.stat().st_size})
    else:
        click.echo(f"{path}  ({shape}, {quant}, {fmt_bytes(path.stat().st_size)})")


@cli.command()
@click.argument("model", metavar="[MODEL.gguf]", required=False)
@bench_options
@device_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def profile(
    model: str | None,
    device_id: str | None,
    bandwidth: str | None,
    flops: str | None,
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
    from ggprof.bench.progress import ProgressBar
    from ggprof.judge import EXIT
    from ggprof.profile import run_profile
    from ggprof.report.verdict import profile_dict, profile_text

    spec, path = resolve_model(model)
    params = make_bench_params(spec, path, prompt, gen, depth, **kw)
    if not as_json:
        click.echo("measuring the host (or reusing its cached measurement) and running llama.cpp...", err=True)
    bar = ProgressBar(len(params.tests()) * params.reps)
    try:
        report = run_profile(spec, params, device_id, bandwidth, flops, progress=bar)
    finally:
        bar.close()
    click.echo(json.dumps(profile_dict(report), indent=2, allow_nan=False) if as_json else profile_text(report))
    return int(EXIT[report.severity])


@cli.command()
@click.argument("model", metavar="[MODEL.gguf]", required=False)
@click.option("--tg", "tg", type=click.FloatRange(min=0, min_open=True), help="Reported decode speed, tok/s.")
@click.option("--pp", "pp", type=click.FloatRange(min=0, min_open=True), help="Reported prefill speed, tok/s.")
@click.option("--depth", type=click.IntRange(min=0), default=0, show_default=True, help="KV depth of the report.")
@click.option(
    "--prompt",
    "n_prompt",
    type=click.IntRange(min=1),
    default=512,
    show_default=True,
    help="Prompt length behind --pp.",
)
@device_options
@click.option("--backend", help="The backend that ran it: cpu, cuda, metal, vulkan, rocm.")
@click.option("--n-gpu-layers", "-ngl", type=click.IntRange(min=-1), help="Layers offloaded in the report.")
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
    device_id: str | None,
    bandwidth: str | None,
    flops: str | None,
    backend: str | None,
    n_gpu_layers: int | None,
    llama_bench: str | None,
    as_json: bool,
) -> int:
    """Judge a reported number (a bug report, a README, a forum post) without running anything."""
    from ggprof.judge import EXIT, worst
    from ggprof.profile import check_llama_bench_row, check_reported
    from ggprof.report.verdict import check_dict, check_text

    if llama_bench is None and tg is None and pp is None:
        raise click.UsageError("give --tg and/or --pp, or --llama-bench RESULTS.json")
    if llama_bench is not None:
        rows = _llama_bench_rows(llama_bench)
        spec = _load_model(model or _row_model(rows))
        judged = [check_llama_bench_row(spec, row, device_id, bandwidth, flops, backend) for row in rows]
    else:
        if model is None:
            raise click.UsageError("Missing argument 'MODEL.gguf'.")
        spec = _load_model(model)
        judged = [check_reported(spec, tg, pp, depth, n_prompt, device_id, bandwidth, flops, backend, n_gpu_layers)]
    note = device_id or (f"--bandwidth {bandwidth}" if bandwidth else "this host")
    if as_json:
        emit_json(check_dict(spec, judged, note))
    else:
        click.echo(check_text(spec, judged, note))
    return int(EXIT[worst([j.verdict for j in judged])])


def _llama_bench_rows(path: str) -> list[dict[str, Any]]:
    """Rows of llama-bench's -o json (a list) or -o jsonl (one object a line)."""
    from pathlib import Path

    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BadInputError(f"{path}: not llama-bench JSON (not UTF-8 text)") from None
    except OSError as e:
        raise BadInputError(f"{path}: {e.strerror or e}") from None
    try:
        data = json.loads(text)
        rows = data if isinstance(data, list) else [data]
    except ValueError:
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as e:
            raise BadInputError(f"{path}: not llama-bench JSON or JSONL output ({e})") from None
    if not rows or not all(isinstance(r, dict) and "avg_ts" in r for r in rows):
        raise BadInputError(f"{path}: no llama-bench rows (objects with avg_ts) found")
    return rows


def _row_model(rows: list[dict[str, Any]]) -> str:
    names = {str(r.get("model_filename", "")) for r in rows}
    if len(names) != 1 or not next(iter(names)):
        raise click.UsageError("the llama-bench rows name several models (or none): pass MODEL.gguf")
    return names.pop()


def _load_model(path: str) -> Any:
    from ggprof.model import load_model
    from ggprof.plugins import plugin_manager

    hook = plugin_manager().hook.swa_pattern
    return load_model(path, swa_default=lambda arch: hook(architecture=arch))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; every failure becomes one `Error: ...` line and a documented status."""
    try:
        from ggprof.plugins import plugin_manager

        plugin_manager().hook.register_commands(cli=cli)
        rv = cli.main(args=list(argv) if argv is not None else None, prog_name="ggprof", standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.UsageError as e:
        click.echo(f"Error: {e.format_message()}", err=True)
        return int(ExitStatus.BAD_INPUT)
    except click.ClickException as e:
        click.echo(f"Error: {e.format_message()}", err=True)
        return int(e.exit_code)
    except click.Abort:
        click.echo("Error: aborted", err=True)
        return int(ExitStatus.INTERNAL_ERROR)
    except GGProfError as e:
        click.echo(f"Error: {e}", err=True)
        return int(e.exit_status)
    except KeyboardInterrupt:
        click.echo("Error: interrupted", err=True)
        return 130
    except Exception as e:  # a bug: still one line, the traceback on request
        if os.environ.get("GGPROF_DEBUG"):
            traceback.print_exc()
        click.echo(f"Error: internal error: {type(e).__name__}: {e} (GGPROF_DEBUG=1 shows the traceback)", err=True)
        return int(ExitStatus.INTERNAL_ERROR)
    return int(rv) if isinstance(rv, int) else int(ExitStatus.OK)


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


__all__ = ["BadInputError", "cli", "main", "run"]

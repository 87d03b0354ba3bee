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

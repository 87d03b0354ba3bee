"""The Click group, shared options and helpers of the command modules.

Only the ggprof.cli package imports click; commands parse options, call the core, render.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ggprof import __version__


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, allow_nan=False))


def show(as_json: bool, as_dict: Callable[..., Any], as_text: Callable[..., str], *args: Any) -> None:
    """A result on stdout: `as_dict(*args)` as JSON, or `as_text(*args)`."""
    if as_json:
        emit_json(as_dict(*args))
    else:
        click.echo(as_text(*args))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ggprof")
def cli() -> None:
    """How fast should a GGUF model run on this machine, how fast does it run,
    and is that number believable?

    Exit status: 0 ok/plausible, 1 internal error, 2 bad input or usage,
    3 suspicious, 4 impossible.
    """


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


def context_tokens(spec: Any, ctx: int | None, depth: int, prompt: int, gen: int) -> int:
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
    if model is None:
        from ggprof.synth import DEFAULT_QUANT, DEFAULT_SHAPE, default_path, ensure_model

        if not default_path(DEFAULT_SHAPE, DEFAULT_QUANT).exists():
            click.echo(f"writing the default synthetic model ({DEFAULT_SHAPE}, {DEFAULT_QUANT})...", err=True)
        path = ensure_model()
        return load_model_arg(str(path)), path
    return load_model_arg(model), Path(model)


def load_model_arg(path: str) -> Any:
    """Inspect a model file (with the plugins' architecture rules)."""
    from ggprof.model import load_model
    from ggprof.plugins import plugin_manager

    hook = plugin_manager().hook.swa_pattern
    return load_model(path, swa_default=lambda arch: hook(architecture=arch))

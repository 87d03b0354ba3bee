"""The Click group, shared options and helpers of the command modules.

Only the ggprof.cli package imports click; commands parse options, call the core, render.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ggprof import __version__
from ggprof.llamacpp import (
    CACHE_TYPE,
    GGML_MAX_N_THREADS,
    N_BATCH,
    N_CTX,
    N_GEN,
    N_PROMPT,
    N_UBATCH,
    REPETITIONS,
    STOP_TARGET,
)
from ggprof.model.ggml import KV_CACHE_TYPES
from ggprof.units import MAX_TOK_S, MAX_TOKENS, clean_name, warn

if TYPE_CHECKING:
    from ggprof.bench.results import BenchParams
    from ggprof.engines import Engine, ModelSource
    from ggprof.figures import Figure
    from ggprof.machine.facts import HostFacts
    from ggprof.machine.target import DeviceChoice
    from ggprof.model.spec import ModelSpec
    from ggprof.pipelines.extensions import Extensions


@cache
def extensions() -> Extensions:
    """What the plugins add, resolved once per command and passed down to the core."""
    from ggprof.plugins import extensions as resolve

    return resolve()


invocation: list[str] = []  # this command's arguments, as given (kept with each saved run)


def emit_json(obj: Any) -> None:
    """JSON on stdout, written as it is encoded (a result of 30,000 rows is never one string)."""
    json.dump(obj, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def show(as_json: bool, as_dict: Callable[..., Any], as_text: Callable[..., str], *args: Any) -> None:
    """A result on stdout: `as_dict(*args)` as JSON, or `as_text(*args)`."""
    if as_json:
        emit_json(as_dict(*args))
    else:
        click.echo(as_text(*args))


# Which module defines each built-in command: a command's module (and what it imports) loads
# only when that command runs or `--help` lists them all (tests/test_readme.py checks this table).
COMMAND_MODULES = {
    "profile": "runs",
    "bench": "runs",
    "check": "runs",
    "inspect": "models",
    "predict": "models",
    "fit": "models",
    "synth": "models",
    "plugins": "models",
    "host": "machine",
    "profiles": "machine",
    "plan": "models",
    "history": "history",
    "compare": "history",
    "report": "history",
    "plot": "history",
}


class PluginGroup(click.Group):
    """The `ggprof` group, lazy: a built-in command's module is imported when that command runs
    (COMMAND_MODULES), and plugins' commands (the `register_commands` hook) are added the first
    time a command is not a built-in one or the list is shown."""

    _plugins_loaded = False

    def load_plugin_commands(self) -> None:
        if not self._plugins_loaded:
            from ggprof.plugins import register_commands

            self._plugins_loaded = True
            register_commands(self)

    def load_builtin(self, cmd_name: str) -> None:
        """Import the module that defines a built-in command (it registers itself on `cli`)."""
        import importlib

        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"ggprof.cli.{module}")

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self.load_builtin(cmd_name)
        if cmd_name not in self.commands:
            self.load_plugin_commands()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for name in COMMAND_MODULES:
            self.load_builtin(name)
        self.load_plugin_commands()
        return super().list_commands(ctx)

    def invoke(self, ctx: click.Context) -> Any:
        """Click answers a closed pipe with status 1, the internal-error status; ggprof ends
        quietly instead (the reader asked for no more): `main` catches ClosedPipe."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError as e:
            raise ClosedPipe from e


def check_plot(plot: str | None) -> Path | None:
    """--plot, checked before anything runs (a run or sweep is never wasted on a path that
    cannot be written)."""
    if plot is None:
        return None
    from ggprof.report.plots import check_plot_target

    check_plot_target(Path(plot))
    return Path(plot)


def draw(draw_to: Callable[[Path], Path], plot: Path) -> None:
    """A plot after a run: one that cannot be written (a full disk, a folder gone meanwhile) is a
    warning naming the path; the run's result and exit status stand."""
    from ggprof.errors import GGProfError

    try:
        click.echo(f"plot: {draw_to(plot)}", err=True)
    except (OSError, ValueError, GGProfError) as e:
        warn(f"the plot was not written to {plot}: {getattr(e, 'strerror', None) or e}")


class ClosedPipe(Exception):
    """The reader of stdout went away (`ggprof history | head -1`)."""


@click.group(cls=PluginGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ggprof")
def cli() -> None:
    """How fast should a GGUF model run on this machine, how fast does it run,
    and is that number believable?

    Exit status: 0 ok/plausible, 1 internal error, 2 bad input or usage,
    3 suspicious, 4 impossible, 130 interrupted (Ctrl-C), 143 terminated.
    """


CACHE_TYPES = click.Choice(KV_CACHE_TYPES, case_sensitive=False)
TOKENS = click.IntRange(0, MAX_TOKENS)  # llama.cpp's int32 token counts
POSITIVE_TOKENS = click.IntRange(1, MAX_TOKENS)
LAYERS = click.IntRange(-1, MAX_TOKENS)
MAX_THREADS = GGML_MAX_N_THREADS
MAX_TIMEOUT_S = 1e6


def finite_in(low: float, high: float) -> Callable[[click.Context, click.Parameter, float | None], float | None]:
    """A callback for a float option: finite, above `low` and at most `high` (nan and inf refused)."""

    def check(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and low < value <= high):
            raise click.BadParameter(f"{value!r} is not a number above {low:g} and at most {high:g}")
        return value

    return check


TOK_S = finite_in(0, MAX_TOK_S)


def parse_build_number(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """--build: a llama.cpp build number, 5315 or b5315 (llama-bench's build_number, a release tag)."""
    if value is None:
        return None
    text = value.strip().lower().removeprefix("b")
    if not text.isdigit() or not 0 < int(text) < 10**7:
        raise click.BadParameter(f"{clean_name(value, 40)!r} is not a llama.cpp build number (5315 or b5315)")
    return int(text)


ON_OFF = click.Choice(("on", "off"))  # a switch a report gives: --flash-attn, --sycl-reorder


def on_off(ctx: click.Context, param: click.Parameter, value: str | None) -> bool | None:
    """An ON_OFF option as the switch it names (None: not given)."""
    return None if value is None else value == "on"


MAX_DRIVER_CHARS = 60  # a Vulkan driver's name as a banner gives it (logs.parse keeps as many)


def parse_vulkan_driver(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--vulkan-driver: the driver a ggml_vulkan banner names (its last parenthesis), one short line."""
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > MAX_DRIVER_CHARS or not text.isprintable():
        raise click.BadParameter(
            f"{clean_name(value, 40)!r} is not a Vulkan driver's name as the banner gives it "
            f"(radv, NVIDIA, Honeykrisp, MoltenVK; at most {MAX_DRIVER_CHARS} printable characters)"
        )
    return text


GB = finite_in(0, 1e6)  # a memory size in GB (1e9 bytes)


def _bandwidth(ctx: click.Context, param: click.Parameter, value: str | None) -> Figure | None:
    """--bandwidth: '90' (GB/s), '850GB/s', '1.2TB/s' -> a user-given Figure in bytes/s."""
    from ggprof.errors import BadInputError
    from ggprof.figures import Figure
    from ggprof.units import parse_bandwidth

    if value is None:
        return None
    try:
        return Figure(parse_bandwidth(value), "user", f"--bandwidth {value}")
    except ValueError as e:
        raise BadInputError(str(e)) from None


def _tflops(ctx: click.Context, param: click.Parameter, value: str | None) -> Figure | None:
    """--flops: TFLOP/s as a number -> a user-given Figure in FLOP/s."""
    from ggprof.machine.target import parse_tflops

    return None if value is None else parse_tflops(value)


def _device_choice(kwargs: dict[str, Any]) -> DeviceChoice:
    from ggprof.machine.target import DeviceChoice

    return DeviceChoice(device_id=kwargs.pop("device_id"), bandwidth=kwargs.pop("bandwidth"), flops=kwargs.pop("flops"))


def device_options(f: Any) -> Any:
    """--device / --bandwidth / --flops, parsed into one DeviceChoice passed as `choice`."""
    import functools

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["choice"] = _device_choice(kwargs)
        return f(*args, **kwargs)

    wrapper = click.option("--flops", metavar="TFLOPS", callback=_tflops, help="Peak FLOP/s override, in TFLOP/s.")(
        wrapper
    )
    wrapper = click.option(
        "--bandwidth", metavar="BW", callback=_bandwidth, help="Bandwidth override: 90 (GB/s), 850GB/s, 1.2TB/s."
    )(wrapper)
    return click.option(
        "--device", "device_id", metavar="ID", help="Reason about a profile's device (ggprof profiles)."
    )(wrapper)


def rpc_options(f: Any) -> Any:
    """--rpc / --rpc-device / --tensor-split, parsed into one RpcChoice passed as `rpc`."""
    import functools

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ggprof.machine.rpc import parse_endpoints
        from ggprof.pipelines.rpc import RpcChoice

        endpoints, devices, split = kwargs.pop("rpc_endpoints"), kwargs.pop("rpc_devices"), kwargs.pop("tensor_split")
        kwargs["rpc"] = RpcChoice(
            endpoints=parse_endpoints(endpoints) if endpoints else (),
            devices=tuple(devices),
            tensor_split=_tensor_split(split) if split else (),
        )
        return f(*args, **kwargs)

    options = [
        click.option(
            "--rpc",
            "rpc_endpoints",
            metavar="HOST:PORT,...",
            help="llama.cpp rpc-servers holding part of the model (their links are measured).",
        ),
        click.option(
            "--rpc-device",
            "rpc_devices",
            metavar="PROFILE[@LINK]",
            multiple=True,
            help="What a remote device is and its link: rtx-3060@2.5GbE, this-host@localhost (repeat, in order).",
        ),
        click.option("--tensor-split", "tensor_split", metavar="A,B,...", help="Share of layers per device, in order."),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def _tensor_split(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.replace("/", ",").split(","))
    except ValueError:
        values = ()
    if not values or len(values) > 16 or any(not (0 <= v < 1e6) for v in values) or sum(values) <= 0:
        raise click.UsageError(f"--tensor-split takes up to 16 shares such as 3,1 (got {clean_name(text, 60)!r})")
    return values


def context_tokens(spec: ModelSpec, ctx: int | None, depth: int, prompt: int, gen: int) -> int:
    needed = depth + prompt + gen
    if ctx is None:
        return max(min(N_CTX, spec.context_length or N_CTX), needed)
    if depth > ctx:
        raise click.UsageError(f"--depth {depth} is larger than --ctx {ctx}")
    if needed > ctx:
        what = "--depth + --prompt + --gen" if depth else "--prompt + --gen"
        raise click.UsageError(f"{what} = {needed} does not fit in --ctx {ctx}")
    return ctx


def int_list(text: str, name: str, low: int = 0, high: int = MAX_TOKENS) -> tuple[int, ...]:
    """'512' or '0,4096' -> (0, 4096); an empty item, a value outside low..high or anything
    malformed is a usage error, worded the same for every list option."""
    shown = clean_name(text, 60)
    parts = [v.strip() for v in text.split(",")]
    whole = all(v.lstrip("-").isdigit() and v.count("-") <= int(v.startswith("-")) and len(v) <= 11 for v in parts)
    if not whole or len(parts) > 64:
        raise click.UsageError(f"{name} takes whole numbers separated by commas (up to 64), got {shown!r}")
    values = tuple(int(v) for v in parts)
    if any(v < low for v in values):
        raise click.UsageError(f"{name} values must be {low} or more, got {shown!r}")
    if any(v > high for v in values):
        limit = f"{high} (llama.cpp's int32)" if high == MAX_TOKENS else str(high)
        raise click.UsageError(f"{name} values must be at most {limit}, got {shown!r}")
    return values


def check_model_context(spec: ModelSpec, tokens: int, what: str) -> None:
    """`tokens` (depth + prompt + gen) must fit the context the model was trained for: bench and
    check refuse the same numbers with the same words."""
    if spec.context_length and tokens > spec.context_length:
        raise click.UsageError(f"{what} = {tokens:,} is over the model's context length {spec.context_length:,}")


def bench_options(f: Any) -> Any:
    """llama-bench's options, shared by `bench` and `profile`."""
    options = [
        click.option(
            "--engine",
            default="python",
            show_default=True,
            metavar="NAME[=OPTION]",
            help="What runs llama.cpp: python (llama-cpp-python), llama-bench[=PATH] (your own build); "
            "`ggprof plugins` lists them.",
        ),
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
            type=float,
            callback=finite_in(0, MAX_TIMEOUT_S),
            help="Give up on the run after this many seconds.",
        ),
        click.option("-ub", "--ubatch-size", "n_ubatch", type=POSITIVE_TOKENS, default=N_UBATCH, show_default=True),
        click.option("-b", "--batch-size", "n_batch", type=POSITIVE_TOKENS, default=N_BATCH, show_default=True),
        click.option("--cache-type-v", "-ctv", type=CACHE_TYPES, default=CACHE_TYPE, show_default=True),
        click.option("--cache-type-k", "-ctk", type=CACHE_TYPES, default=CACHE_TYPE, show_default=True),
        click.option(
            "--flash-attn", "-fa", type=click.Choice(["on", "off", "auto"]), default="auto", show_default=True
        ),
        click.option(
            "-ngl",
            "--n-gpu-layers",
            "n_gpu_layers",
            type=LAYERS,
            default=-1,
            show_default=True,
            help="Layers to offload (-1: all).",
        ),
        click.option(
            "-t",
            "--threads",
            "threads",
            help="Threads, or a list to sweep (1,2,4) [default: physical cores, not efficiency cores].",
        ),
        click.option(
            "-r",
            "--repetitions",
            "reps",
            type=click.IntRange(1, 10_000),
            help=f"Repetitions, fixed (llama-bench's -r). Default: bench {REPETITIONS}; profile repeats until the "
            f"95% confidence interval of tok/s is within {STOP_TARGET:.0%} (at least 2, at most 10).",
        ),
        click.option("-d", "--n-depth", "depth", default="0", show_default=True, help="KV depth(s), e.g. 0,4096."),
        click.option("-n", "--n-gen", "gen", default=str(N_GEN), show_default=True, help="Generated tokens (tg test)."),
        click.option(
            "-p", "--n-prompt", "prompt", default=str(N_PROMPT), show_default=True, help="Prompt tokens (pp test)."
        ),
    ]
    for option in options:
        f = option(f)
    return f


def thread_counts(threads: str | None, facts: HostFacts) -> tuple[int, ...]:
    """-t N or -t 1,2,4 (each 1 to GGML_MAX_N_THREADS); the default is the physical (performance)
    cores this process may use (its affinity set and cgroup quota: HostFacts.default_threads)."""
    counts = int_list(threads, "-t", low=1, high=MAX_THREADS) if threads else (facts.default_threads,)
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


def resolve_engine(text: str | None) -> Engine:
    """`--engine NAME[=OPTION]` among the registered engines."""
    from ggprof.engines import engine_from

    return engine_from(text, extensions().engines)


def make_bench_params(
    spec: ModelSpec, path: Path, facts: HostFacts, prompt: str, gen: str, depth: str, adaptive: bool = False, **kw: Any
) -> BenchParams:
    """The run's parameters (with the first of -t's counts; `thread_counts` gives all of them).
    `adaptive`: without -r, repeat each test until its tok/s is known (`profile`)."""
    from ggprof.bench.results import BenchParams
    from ggprof.bench.stopping import StopRule

    p, n, d = int_list(prompt, "-p"), int_list(gen, "-n"), int_list(depth, "-d")
    if not any(p) and not any(n):
        raise click.UsageError("nothing to run: -p and -n are both 0")
    check_model_context(spec, max(d) + max(p) + max(n) + 1, "depth + prompt + gen + 1")
    kw.pop("engine", None)
    if kw.get("reps") is None:  # no -r: the main job stops when the answer is known; bench runs llama-bench's 5
        kw["reps"] = REPETITIONS
        kw["stop"] = StopRule(target=STOP_TARGET) if adaptive else None
    kw["n_threads"] = thread_counts(kw.pop("threads"), facts)[0]
    kw["type_k"], kw["type_v"] = kw.pop("cache_type_k").lower(), kw.pop("cache_type_v").lower()
    return BenchParams(model=path, n_prompt=p, n_gen=n, n_depth=d, **kw)


def resolve_model(model: str | None) -> tuple[ModelSpec, Path]:
    """The model to run: the given file (inspected first), or the default synthetic model."""
    if model is None:
        from ggprof.model.synth import DEFAULT_QUANT, DEFAULT_SHAPE, default_path, ensure_model

        if not default_path(DEFAULT_SHAPE, DEFAULT_QUANT).exists():
            click.echo(f"writing the default synthetic model ({DEFAULT_SHAPE}, {DEFAULT_QUANT})...", err=True)
        path = ensure_model()
        return load_model_arg(str(path)), path
    from ggprof.errors import BadInputError
    from ggprof.model.hub import is_remote

    if is_remote(model):
        raise BadInputError(
            f"{clean_name(model, 100)}: a model is run from this machine's disk: download it first "
            "(`hf download ORG/REPO FILE.gguf`, `ollama pull`), or judge it unrun with `predict` / `fit`"
        )
    spec = load_model_arg(model)
    return spec, spec.path


def check_capabilities(engine: Engine, given: dict[str, bool]) -> None:
    """Each flag given whose measurement the engine cannot make (engines.CAPABILITIES): one
    usage error, naming the engines that can."""
    from ggprof.engines import CAPABILITIES

    for flag, attribute, what in CAPABILITIES:
        if given.get(flag) and not getattr(engine, attribute, False):
            able = sorted(n for n, factory in extensions().engines.items() if getattr(factory, attribute, False))
            raise click.UsageError(
                f"{flag} measures {what}, which the {engine.name} engine cannot"
                + (f"; engines that can: {', '.join(able)}" if able else "")
                + ("; --server [URL] runs the server engine" if "server" in able else "")
            )


def model_source() -> ModelSource:
    """What an engine resolves a model argument with: as the commands do (None: the default
    synthetic model), with the plugins' architecture rules."""
    from ggprof.engines import ModelSource

    return ModelSource(load=lambda text: resolve_model(text)[0], swa_default=extensions().swa_default)


def _header_bytes(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """--max-header-bytes, kept in the command's context (each command has its own)."""
    if value is None:
        return
    from ggprof.units import parse_bytes

    n = parse_bytes(value, whole=True)
    if n is None or not 1 << 16 <= n <= 1 << 32:
        raise click.BadParameter("a size from 64KiB to 4GiB (64MiB, 100000000)", ctx, param)
    ctx.meta["max_header_bytes"] = int(n)


def remote_header_bytes() -> int:
    """What one remote model's header may take: --max-header-bytes, else the default."""
    from ggprof.model.ranges import MAX_HEADER_BYTES

    ctx = click.get_current_context(silent=True)
    return int(ctx.meta.get("max_header_bytes", MAX_HEADER_BYTES)) if ctx is not None else MAX_HEADER_BYTES


def _header_timeout(ctx: click.Context, param: click.Parameter, value: float | None) -> None:
    """--header-timeout, kept in the command's context."""
    if value is None:
        return
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise click.BadParameter(f"{value!r} is not a number of seconds above 0 and at most {MAX_TIMEOUT_S:g}")
    ctx.meta["header_timeout_s"] = float(value)


def remote_header_timeout() -> float:
    """What reading remote headers may take in all: --header-timeout, else the default."""
    from ggprof.model.ranges import HEADER_TIMEOUT_S

    ctx = click.get_current_context(silent=True)
    return float(ctx.meta.get("header_timeout_s", HEADER_TIMEOUT_S)) if ctx is not None else HEADER_TIMEOUT_S


def remote_options(f: Any) -> Any:
    """--max-header-bytes and --header-timeout, for the commands that read a model's header (a
    remote one by range)."""
    f = click.option(
        "--header-timeout",
        type=float,
        metavar="SECONDS",
        callback=_header_timeout,
        expose_value=False,
        help="The most a remote model's header may take in all: every range request, redirect and shard "
        "(default 60); fit's listing of hf://ORG/REPO has as long again, and its models' headers, read "
        "at once, this long together.",
    )(f)
    return click.option(
        "--max-header-bytes",
        metavar="SIZE",
        callback=_header_bytes,
        expose_value=False,
        help="The most a remote model's header may take (default 64MiB).",
    )(f)


def load_model_arg(text: str) -> ModelSpec:
    """Inspect a model: a file, `ollama:NAME[:TAG]`, LM Studio's `publisher/model`, or a remote one
    (`hf://ORG/REPO/FILE.gguf`, an http(s) URL, `ollama://NAMESPACE/MODEL:TAG`: its header by range
    requests), with the plugins' architecture rules."""
    from ggprof.model.hub import is_remote
    from ggprof.model.spec import load_model, model_from_headers
    from ggprof.model.stores import resolve_reference

    if is_remote(text):
        from ggprof.model.hub import model_ref, read_remote_model
        from ggprof.model.ranges import Traffic
        from ggprof.netio import Deadline

        traffic = Traffic()
        deadline = Deadline.after(remote_header_timeout(), "--header-timeout")  # the manifest's too
        headers = read_remote_model(model_ref(text, deadline), remote_header_bytes(), traffic, deadline)
        if traffic.requests:
            click.echo(
                f"{clean_name(headers[0].path, 120)}: header read in {traffic.requests} range request"
                f"{'s' if traffic.requests != 1 else ''}, {traffic.bytes / 1e6:.2f} MB",
                err=True,
            )
        return model_from_headers(headers, swa_default=extensions().swa_default)
    return load_model(resolve_reference(text), swa_default=extensions().swa_default)

"""The options commands share, each parsed where it enters into the typed value the core
takes: run facts with every spelling llama.cpp gives them (ggprof.runfacts), a device choice,
an RPC split, llama-bench's options, a remote header's size. Bad values are Click's usage
errors: one `Error:` line, exit status 2."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ggprof.llamacpp import GGML_MAX_N_THREADS, N_GEN, N_PROMPT, REPETITIONS, STOP_TARGET
from ggprof.runfacts import BY_NAME as RUN_FACTS
from ggprof.runfacts import KV_CACHE_TYPES
from ggprof.units import MAX_TOK_S, MAX_TOKENS, clean_name

if TYPE_CHECKING:
    from ggprof.figures import Figure
    from ggprof.machine.target import DeviceChoice

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


ON_OFF = click.Choice(("on", "off"))  # a switch a report gives: --sycl-reorder


def fact_option(name: str, *, param: str | None = None, default: Any = ..., **kw: Any) -> Callable[[Any], Any]:
    """A run fact's option (ggprof.runfacts): every llama.cpp spelling of its flag, its values
    as llama.cpp writes them (`-fa 1`, `-fa on`, `-fa auto`; a KV type in any case; a count in
    its range), llama.cpp's default unless another is given (None: not given). A `callback`
    given is applied to the value read."""
    fact = RUN_FACTS[name]
    value = fact.default if default is ... else default
    then = kw.pop("callback", None)

    if fact.kind == "overrides":  # -ot, given again and again: each adds its pairs
        return click.option(
            *fact.flags,
            *fact.old_flags,
            param or fact.name,
            multiple=True,
            metavar="PATTERN=BUFFER,...",
            callback=lambda ctx, param, given: _overrides(fact, given),
            help=f"{fact.what[0].upper()}{fact.what[1:]}, as llama.cpp takes it (-ot exps=CPU).",
        )

    def read(ctx: click.Context, param: click.Parameter, given: Any) -> Any:
        got = given if given is None or given == fact.default else fact.read(given)
        if given is not None and got is None:
            wanted = (
                f"one of {', '.join(fact.values)}" if fact.values else f"a whole number from {fact.low} to {fact.high}"
            )
            raise click.BadParameter(f"{clean_name(repr(given), 40)} is not {wanted}")
        return then(ctx, param, got) if then else got

    return click.option(
        *fact.flags,
        *fact.old_flags,
        param or fact.name,
        type=int if fact.kind == "count" else str,
        metavar=f"[{'|'.join(fact.values)}]" if fact.values else "N",
        default=value,
        show_default=value is not None,
        callback=read,
        **{"help": f"{fact.what[0].upper()}{fact.what[1:]}.", **kw},
    )


def _overrides(fact: Any, given: tuple[str, ...]) -> tuple[tuple[str, str], ...] | None:
    """Every -ot given, its pairs in order (None: none given)."""
    pairs: tuple[tuple[str, str], ...] = ()
    for raw in given:
        got = fact.read(raw)
        if got is None:
            raise click.BadParameter(
                f"{clean_name(repr(raw), 60)} is not PATTERN=BUFFER pairs (a regular expression, `=`, a buffer "
                "such as CPU or CUDA0), separated by commas"
            )
        pairs += got
    return pairs or None


def placement_options(f: Any) -> Any:
    """The placement facts (ggprof.runfacts.PLACEMENT) beyond -ngl, each llama.cpp's option,
    passed together as `placement`: (name, value) pairs of those given."""
    import functools

    from ggprof.runfacts import PLACEMENT, placement_of

    # -ngl: each command declares its own; -dev and -ts are --device's and --tensor-split's
    # (device_options, rpc_options), which ggprof had before llama.cpp's spellings were rows
    names = [n for n in PLACEMENT if n not in ("n_gpu_layers", "devices", "tensor_split")]

    # llama-server's switches for a fact (`-cmoe`: every layer's experts in RAM), where they set
    # something the fact's own flag does not say in one word
    switches = [
        (n, v, tuple(fl for fl, x in RUN_FACTS[n].set_by.items() if x == v))
        for n in names
        for v in dict.fromkeys(RUN_FACTS[n].set_by.values())
        if RUN_FACTS[n].kind == "count"
    ]

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {n: kwargs.pop(n) for n in names}
        for i, (n, v, _) in enumerate(switches):
            if kwargs.pop(f"{n}_switch_{i}") and values[n] is None:
                values[n] = v
        kwargs["placement"] = placement_of(values)
        return f(*args, **kwargs)

    for i, (n, _, flags) in reversed(list(enumerate(switches))):
        wrapper = click.option(
            *flags,
            f"{n}_switch_{i}",
            is_flag=True,
            default=False,
            help=f"As {RUN_FACTS[n].flags[0]} with every layer ({RUN_FACTS[n].what}).",
        )(wrapper)
    for name in reversed(names):
        wrapper = fact_option(name, default=None)(wrapper)
    return wrapper


def drafting_options(f: Any) -> Any:
    """How a reported run drafted (ggprof.runfacts.DRAFTING: --spec-type, --spec-draft-n-max,
    -md), each llama.cpp's option, and the acceptance it measured, passed together as
    `drafting`: the facts given, and `acceptance`."""
    import functools

    from ggprof.runfacts import DRAFTING

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {n: kwargs.pop(n) for n in DRAFTING}
        given["acceptance"] = kwargs.pop("draft_acceptance")
        kwargs["drafting"] = {k: v for k, v in given.items() if v is not None}
        return f(*args, **kwargs)

    wrapper = click.option(
        "--draft-acceptance",
        type=float,
        callback=finite_in(-1e-9, 1.0),
        metavar="A",
        help="The share of drafted tokens the target kept (a server's draft_n_accepted / draft_n, a log's "
        "`draft acceptance`): the speculative speed expected.",
    )(wrapper)
    for name in reversed(DRAFTING):
        wrapper = fact_option(name, default=None)(wrapper)
    return wrapper


def switch_given(ctx: click.Context, param: click.Parameter, value: str | None) -> bool | None:
    """A switch a report gives, as whether it was on (None: not given, or `auto`)."""
    return {"on": True, "off": False}.get(value or "")


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


def bandwidth_figure(ctx: click.Context, param: click.Parameter, value: str | None) -> Figure | None:
    """--bandwidth (or --ram-bandwidth): '90' (GB/s), '850GB/s', '1.2TB/s' -> a user-given Figure
    in bytes/s, its detail the option as given."""
    from ggprof.errors import BadInputError
    from ggprof.figures import Figure
    from ggprof.units import parse_bandwidth

    if value is None:
        return None
    try:
        return Figure(parse_bandwidth(value), "user", f"{param.opts[0] if param.opts else '--bandwidth'} {value}")
    except ValueError as e:
        raise BadInputError(str(e)) from None


def _tflops(ctx: click.Context, param: click.Parameter, value: str | None) -> Figure | None:
    """--flops: TFLOP/s as a number -> a user-given Figure in FLOP/s."""
    from ggprof.machine.target import parse_tflops

    return None if value is None else parse_tflops(value)


def _device_choice(kwargs: dict[str, Any]) -> DeviceChoice:
    from ggprof.machine.target import DeviceChoice, parse_device

    given, mapping = kwargs.pop("device_id"), kwargs.pop("device_profiles")
    try:
        profiles, devices = parse_device(given, _is_profile) if given is not None else ((), ())
        named = parse_device_profiles(mapping)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--device' / '-dev'") from None
    return DeviceChoice(
        device_id=profiles[0] if profiles else None,
        bandwidth=kwargs.pop("bandwidth"),
        flops=kwargs.pop("flops"),
        profile_ids=profiles,
        devices=devices,
        device_profiles=named,
    )


def _is_profile(name: str) -> bool:
    """Whether a hardware profile has this id (asked only of a name llama.cpp could mean too)."""
    from ggprof.cli.base import extensions

    return name in extensions().profiles


def parse_device_profiles(given: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """--device-profile CUDA0=rtx-3090,CUDA1=rtx-3060 (repeatable): each llama.cpp device's profile;
    a bare PROFILE is every device's."""
    from ggprof.runfacts import device_list

    out: list[tuple[str, str]] = []
    for text in given:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            device, eq, profile = part.rpartition("=")
            if (eq and not (device_list(device) or ())) or (eq and not profile) or len(part) > 300:
                raise ValueError(
                    f"--device-profile {clean_name(part, 60)!r}: give DEVICE=PROFILE (CUDA0=rtx-3090) or PROFILE"
                )
            out.append((device if eq else "*", profile))
    return tuple(out)


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
        "--bandwidth", metavar="BW", callback=bandwidth_figure, help="Bandwidth override: 90 (GB/s), 850GB/s, 1.2TB/s."
    )(wrapper)
    wrapper = click.option(
        "--device-profile",
        "device_profiles",
        metavar="DEV=PROFILE,...",
        multiple=True,
        help="The profile of each llama.cpp device --device (-dev) or a llama-bench row names: "
        "CUDA0=rtx-3090,CUDA1=rtx-3060; a bare PROFILE is every device's.",
    )(wrapper)
    return click.option(
        "--device",
        "-dev",
        "device_id",
        metavar="ID[,ID...]",
        help="Reason about a profile's device (ggprof profiles); several, comma-separated, are GPUs sharing "
        "the model in that order; llama.cpp's device list (CUDA0,CUDA1, Vulkan0, none) too, each device's "
        "profile from --device-profile. A name that is both is the profile.",
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
        if split and not kwargs["rpc"].active and "placement" in kwargs:
            # local GPUs sharing the model (placement_options wraps this): -ts is a placement fact
            kwargs["placement"] = (*kwargs["placement"], ("tensor_split", kwargs["rpc"].tensor_split))
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
        click.option(
            "--tensor-split",
            "-ts",
            "tensor_split",
            metavar="A,B,...",
            help="Share of the model per device, in order (llama.cpp's -ts 3,1).",
        ),
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


BENCH_FACTS = ("n_ubatch", "n_batch", "type_v", "type_k", "flash_attn", "n_gpu_layers")  # bench_options' run facts


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
        fact_option("n_ubatch"),
        fact_option("n_batch"),
        fact_option("type_v"),
        fact_option("type_k"),
        fact_option("flash_attn"),
        fact_option("n_gpu_layers", help="Layers to offload (-1: all)."),
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

"""`ggprof fit`'s placements of one model on a GPU, each as llama.cpp's flags ready to paste:
every layer on the GPU; for a mixture of experts, the routed experts of the first N layers in
RAM (`-ngl 99 -ncmoe N`, the smallest N whose GPU part fits) and of every layer (`-cmoe`); the
largest plain layer split (`-ngl K`). Each is predicted on its placement (what a token reads from
RAM at the RAM's bandwidth and the CPU's band) and held to every pool's memory at the context;
those that fit are ranked by expected decode (or prefill). Beside them, what llama.cpp's own
`--fit` would choose (common/fit.cpp), for the line that says where it differs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from ggprof.errors import NoBandwidthError
from ggprof.llamacpp import CACHE_TYPE, FIT_MIN_CTX, FIT_ON_BY_DEFAULT_BUILD, FIT_TARGET_MIB
from ggprof.machine.target import Target
from ggprof.model.spec import ModelSpec
from ggprof.physics.memory import MemoryFit, memory_at
from ggprof.physics.placement import EXPERT_TENSORS
from ggprof.physics.roofline import PredictInputs, Prediction
from ggprof.pipelines.extensions import Extensions
from ggprof.pipelines.predict import predict_with

RankBy = Literal["tg", "pp"]
MIB = 1 << 20
FIT_TARGET_BYTES = FIT_TARGET_MIB * MIB  # what llama.cpp's --fit leaves free on each device by default


@dataclass(frozen=True, kw_only=True)
class Placed:
    """One placement: llama.cpp's flags, its prediction at a full context, its memory per pool."""

    n_gpu_layers: int  # 0..n_layers + 1 (every layer and the output layer)
    n_cpu_moe: int  # layers whose routed experts stay in RAM (n_layers: every layer's, -cmoe)
    flags: str  # as llama.cpp takes them: -ngl 99 -ncmoe 18 -c 32768
    memory: tuple[MemoryFit, ...]  # the GPU's pool first, then RAM's where it holds anything
    fits: bool  # every pool holds it at the context (and its largest context is at least that)
    prediction: Prediction | None  # at a full context; None: the RAM's bandwidth is unknown
    first: Prediction | None = None  # on an empty context: the prompt's speed

    @property
    def tg_tok_s(self) -> tuple[float, float] | None:
        e = self.prediction.expected if self.prediction else None
        return (e.low_tok_s, e.high_tok_s) if e else None

    @property
    def pp_tok_s(self) -> tuple[float, float] | None:
        """The prompt's expected speed, or its ceiling at both ends where no band is known."""
        f = self.first
        if f is None:
            return None
        if f.prefill_expected_tok_s is not None:
            return f.prefill_expected_tok_s
        return (f.prefill_ceiling_tok_s, f.prefill_ceiling_tok_s) if f.prefill_ceiling_tok_s else None

    @property
    def in_ram(self) -> bool:
        return len(self.memory) > 1


@dataclass(frozen=True, kw_only=True)
class Placements:
    ranked: tuple[Placed, ...]  # those that fit, best first; then those that do not, smallest first
    llama_fit: Placed | None  # what llama.cpp's --fit would choose given `-c CTX` and no -ngl
    ram_bandwidth_missing: bool  # a placement with weights in RAM could not be predicted


def ngl_flag(n_gpu_layers: int, n_layers: int) -> str:
    """`-ngl` as written: 99 (or 999 past 98 layers) for every layer, as users paste it."""
    if n_gpu_layers > n_layers:
        return "99" if n_layers < 99 else "999"
    return str(n_gpu_layers)


def flags_of(n_gpu_layers: int, n_cpu_moe: int, n_layers: int, inputs: PredictInputs) -> str:
    words = [f"-ngl {ngl_flag(n_gpu_layers, n_layers)}"]
    if n_cpu_moe and n_gpu_layers:
        words.append("-cmoe" if n_cpu_moe >= n_layers else f"-ncmoe {n_cpu_moe}")
    words.append(f"-c {inputs.ctx}")
    if inputs.cache_type_k != CACHE_TYPE:
        words.append(f"-ctk {inputs.cache_type_k}")
    if inputs.cache_type_v != CACHE_TYPE:
        words.append(f"-ctv {inputs.cache_type_v}")
    return " ".join(words)


def has_experts(spec: ModelSpec) -> bool:
    return bool(spec.n_experts) and any(EXPERT_TENSORS.search(t.name) for t in spec.tensors)


def place(spec: ModelSpec, target: Target, inputs: PredictInputs, ext: Extensions, rank_by: RankBy) -> Placements:
    """The placements worth trying on a discrete GPU at `inputs.ctx`, predicted and ranked."""
    n, every = spec.n_layers, spec.n_layers + 1

    def memory(ngl: int, ncmoe: int) -> tuple[MemoryFit, ...]:
        return memory_at(spec, target.device, target.cpu, replace(inputs, n_gpu_layers=ngl, n_cpu_moe=ncmoe))

    def gpu_fits(ngl: int, ncmoe: int) -> bool:
        return memory(ngl, ncmoe)[0].verdict == "fits"

    configs = [(every, 0)]
    if not gpu_fits(every, 0) and target.cpu is not None:
        if has_experts(spec) and gpu_fits(every, n):
            configs += [(every, smallest(lambda k: gpu_fits(every, k), 1, n)), (every, n)]
        elif has_experts(spec):
            configs.append((largest(lambda k: gpu_fits(k, n), 0, n), n))
        configs.append((largest(lambda k: gpu_fits(k, 0), 0, n), 0))
    built = {c: _placed(spec, target, inputs, ext, *c, memory(*c)) for c in dict.fromkeys(configs)}
    chosen = llama_fit_choice(spec, target, inputs, memory)
    if chosen is not None and chosen not in built:
        built[chosen] = _placed(spec, target, inputs, ext, *chosen, memory(*chosen))
    ranked = rank(list(built.values()), rank_by)
    missing = any(p.prediction is None and p.fits for p in built.values())
    return Placements(ranked=ranked, llama_fit=built.get(chosen) if chosen else None, ram_bandwidth_missing=missing)


def _placed(
    spec: ModelSpec,
    target: Target,
    inputs: PredictInputs,
    ext: Extensions,
    ngl: int,
    ncmoe: int,
    memory: tuple[MemoryFit, ...],
) -> Placed:
    at = replace(inputs, n_gpu_layers=ngl, n_cpu_moe=ncmoe)
    pools_hold = all(m.verdict in ("fits", "tight") for m in memory)
    try:
        p: Prediction | None = predict_with(spec, target, at, ext)
        first = predict_with(spec, target, replace(at, depth=0), ext)
    except NoBandwidthError:  # weights in RAM of unknown bandwidth: its memory is still known
        p = first = None
    # "fits" only where the context fits too: a pool within its total but past what is usable
    # holds a shorter context than asked for
    fits = pools_hold and (p is None or p.max_ctx_fits is None or p.max_ctx_fits >= inputs.ctx)
    if p is None:
        fits = fits and memory[0].verdict == "fits"
    flags = flags_of(ngl, ncmoe, spec.n_layers, inputs)
    return Placed(n_gpu_layers=ngl, n_cpu_moe=ncmoe, flags=flags, memory=memory, fits=fits, prediction=p, first=first)


def rank(placed: list[Placed], rank_by: RankBy) -> tuple[Placed, ...]:
    """Those that fit and are predicted, fastest first (decode's low end, or the prompt's); then
    those that fit with a speed unknown; then those that do not fit, the least GPU memory first."""

    def speed(p: Placed) -> tuple[float, float]:
        pair = p.pp_tok_s if rank_by == "pp" else p.tg_tok_s
        return pair if pair is not None else (0.0, 0.0)

    known = sorted((p for p in placed if p.fits and p.prediction is not None), key=speed, reverse=True)
    unknown = [p for p in placed if p.fits and p.prediction is None]
    rest = sorted((p for p in placed if not p.fits), key=lambda p: p.memory[0].required_bytes)
    return (*known, *unknown, *rest)


def llama_fit_choice(
    spec: ModelSpec,
    target: Target,
    inputs: PredictInputs,
    memory: Callable[[int, int], tuple[MemoryFit, ...]],
    margin_bytes: int = FIT_TARGET_BYTES,
) -> tuple[int, int] | None:
    """What llama.cpp's --fit (on by default) chooses for a command line with `-c CTX` and no
    -ngl, on ggprof's memory estimate (common/fit.cpp, one GPU): nothing changes when every layer
    leaves --fit-target (`margin_bytes`, 1,024 MiB by default) of the GPU's free memory; a given
    context is never cut; a mixture of experts whose layers fit without their experts gets as many
    whole layers with their experts as fit (the rest's experts in RAM; llama.cpp takes the last
    layers' where -ncmoe takes the first, the same bytes, and may move part of one more layer);
    otherwise the most layers that fit, experts in RAM. None: the GPU's memory is unknown."""
    free = target.device.memory_available_bytes or target.device.memory_bytes
    if not target.device.is_discrete_gpu or free is None:
        return None
    n, every = spec.n_layers, spec.n_layers + 1

    def within(ngl: int, ncmoe: int) -> bool:
        return memory(ngl, ncmoe)[0].required_bytes <= free - margin_bytes

    if within(every, 0):
        return every, 0
    moe = has_experts(spec)
    if moe and within(every, n):
        return every, smallest(lambda k: within(every, k), 1, n)
    ngl = largest(lambda k: within(k, n if moe else 0), 0, n)
    return ngl, (n if moe and ngl else 0)


# What a command line sets that llama.cpp's --fit then leaves as given (common/fit.cpp refuses to
# fit a placement the user set: -ngl, -ts and the tensor overrides, which -ncmoe and -cmoe are)
FIT_LEAVES = ("n_gpu_layers", "n_cpu_moe", "tensor_buft_overrides", "tensor_split")
NOT_DERIVED = (
    "placement: as given, not derived: ggprof derives llama.cpp's --fit on one GPU whose memory it knows "
    "(several GPUs, or a GPU of unknown memory, are judged on the placement given)"
)


@dataclass(frozen=True)
class FitAsked:
    """A run whose placement llama.cpp's --fit chose: its --fit-target, its --fit-ctx, and whether
    the context was set (-c, or llama-bench's tests) or left to --fit to cut."""

    margin_mib: int = FIT_TARGET_MIB
    min_ctx: int = FIT_MIN_CTX
    ctx_given: bool = True


def fit_asked(
    said: str | None, target: int | None, min_ctx: int | None, ctx_given: bool, build: int | None = None
) -> FitAsked | None:
    """llama.cpp's --fit as a run states it: on where said (`said`: on, off or None), where its
    --fit-target or --fit-ctx is given, or where its build fits unasked (llama-server's and
    llama-cli's since December 2025; not llama-bench's: give no `build` for it). None: off, or
    not known to be on."""
    unasked = build is not None and build >= FIT_ON_BY_DEFAULT_BUILD
    if said == "off" or (said is None and target is None and min_ctx is None and not unasked):
        return None
    return FitAsked(
        margin_mib=FIT_TARGET_MIB if target is None else target,
        min_ctx=FIT_MIN_CTX if min_ctx is None else min_ctx,
        ctx_given=ctx_given,
    )


@dataclass(frozen=True, kw_only=True)
class Fitted:
    """What llama.cpp's --fit set where a run gave no placement: -ngl, -ncmoe, and the context."""

    n_gpu_layers: int
    n_cpu_moe: int
    ctx: int
    flags: str  # as llama.cpp would take them: -ngl 99 -ncmoe 31 -c 32768
    margin_mib: int  # what it left free on the GPU
    device: str  # the GPU it fitted on

    @property
    def note(self) -> str:
        """The placement as a prediction's rule names it: derived, not given."""
        return (
            f"placement: {self.flags}, derived as llama.cpp's --fit would choose it on {self.device}'s memory, "
            f"keeping {self.margin_mib:,} MiB free (no -ngl, -ncmoe or -ot given; its load log prints what it chose)"
        )


def llama_fit(spec: ModelSpec, target: Target, inputs: PredictInputs, asked: FitAsked) -> Fitted | None:
    """llama.cpp's --fit for a run that gave no -ngl, -ncmoe or -ot (common/fit.cpp), on one GPU.
    A context not given (`asked.ctx_given` False: the model's own) is cut first where a full
    offload does not leave the margin: to the context its memory, interpolated linearly between
    the model's and --fit-ctx's, leaves it (down to a multiple of 256, at least --fit-ctx), and
    that is all; where even --fit-ctx's does not, to --fit-ctx, and then the layers as
    llama_fit_choice (none fitting: -ngl 0, every weight in RAM). None: the GPU's memory is
    unknown, or several GPUs share the model."""
    free = target.device.memory_available_bytes or target.device.memory_bytes
    if len(target.gpus) > 1 or free is None:
        return None
    margin = asked.margin_mib * MIB
    every = spec.n_layers + 1

    def memory_at_ctx(ctx: int) -> Callable[[int, int], tuple[MemoryFit, ...]]:
        at = replace(inputs, ctx=ctx)
        return lambda ngl, ncmoe: memory_at(
            spec, target.device, target.cpu, replace(at, n_gpu_layers=ngl, n_cpu_moe=ncmoe)
        )

    def fitted(ngl: int, ncmoe: int, ctx: int) -> Fitted:
        flags = flags_of(ngl, ncmoe, spec.n_layers, replace(inputs, ctx=ctx))
        return Fitted(
            n_gpu_layers=ngl,
            n_cpu_moe=ncmoe,
            ctx=ctx,
            flags=flags,
            margin_mib=asked.margin_mib,
            device=target.device.id,
        )

    ctx = inputs.ctx
    if not asked.ctx_given:
        ctx, low = max(spec.context_length, inputs.ctx), max(asked.min_ctx, inputs.ctx)
        used_max = memory_at_ctx(ctx)(every, 0)[0].required_bytes
        if used_max > free - margin and ctx > low:
            used_min = memory_at_ctx(low)(every, 0)[0].required_bytes
            if free - margin > used_min:  # the whole model fits by cutting the context: the cut is all
                cut = low + (ctx - low) * (free - margin - used_min) // max(used_max - used_min, 1)
                return fitted(every, 0, max(cut - cut % 256, low))
            ctx = low
    chosen = llama_fit_choice(spec, target, replace(inputs, ctx=ctx), memory_at_ctx(ctx), margin)
    return fitted(*chosen, ctx) if chosen is not None else None


def derived(
    spec: ModelSpec, target: Target | None, inputs: PredictInputs, asked: FitAsked
) -> tuple[Fitted | None, str | None]:
    """What --fit chose for a run that asked it, and the rule saying how the placement judged was
    known: derived, or as given where ggprof cannot derive it (several GPUs, a GPU of unknown
    memory). (None, None) with no GPU: nothing for --fit to place."""
    if target is None or not target.device.is_discrete_gpu:
        return None, None
    got = llama_fit(spec, target, inputs, asked)
    return got, (got.note if got is not None else NOT_DERIVED)


def smallest(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """The smallest k in lo..hi with ok(k), ok growing with k (hi when none before it)."""
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def largest(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """The largest k in lo..hi with ok(k), ok shrinking with k (lo when none after it)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo

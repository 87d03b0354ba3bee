"""`ggprof fit`: which of these models runs well on a device, at the context the user needs.

Headers only: each model's ModelSpec is predicted on the device at a full context (the KV
cache a long conversation fills). On a discrete GPU each model gets the placements worth
trying (pipelines.placements: every layer on the GPU, a mixture of experts' experts in RAM,
the largest `-ngl` split), the fastest that fits shown first. The pick is the largest model
that fits, at the context, at or above the speed asked for; every other model says why it
loses.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from ggprof.errors import BadInputError, GGProfError, NoBandwidthError
from ggprof.llamacpp import CACHE_TYPE, N_CTX, N_PROMPT
from ggprof.machine.target import Target
from ggprof.model.ggml import GGML_TYPES_BY_NAME
from ggprof.model.gguf import GGUFHeader, read_model_files
from ggprof.model.ranges import HEADER_TIMEOUT_S, MAX_HEADER_BYTES
from ggprof.model.spec import ModelSpec, model_from_headers
from ggprof.model.stores import Candidate, Location, Scan, Skipped
from ggprof.physics.roofline import PredictInputs, Prediction
from ggprof.physics.rpc import Member
from ggprof.pipelines.extensions import Extensions
from ggprof.pipelines.placements import Placed, RankBy, place
from ggprof.pipelines.predict import predict_with, with_host_roof
from ggprof.pipelines.rpc import predict_split
from ggprof.units import clean_name, fmt_bytes

TTFT_PROMPT = N_PROMPT  # llama-bench's prompt: the TTFT a fit row shows


@dataclass(frozen=True, kw_only=True)
class ChooseOptions:
    ctx: int = N_CTX
    min_tok_s: float = 10.0
    remote: tuple[Member, ...] = ()  # machines a model that does not fit may be split over (RPC)
    max_header_bytes: int = MAX_HEADER_BYTES  # a remote model's header at most (--max-header-bytes)
    header_timeout_s: float = HEADER_TIMEOUT_S  # the remote models' headers, all read at once (--header-timeout)
    cache_type_k: str = CACHE_TYPE  # -ctk: the KV cache the context holds
    cache_type_v: str = CACHE_TYPE  # -ctv
    rank_by: RankBy = "tg"  # which speed ranks a model's placements: decode, or prefill (pp)

    def inputs(self) -> PredictInputs:
        """A model's prediction at this context: decode at a full context, llama-bench's prompt."""
        return PredictInputs(
            depth=self.ctx,
            prompt=TTFT_PROMPT,
            gen=1,
            ctx=self.ctx,
            cache_type_k=self.cache_type_k,
            cache_type_v=self.cache_type_v,
        )


@dataclass(frozen=True, kw_only=True)
class Assessed:
    """One model on the device: where its layers go, how fast, and whether it is the pick."""

    candidate: Candidate
    spec: ModelSpec
    prediction: Prediction
    fits: bool
    n_gpu_layers: int  # llama.cpp's -ngl for this placement: 0 CPU only, n_layers + 1 all
    bits_per_weight: float
    label_note: str | None  # when the file's quant label hides a different mix of types
    needed_bytes: int
    available_bytes: int | None
    ttft_ms: float | None  # a 512-token prompt on an empty context (None: no peak FLOP/s known)
    prefill_tok_s: tuple[float, float] | None = None  # that prompt's expected prefill (the band's ends)
    prefill_ceiling_tok_s: float | None = None  # that prompt's compute ceiling (None: no peak FLOP/s known)
    prefill_basis: str | None = None  # what the expected prefill rests on (the backend's band's source)
    why_not: str | None = None  # None for the pick
    pick: bool = False
    fastest: bool = False  # the fastest that fits at the context (the pick is the largest fast enough)
    split: bool = False  # placed over the main device and the remote machines (llama.cpp's RPC)
    n_cpu_moe: int = 0  # layers whose routed experts stay in RAM (-ncmoe; n_layers: -cmoe)
    flags: str | None = None  # the placement as llama.cpp's flags (None: over RPC, or this host's CPU)
    placements: tuple[Placed, ...] = ()  # on a GPU: every placement tried, those that fit best first
    llama_fit: Placed | None = None  # what llama.cpp's own --fit would choose
    ram_bandwidth_missing: bool = False  # only placements with weights in RAM fit, of unknown bandwidth

    @property
    def expected_low_tok_s(self) -> float | None:
        e = self.prediction.expected
        return e.low_tok_s if e else None

    @property
    def expected_high_tok_s(self) -> float | None:
        e = self.prediction.expected
        return e.high_tok_s if e else None


@dataclass(frozen=True, kw_only=True)
class ChoiceReport:
    models: tuple[Assessed, ...]  # the pick first, then the others that fit by speed, then the rest
    skipped: tuple[Skipped, ...]
    scanned: tuple[Location, ...]  # the default places looked at (empty when paths were given)
    target: Target
    options: ChooseOptions


def scan(paths: Sequence[Path], locations: Sequence[Location]) -> Scan:
    """Candidates under the given paths, or (with none) in the tools' default locations."""
    found = Scan()
    for path in paths:
        found.path(path)
    for loc in locations:
        if loc.exists:
            found.location(loc)
    return found


def choose_models(
    found: Scan, target: Target, options: ChooseOptions, ext: Extensions, scanned: Iterable[Location] = ()
) -> ChoiceReport:
    """Read each candidate's header, place and predict it, pick the best; unreadable files are skipped."""
    assessed: list[Assessed] = []
    skipped = list(found.skipped)
    local = [c for c in found.candidates if c.remote is None]
    remote = [c for c in found.candidates if c.remote is not None]
    read = dict(zip(local, read_headers([c.path for c in local]), strict=True))
    if remote:  # every remote header at once: the network's latency paid once, not per model
        from ggprof.model.hub import read_many

        models = [c.remote for c in remote if c.remote is not None]
        read.update(
            zip(remote, read_many(models, options.max_header_bytes, timeout_s=options.header_timeout_s), strict=True)
        )
    for c in found.candidates:
        headers = read[c]
        try:
            if isinstance(headers, str):
                raise BadInputError(headers)
            spec = model_from_headers(headers, swa_default=ext.swa_default)
            assessed.append(assess(c, spec, target, options, ext))
        except GGProfError as e:
            skipped.append(Skipped(path=c.path, reason=_reason(e, c.path)))
        except Exception as e:  # a bug must not abort the scan of everything else
            skipped.append(Skipped(path=c.path, reason=f"could not be judged: {type(e).__name__}: {e}"))
    return ChoiceReport(
        models=tuple(rank(assessed, options)),
        skipped=tuple(skipped),
        scanned=tuple(scanned),
        target=target,
        options=options,
    )


PARALLEL_FROM_FILES = 16  # fewer files are read here: starting workers would cost more than it saves


def read_headers(paths: Sequence[Path]) -> list[list[GGUFHeader] | str]:
    """Each model's header(s), or the one-line reason it could not be read. Many files are
    read by a worker per core: walking a 128k-token vocabulary is pure Python, ~20 ms a file."""
    workers = min(os.cpu_count() or 1, 8)
    if len(paths) < PARALLEL_FROM_FILES or workers < 2:
        return [_read_one(p) for p in paths]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_read_one, paths, chunksize=max(len(paths) // (4 * workers), 1)))


def _read_one(path: Path) -> list[GGUFHeader] | str:
    try:
        return read_model_files(path)
    except GGProfError as e:
        return str(e)
    except Exception as e:  # a bug must not abort the scan of everything else
        return f"could not be read: {type(e).__name__}: {e}"


def _reason(e: Exception, path: Path) -> str:
    text = str(e)
    for prefix in (f"{path}: ", f"{clean_name(path)}: ", f"{path.name}: "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text


def assess(c: Candidate, spec: ModelSpec, target: Target, options: ChooseOptions, ext: Extensions) -> Assessed:
    try:
        alone = _assess_alone(c, spec, target, options, ext)
    except NoBandwidthError:  # layers left in RAM of unknown bandwidth: the split may not need it
        split = _assess_split(c, spec, target, options, ext) if options.remote else None
        if split is None or not split.fits:
            raise
        return split
    partial = target.device.is_discrete_gpu and (alone.n_gpu_layers <= spec.n_layers or alone.n_cpu_moe > 0)
    if options.remote and (not alone.fits or partial or why_not(alone, options) is not None):
        # one machine does not suffice (too small, layers left in RAM, or too slow): the split
        # over the remote machines when it fits and is faster
        split = _assess_split(c, spec, target, options, ext)
        faster = split is not None and (split.expected_low_tok_s or 0) > (alone.expected_low_tok_s or 0)
        if split is not None and split.fits and (not alone.fits or faster):
            return split
    return alone


def _assess_alone(c: Candidate, spec: ModelSpec, target: Target, options: ChooseOptions, ext: Extensions) -> Assessed:
    inputs = options.inputs()
    if target.device.is_discrete_gpu:
        return _assess_on_gpu(c, spec, target, options, ext)
    # this host's CPU (or one memory): capped by a compute roof kept here
    p = with_host_roof(spec, predict_with(spec, target, inputs, ext), target, ext)
    fits = all(_pool_fits(p, i) for i in range(len(p.memory)))
    empty = predict_with(spec, target, replace(inputs, depth=0), ext)
    return _built(c, spec, p, fits, 0, empty.ttft_floor_ms, prefill=empty)


def _assess_on_gpu(c: Candidate, spec: ModelSpec, target: Target, options: ChooseOptions, ext: Extensions) -> Assessed:
    """The best of the placements tried (pipelines.placements), with the others beside it."""
    placed = place(spec, target, options.inputs(), ext, options.rank_by)
    best = next((p for p in placed.ranked if p.prediction is not None), None)
    if best is None or best.first is None or best.prediction is None:  # every one needs the RAM's bandwidth
        raise NoBandwidthError(RAM_BANDWIDTH_UNKNOWN)
    a = _built(c, spec, best.prediction, best.fits, best.n_gpu_layers, best.first.ttft_floor_ms, prefill=best.first)
    return replace(
        a,
        n_cpu_moe=best.n_cpu_moe,
        flags=best.flags,
        placements=placed.ranked,
        llama_fit=placed.llama_fit,
        ram_bandwidth_missing=placed.ram_bandwidth_missing and not best.fits,
    )


RAM_BANDWIDTH_UNKNOWN = (
    "the placements that fit keep weights in RAM, whose bandwidth is unknown: pass --ram-bandwidth GB/s "
    "(or run `ggprof host` to measure this host's)"
)


def _built(
    c: Candidate,
    spec: ModelSpec,
    p: Prediction,
    fits: bool,
    ngl: int,
    ttft: float | None,
    split: bool = False,
    prefill: Prediction | None = None,
) -> Assessed:
    needed = sum(m.required_bytes for m in p.memory)
    avail = [m.total_bytes for m in p.memory]
    return Assessed(
        candidate=c,
        spec=spec,
        prediction=p,
        fits=fits,
        n_gpu_layers=ngl,
        bits_per_weight=bits_per_weight(spec),
        label_note=label_note(spec),
        needed_bytes=needed,
        available_bytes=sum(a for a in avail if a) if all(avail) else None,
        ttft_ms=ttft,
        prefill_tok_s=prefill.prefill_expected_tok_s if prefill else None,
        prefill_ceiling_tok_s=prefill.prefill_ceiling_tok_s if prefill else None,
        prefill_basis=prefill.prefill_band.source if prefill and prefill.prefill_band else None,
        split=split,
    )


def _assess_split(
    c: Candidate, spec: ModelSpec, target: Target, options: ChooseOptions, ext: Extensions
) -> Assessed | None:
    """The model over the main device and the remote machines, as llama.cpp's RPC would place
    it (every layer offloaded); None when the main host's CPU is not known."""
    local_gpu = target.device if target.device.is_discrete_gpu else None
    host_cpu = target.cpu if local_gpu is not None else target.device
    if host_cpu is None:
        return None
    inputs = PredictInputs(depth=options.ctx, prompt=TTFT_PROMPT, gen=1, ctx=options.ctx, n_gpu_layers=None)
    p = predict_split(spec, host_cpu, options.remote, inputs, ext, local_gpu=local_gpu)
    first = predict_split(spec, host_cpu, options.remote, replace(inputs, depth=0), ext, local_gpu=local_gpu)
    fits = all(_pool_fits(p, i) for i in range(len(p.memory)))
    return _built(c, spec, p, fits, spec.n_layers + 1, first.ttft_floor_ms, split=True)


def _pool_fits(p: Prediction, i: int) -> bool:
    """`fits` or `tight` (within the total, beyond what is free right now) both count as fitting."""
    return p.memory[i].verdict in ("fits", "tight")


def bits_per_weight(spec: ModelSpec) -> float:
    """Stored bits per parameter over all tensors (the file's real mix, not its label)."""
    n = sum(t.n_elements for t in spec.tensors)
    return 8 * spec.tensor_bytes / n if n else 0.0


def label_note(spec: ModelSpec) -> str | None:
    """When the label's base type (Q4_K for Q4_K_M) does not hold most of the bytes."""
    label = (spec.quant_label or "").upper()
    base = max((name.upper() for name in GGML_TYPES_BY_NAME if label.startswith(name.upper())), key=len, default=None)
    by_type = spec.bytes_by_type()
    total = sum(by_type.values())
    if base is None or not total:
        return None
    main, main_bytes = max(by_type.items(), key=lambda kv: kv[1])
    share = by_type.get(base, 0) / total
    if main.upper() == base or share >= 0.5:
        return None
    return f"labelled {label}, but {main} holds {main_bytes / total:.0%} of the bytes ({base} {share:.0%})"


# -- the pick --------------------------------------------------------------------------------
def rank(assessed: list[Assessed], options: ChooseOptions) -> list[Assessed]:
    judged = [replace(f, why_not=why_not(f, options)) for f in assessed]
    ok = [f for f in judged if f.why_not is None]
    pick = max(ok, key=lambda f: (f.spec.n_params, f.bits_per_weight, f.expected_low_tok_s or 0), default=None)
    out = []
    for f in judged:
        if f is pick:
            out.append(replace(f, pick=True))
        elif f.why_not is None and pick is not None:
            out.append(replace(f, why_not=f"smaller than the pick ({_params(f.spec)} vs {_params(pick.spec)} params)"))
        else:
            out.append(f)
    # the fastest of those that fit at the context, for whoever wants speed before size
    able = [f for f in out if f.fits and (f.why_not is None or f.why_not.startswith("smaller than the pick"))]
    fastest = max(able, key=lambda f: f.expected_high_tok_s or 0, default=None)
    out = [replace(f, fastest=True) if f is fastest else f for f in out]
    first = [f for f in out if f.pick]
    fitting = sorted((f for f in out if f.fits and not f.pick), key=lambda f: -(f.expected_high_tok_s or 0))
    rest = sorted((f for f in out if not f.fits), key=lambda f: f.needed_bytes)
    return first + fitting + rest


def why_not(f: Assessed, options: ChooseOptions) -> str | None:
    """Why a model cannot be the pick (None: it can)."""
    if f.ram_bandwidth_missing:
        return f"does not fit without RAM: {RAM_BANDWIDTH_UNKNOWN}"
    if not f.fits:
        avail = fmt_bytes(f.available_bytes, binary=False) if f.available_bytes else "unknown"
        return f"does not fit: needs {fmt_bytes(f.needed_bytes, binary=False)} at ctx {options.ctx:,}, has {avail}"
    trained = f.spec.context_length
    if trained and trained < options.ctx:
        return f"context too short: trained for {trained:,} tokens < --ctx {options.ctx:,}"
    low = f.expected_low_tok_s
    if low is None:
        return "speed unknown: no expected band for this device's backend"
    if low < options.min_tok_s:
        return f"too slow: expected from {low:.3g} tok/s, below --min-tok-s {options.min_tok_s:g}"
    return None


def _params(spec: ModelSpec) -> str:
    n = spec.n_params
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M"

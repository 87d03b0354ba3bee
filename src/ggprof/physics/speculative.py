"""Tokens that cost less than a pass: speculative decoding, where a verify step is the unit of
decode.

A drafter (a draft model `-md`, the model's own MTP heads `--spec-type draft-mtp`, or an
n-gram lookup over the text so far) proposes up to n tokens; the target checks them in one
batched pass over n + 1 positions and keeps the accepted prefix plus one token of its own
(Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
arXiv:2211.17192; Chen et al. 2023, arXiv:2302.01318). With each drafted token accepted with
probability a, a step yields on average

    E(a, n) = (1 - a^(n+1)) / (1 - a)        tokens (n + 1 at a = 1)

and costs one target pass over n + 1 positions (at small n still bandwidth-bound: the weights
read once, the KV cache once per position) plus n draft passes (a draft model's weights and
KV, the MTP heads' weights, nothing for an n-gram lookup). So

    decode tok/s = E(a, n) / (t_target(n + 1) + n x t_draft)

and the hard ceiling, with drafts free and every one accepted, is n + 1 tokens per target
pass: n + 1 times the plain decode ceiling. A measured acceptance (a server's
`draft_n_accepted / draft_n`, a log's `draft acceptance = 0.588`) pins E; without it the
expected speed is the range over every acceptance.

Acceptance falls along a draft (a drafter's guess i tokens ahead is right less often), so one
rate misstates E. llama-server prints the acceptance per draft position (`acc per pos =
(0.897, 0.662, 0.456)`, tools/server/server-context.cpp): p_i, the share of verify steps that
kept position i, counted unconditionally (a step that kept 3 counts in p_1, p_2 and p_3). A step
keeps on average sum(p_i) drafts, so

    E = 1 + sum_i p_i                          (llama.cpp's own `mean len`)

exact for the run, where one rate a = accepted / drafted gives (1 - a^(n+1)) / (1 - a).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ggprof.errors import BadInputError
from ggprof.machine.device import EfficiencyBand, ExpectedSpeed
from ggprof.model.spec import ModelSpec, TensorSpec
from ggprof.physics.placement import placement

# llama.cpp's --spec-type values (common/speculative.cpp), and what a drafted token costs
DRAFT_MODEL_TYPES = frozenset({"draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"})
MTP_TYPES = frozenset({"draft-mtp"})
NGRAM_TYPES = frozenset({"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"})
# the most tokens a step drafts where the run does not say (common/common.h: a draft model's
# n_max 3, ngram-mod's n_max 64, the n-gram maps' size_m 48); an unknown drafter: the largest
DEFAULT_N_MAX = {"ngram-mod": 64, "ngram-simple": 48, "ngram-map-k": 48, "ngram-map-k4v": 48}


def default_n_max(spec_type: str) -> int:
    if spec_type in DRAFT_MODEL_TYPES or spec_type in MTP_TYPES:
        return 3
    return DEFAULT_N_MAX.get(spec_type, max(DEFAULT_N_MAX.values()))


def tokens_per_step(acceptance: float, n_max: int) -> float:
    """E(a, n): the tokens one verify step yields on average (the accepted drafts and one more)."""
    a = min(max(acceptance, 0.0), 1.0)
    if a >= 1.0:
        return float(n_max + 1)
    return (1.0 - a ** (n_max + 1)) / (1.0 - a)


def tokens_per_drafted_step(per_position: tuple[float, ...], n_max: int) -> float:
    """E from llama-server's acceptance per draft position: 1 + sum(p_i), each p_i the share of
    verify steps that kept position i (the positions past n-max never drafted)."""
    return 1.0 + sum(min(max(p, 0.0), 1.0) for p in per_position[:n_max])


def acceptance_from(accepted: int, drafted: int) -> float | None:
    """A measured acceptance: drafted tokens the target kept, of those drafted (None: none drafted)."""
    return accepted / drafted if drafted > 0 and 0 <= accepted <= drafted else None


@dataclass(frozen=True, kw_only=True)
class Drafting:
    """How a run drafted, and what each drafted token cost to draft."""

    spec_type: str  # llama.cpp's --spec-type
    n_max: int  # --spec-draft-n-max: drafted tokens a step at most
    acceptance: float | None = None  # per drafted token, measured (None: not known)
    acceptance_source: str = ""  # where the acceptance came from
    draft_bytes_per_token: int = 0  # bytes one drafted token reads (draft model or MTP heads; 0 for n-grams)
    draft_compute_share: float = 0.0  # one drafted token's arithmetic, as a share of a target position's
    draft_source: str = ""  # what drafted: the draft model's name, the MTP heads, an n-gram lookup
    # measured over the run (a server's timings): drafted and generated tokens per verify step;
    # an n-gram drafter proposes what its lookup finds, often fewer than n-max
    drafted_per_step: float | None = None
    tokens_per_step: float | None = None
    # llama-server's `acc per pos`: the share of verify steps that kept each draft position
    acceptance_per_position: tuple[float, ...] = ()
    # where the draft model's weights live (--spec-draft-ngl, --spec-draft-ncmoe, --spec-draft-device):
    # the bytes of a drafted token read from RAM (of draft_bytes_per_token), and in words
    draft_bytes_in_ram: int = 0
    draft_placement: str = ""
    # the target's routed experts: one token's bytes of them, and the share of the experts a token
    # uses (a verify's positions route apart, so the pass reads the union of their experts)
    expert_bytes_per_token: int = 0
    experts_used_share: float = 0.0

    @property
    def measured(self) -> bool:
        """Whether the run's own counts say what a step yields (not an acceptance model)."""
        return self.tokens_per_step is not None and self.drafted_per_step is not None

    def yields(self, acceptance: float) -> tuple[float, float]:
        """(drafted, generated) tokens a step: as measured, else n-max drafts kept as the
        acceptance per position says, else each at `acceptance`."""
        if self.tokens_per_step is not None and self.drafted_per_step is not None:
            return self.drafted_per_step, self.tokens_per_step
        if self.acceptance_per_position:
            return float(self.n_max), tokens_per_drafted_step(self.acceptance_per_position, self.n_max)
        return float(self.n_max), tokens_per_step(acceptance, self.n_max)

    def modelled(self) -> Drafting:
        """The same drafter with what the run measured left out: each draft kept at one rate."""
        return replace(self, tokens_per_step=None, drafted_per_step=None, acceptance_per_position=())


@dataclass(frozen=True, kw_only=True)
class VerifyStep:
    """One verify step on a device: what it costs and what it yields. The target's pass reads
    its weights once and the KV once per position (bandwidth), and multiplies every position
    through its weights (compute, where a compute roof is known: a CPU's thread probe)."""

    drafting: Drafting
    plain_seconds: float  # one plain decode step at the bandwidth's rate (weights + KV once)
    kv_seconds: float  # reading the KV at depth once more (each position past the first)
    draft_seconds: float  # one drafted token at the bandwidth's rate
    expert_seconds: float = 0.0  # one token's routed experts at the bandwidth's rate
    # the share of this model's speed-up over plain decode that published runs reach, fitted on
    # them (ggprof.calibration.speculative_reach; None: the model's speed-up as it is)
    reach: EfficiencyBand | None = None

    def experts_extra_seconds(self, positions: float) -> float:
        """The routed experts a pass over `positions` reads beyond one token's: each position
        picks its own, so a layer reads E x (1 - (1 - k/E)^m) of its E experts, not k."""
        s = self.drafting.experts_used_share
        if not self.expert_seconds or not 0 < s < 1:
            return 0.0
        return self.expert_seconds * ((1 - float((1 - s) ** positions)) / s - 1)

    @property
    def ceiling_tok_s(self) -> float:
        """n + 1 tokens per target pass, drafts free and all accepted: no speculative run is faster."""
        return (self.drafting.n_max + 1) / self.plain_seconds

    def tok_s(self, acceptance: float, compute_s: float | None = None) -> float:
        """Decode speed at `acceptance`: generated tokens a step over the step's time, each part
        the slower of its bytes over the bandwidth and, with `compute_s` (a target position's
        arithmetic, seconds), its arithmetic."""
        drafted, generated = self.drafting.yields(acceptance)
        target = self.plain_seconds + drafted * self.kv_seconds + self.experts_extra_seconds(drafted + 1)
        drafts = drafted * self.draft_seconds
        if compute_s is not None:
            target = max(target, (drafted + 1) * compute_s)
            drafts = max(drafts, drafted * self.drafting.draft_compute_share * compute_s)
        return generated / (target + drafts)

    def range_tok_s(self, compute_s: tuple[float, float] | None = None) -> tuple[float, float]:
        """The speed at the measured acceptance, or from no draft kept to every one; with a
        compute range (slow, fast), the low end at the slow one and the high at the fast."""
        d, a = self.drafting, self.drafting.acceptance
        lo_a, hi_a = (a, a) if a is not None or d.measured or d.acceptance_per_position else (0.0, 1.0)
        slow, fast = compute_s if compute_s is not None else (None, None)
        return self.tok_s(lo_a or 0.0, slow), self.tok_s(hi_a or 0.0, fast)

    @property
    def break_even_acceptance(self) -> float | None:
        """The acceptance below which drafting is slower than plain decode (None: never slower)."""
        plain = 1 / self.plain_seconds
        modelled = replace(self, drafting=self.drafting.modelled())  # a rate, not what the run kept
        if modelled.tok_s(0.0) >= plain:
            return None
        lo, hi = 0.0, 1.0
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if modelled.tok_s(mid) < plain else (lo, mid)
        return hi


def verify_step(
    drafting: Drafting,
    kv_bytes: int,
    bandwidth_bytes_per_s: float,
    plain_seconds: float,
    ram_bandwidth_bytes_per_s: float | None = None,
    reach: EfficiencyBand | None = None,
) -> VerifyStep:
    """A verify step over one device's memory: `plain_seconds` the plain decode step's time on
    the same placement (its ceiling's inverse), `kv_bytes` the KV a position reads at depth; a
    drafted token's bytes in RAM at the RAM's bandwidth where the device is a GPU's; `reach` the
    fitted share of the modelled speed-up runs reach."""
    in_ram = drafting.draft_bytes_in_ram if ram_bandwidth_bytes_per_s else 0
    on_device = drafting.draft_bytes_per_token - in_ram
    return VerifyStep(
        drafting=drafting,
        plain_seconds=plain_seconds,
        kv_seconds=kv_bytes / bandwidth_bytes_per_s,
        draft_seconds=on_device / bandwidth_bytes_per_s + in_ram / (ram_bandwidth_bytes_per_s or 1.0),
        expert_seconds=drafting.expert_bytes_per_token / bandwidth_bytes_per_s,
        reach=reach,
    )


@dataclass(frozen=True, kw_only=True)
class DraftPlacement:
    """Where llama.cpp puts a draft model's weights: its own -ngl, -ncmoe and -dev."""

    n_gpu_layers: int | None = None  # --spec-draft-ngl (None, -1: auto, every layer that fits)
    n_cpu_moe: int = 0  # --spec-draft-ncmoe: the routed experts of its first N layers in RAM
    devices: tuple[str, ...] = ()  # --spec-draft-device (`none`: no device, all of it in RAM)

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> DraftPlacement:
        """From a run's facts (ggprof.runfacts: spec_draft_ngl, spec_draft_ncmoe, spec_draft_device)."""
        ngl = given.get("spec_draft_ngl")
        return cls(
            n_gpu_layers=None if ngl is None or ngl < 0 else ngl,
            n_cpu_moe=given.get("spec_draft_ncmoe") or 0,
            devices=tuple(given.get("spec_draft_device") or ()),
        )

    def bytes_in_ram(self, draft: ModelSpec) -> int:
        """What a drafted token reads from RAM beside a GPU (llama.cpp's placement of -ngl/-ncmoe)."""
        ngl = 0 if self.devices == ("none",) else self.n_gpu_layers
        return placement(draft, ngl, True, self.n_cpu_moe).cpu_decode_bytes

    def described(self, draft: ModelSpec) -> str:
        in_ram = self.bytes_in_ram(draft)
        if in_ram == 0:
            return ""
        share = in_ram / max(draft.decode_bytes_per_token, 1)
        flags = " ".join(
            f for f in (
                "--spec-draft-device none" if self.devices == ("none",) else "",
                f"--spec-draft-ngl {self.n_gpu_layers}" if self.n_gpu_layers is not None else "",
                f"--spec-draft-ncmoe {self.n_cpu_moe}" if self.n_cpu_moe else "",
            ) if f
        )  # fmt: skip
        return f"{share:.0%} of its bytes a drafted token in RAM ({flags}), read at the RAM's bandwidth"


def expected_speculative(
    step: VerifyStep, band: EfficiencyBand | None, roof: ExpectedSpeed | None = None
) -> ExpectedSpeed | None:
    """The expected decode band of a speculative run: the backend's efficiency band over the
    verify step's speed, at the measured acceptance (or over every acceptance where none is
    known), each position's arithmetic at the compute roof where one is known (a CPU's probe)."""
    if band is None:
        return None
    d = step.drafting
    compute = (1 / roof.low_tok_s, 1 / roof.high_tok_s) if roof is not None and roof.low_tok_s > 0 else None
    bw_low, bw_high = step.range_tok_s()
    low, high = band.low * bw_low, band.high * bw_high
    reach = step.reach
    if reach is not None:
        # published runs reach a share of the modelled speed-up over plain decode (a verify pass
        # over n + 1 positions runs other kernels than one token's; MoE positions route apart):
        # the band scales by that share's band, never past n + 1 tokens a pass
        low, high = low * reach.low, min(high * max(reach.high, 1.0), band.high * step.ceiling_tok_s)
    if compute is not None:
        # a batched pass shares each weight read among its positions, so its arithmetic costs
        # less than that many single tokens' (a CPU's verify of ~2 positions ran at about one
        # plain step here): every position at the roof's pace bounds the low end only
        low = min(low, step.range_tok_s(compute)[0])
    if d.tokens_per_step is not None:
        how = (
            f"measured ({d.acceptance_source}): {d.drafted_per_step:.2f} drafted and {d.tokens_per_step:.2f} "
            "generated a step"
        )
    elif d.acceptance_per_position:
        per_step = tokens_per_drafted_step(d.acceptance_per_position, d.n_max)
        how = f"acceptance per draft position ({d.acceptance_source}): {per_step:.2f} tokens a step"
    elif d.acceptance is not None:
        per_step = tokens_per_step(d.acceptance, d.n_max)
        how = f"acceptance {d.acceptance:.0%} ({d.acceptance_source}): {per_step:.2f} tokens a step"
    else:
        how = f"acceptance not known: from no draft kept ({bw_low:.3g} tok/s) to every one ({bw_high:.3g} tok/s)"
    basis = (
        f"speculative decoding ({d.spec_type}, up to {d.n_max} drafted a step, {d.draft_source}); {how}; "
        f"{band.low:.0%}-{band.high:.0%} of that at the bandwidth's rate"
        + (f"; times the speed-up published runs reach, {reach.source}" if reach is not None else "")
        + (f", down to each position at the compute roof ({roof.basis})" if compute is not None and roof else "")
        + f"; {band.source}"
    )
    return ExpectedSpeed(low_tok_s=low, high_tok_s=high, basis=basis)


def _head_share(spec: ModelSpec, t: TensorSpec) -> float:
    """The share of an MTP block's tensor a drafted token reads: its routed experts as a decode
    reads them (the experts used of those there are), the rest whole."""
    return spec.n_experts_used / spec.n_experts if "_exps." in t.name and spec.n_experts else 1.0


def drafting_for(
    spec: ModelSpec,
    spec_type: str | None,
    n_max: int | None,
    draft: ModelSpec | None,
    acceptance: float | None,
    acceptance_source: str,
    draft_unread: bool = False,
    draft_placement: DraftPlacement | None = None,
) -> Drafting | None:
    """How a run of `spec` drafted, from llama.cpp's settings (`--spec-type`, `-md`,
    `--spec-draft-n-max`): None for a plain decode. A draft model without a type drafts as
    llama.cpp's `draft-simple`; each drafted token costs the draft model's weights, the MTP
    heads' (the nextn blocks and the LM head they share), or nothing for an n-gram lookup."""
    kind = spec_type if spec_type not in (None, "none") else ("draft-simple" if draft is not None else None)
    if kind is None:
        return None
    n = default_n_max(kind) if n_max is None else n_max
    share, in_ram, where = 0.0, 0, ""
    if kind in DRAFT_MODEL_TYPES and draft is None and draft_unread:
        cost, source = 0, "a draft model not read here (its cost counted as nothing)"
    elif kind in DRAFT_MODEL_TYPES:
        if draft is None:
            raise BadInputError(f"--spec-type {kind} drafts with a draft model: give it with -md DRAFT.gguf")
        cost, source = draft.decode_bytes_per_token, f"draft model {draft.path.name}"
        share = draft.active_params / max(spec.active_params, 1)
        if draft_placement is not None:
            in_ram, where = draft_placement.bytes_in_ram(draft), draft_placement.described(draft)
            source += f"; {where}" if where else ""
    elif kind in MTP_TYPES:
        heads = [t for t in spec.tensors if t.layer is not None and t.layer >= spec.n_layers]
        if not heads:
            raise BadInputError(
                f"{spec.path.name}: --spec-type draft-mtp drafts with the model's own MTP heads, and this file "
                "has none (no nextn_predict_layers blocks)"
            )
        head = "token_embd.weight" if spec.tied_embeddings else "output.weight"
        cost = int(sum(t.n_bytes * _head_share(spec, t) for t in heads))
        cost += sum(t.n_bytes for t in spec.tensors if t.name == head)
        source = f"{spec.n_nextn_layers} MTP block(s) and the LM head"
        active = sum(t.n_elements * _head_share(spec, t) for t in heads if not spec.is_lookup(t))
        share = active / max(spec.active_params, 1)
    else:
        cost, source = 0, "an n-gram lookup over the text so far"
    return Drafting(
        spec_type=kind,
        n_max=n,
        acceptance=acceptance,
        acceptance_source=acceptance_source,
        draft_bytes_per_token=cost,
        draft_compute_share=share,
        draft_source=source,
        draft_bytes_in_ram=in_ram,
        draft_placement=where,
        expert_bytes_per_token=int(sum(t.n_bytes * spec.decode_share(t) for t in spec.tensors if "_exps." in t.name)),
        experts_used_share=spec.n_experts_used / spec.n_experts if spec.n_experts else 0.0,
    )

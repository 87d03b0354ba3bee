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
"""

from __future__ import annotations

from dataclasses import dataclass

from ggprof.errors import BadInputError
from ggprof.machine.device import EfficiencyBand, ExpectedSpeed
from ggprof.model.spec import ModelSpec

# llama.cpp's --spec-type values (common/speculative.cpp), and what a drafted token costs
DRAFT_MODEL_TYPES = frozenset({"draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"})
MTP_TYPES = frozenset({"draft-mtp"})
NGRAM_TYPES = frozenset({"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"})


def tokens_per_step(acceptance: float, n_max: int) -> float:
    """E(a, n): the tokens one verify step yields on average (the accepted drafts and one more)."""
    a = min(max(acceptance, 0.0), 1.0)
    if a >= 1.0:
        return float(n_max + 1)
    return (1.0 - a ** (n_max + 1)) / (1.0 - a)


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
    draft_source: str = ""  # what drafted: the draft model's name, the MTP heads, an n-gram lookup


@dataclass(frozen=True, kw_only=True)
class VerifyStep:
    """One verify step on a device: its cost and what it yields."""

    drafting: Drafting
    pass_seconds: float  # the target's pass over n + 1 positions
    draft_seconds: float  # n draft passes
    plain_seconds: float  # one plain decode step (weights + KV once)

    @property
    def step_seconds(self) -> float:
        return self.pass_seconds + self.draft_seconds

    @property
    def ceiling_tok_s(self) -> float:
        """n + 1 tokens per target pass, drafts free and all accepted: no speculative run is faster."""
        return (self.drafting.n_max + 1) / self.plain_seconds

    def tok_s(self, acceptance: float) -> float:
        """Decode speed at `acceptance`, at the bandwidth's full rate."""
        return tokens_per_step(acceptance, self.drafting.n_max) / self.step_seconds

    @property
    def range_tok_s(self) -> tuple[float, float]:
        """The speed at the measured acceptance (low = high), or from no draft kept to every one."""
        a = self.drafting.acceptance
        if a is not None:
            rate = self.tok_s(a)
            return rate, rate
        return self.tok_s(0.0), self.tok_s(1.0)

    @property
    def break_even_acceptance(self) -> float | None:
        """The acceptance below which drafting is slower than plain decode (None: never slower)."""
        plain = 1 / self.plain_seconds
        if self.tok_s(0.0) >= plain:
            return None
        lo, hi = 0.0, 1.0
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.tok_s(mid) < plain else (lo, mid)
        return hi


def verify_step(drafting: Drafting, kv_bytes: int, bandwidth_bytes_per_s: float, plain_seconds: float) -> VerifyStep:
    """A verify step over one device's memory: the target reads its weights once and the KV at
    depth once per position; each drafted token reads `draft_bytes_per_token`. `plain_seconds`:
    the plain decode step's time on the same placement (its ceiling's inverse)."""
    n = drafting.n_max
    extra_kv = n * kv_bytes  # positions past the first read the KV again
    pass_seconds = plain_seconds + extra_kv / bandwidth_bytes_per_s
    draft_seconds = n * drafting.draft_bytes_per_token / bandwidth_bytes_per_s
    return VerifyStep(
        drafting=drafting, pass_seconds=pass_seconds, draft_seconds=draft_seconds, plain_seconds=plain_seconds
    )


def expected_speculative(step: VerifyStep, band: EfficiencyBand | None) -> ExpectedSpeed | None:
    """The expected decode band of a speculative run: the backend's efficiency band over the
    verify step's speed, at the measured acceptance, or over every acceptance where none is known."""
    if band is None:
        return None
    d = step.drafting
    low, high = step.range_tok_s
    if d.acceptance is not None:
        per_step = tokens_per_step(d.acceptance, d.n_max)
        how = f"acceptance {d.acceptance:.0%} ({d.acceptance_source}): {per_step:.2f} tokens a step"
    else:
        how = f"acceptance not known: from no draft kept ({low:.3g} tok/s) to every one ({high:.3g} tok/s)"
    basis = (
        f"speculative decoding ({d.spec_type}, up to {d.n_max} drafted a step, {d.draft_source}); {how}; "
        f"{band.low:.0%}-{band.high:.0%} of that at the bandwidth's rate; {band.source}"
    )
    return ExpectedSpeed(low_tok_s=band.low * low, high_tok_s=band.high * high, basis=basis)


def drafting_for(
    spec: ModelSpec,
    spec_type: str | None,
    n_max: int | None,
    draft: ModelSpec | None,
    acceptance: float | None,
    acceptance_source: str,
) -> Drafting | None:
    """How a run of `spec` drafted, from llama.cpp's settings (`--spec-type`, `-md`,
    `--spec-draft-n-max`): None for a plain decode. A draft model without a type drafts as
    llama.cpp's `draft-simple`; each drafted token costs the draft model's weights, the MTP
    heads' (the nextn blocks and the LM head they share), or nothing for an n-gram lookup."""
    kind = spec_type if spec_type not in (None, "none") else ("draft-simple" if draft is not None else None)
    if kind is None:
        return None
    n = 3 if n_max is None else n_max  # llama.cpp's default (common/common.h)
    if kind in DRAFT_MODEL_TYPES:
        if draft is None:
            raise BadInputError(f"--spec-type {kind} drafts with a draft model: give it with -md DRAFT.gguf")
        cost, source = draft.decode_bytes_per_token, f"draft model {draft.path.name}"
    elif kind in MTP_TYPES:
        heads = [t for t in spec.tensors if t.layer is not None and t.layer >= spec.n_layers]
        if not heads:
            raise BadInputError(
                f"{spec.path.name}: --spec-type draft-mtp drafts with the model's own MTP heads, and this file "
                "has none (no nextn_predict_layers blocks)"
            )
        head = "token_embd.weight" if spec.tied_embeddings else "output.weight"
        cost = sum(t.n_bytes for t in heads) + sum(t.n_bytes for t in spec.tensors if t.name == head)
        source = f"{spec.n_nextn_layers} MTP block(s) and the LM head"
    else:
        cost, source = 0, "an n-gram lookup over the text so far"
    return Drafting(
        spec_type=kind,
        n_max=n,
        acceptance=acceptance,
        acceptance_source=acceptance_source,
        draft_bytes_per_token=cost,
        draft_source=source,
    )

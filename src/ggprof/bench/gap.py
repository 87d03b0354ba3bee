"""Why a server is slower (or faster) than llama-bench: a waterfall from llama-bench's number to
the server's, term by term, each term the difference between two measured runs or requests,
with the evidence that measured them; what no term explains is the arithmetic rest.

This module only holds and adds up what was measured (ggprof.pipelines.gap measures it). The
terms of each waterfall are a chain: each one's `before` is the previous one's `after`, from
llama-bench as it was run to the server's own number, with one link left out (llama-bench with
the server's settings at its depth -> the server's greedy request doing the same work): that
link is the rest, so the terms and the rest add up to the gap exactly. Steps `beyond` the
server's number (what the client sees, every slot busy at once) are measured the same way and
shown after it, outside the gap.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Measured:
    """One measured rate: tok/s per repetition, and what measured it."""

    label: str  # in words: "llama-bench, its defaults", "the server, greedy, answered whole"
    samples: tuple[float, ...]  # tok/s, one a repetition
    evidence: str  # the run or request that measured it: a command line, a request in words

    @property
    def tok_s(self) -> float:
        return float(statistics.median(self.samples))

    @property
    def spread(self) -> float:
        """The samples' standard deviation (0 for one sample)."""
        return statistics.stdev(self.samples) if len(self.samples) > 1 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "tok_s": self.tok_s,
            "samples_tok_s": list(self.samples),
            "evidence": self.evidence,
        }


@dataclass(frozen=True, kw_only=True)
class Term:
    """What one difference between llama-bench and the server costs (negative) or gives: the
    rate with it (`after`) less the rate without it (`before`)."""

    key: str  # "settings", "depth", "sampling", "streaming", "prompt_cache", "client", "slots"
    name: str  # in words
    what: str  # what differs, as measured: "-ub 64 (llama-bench's: 512)"
    before: Measured
    after: Measured

    @property
    def tok_s(self) -> float:
        return self.after.tok_s - self.before.tok_s

    @property
    def noise_tok_s(self) -> float:
        """Its noise: the two sides' spreads added in quadrature."""
        return math.hypot(self.before.spread, self.after.spread)


@dataclass(frozen=True, kw_only=True)
class NotMeasured:
    """A term that could not be measured here, and why."""

    key: str
    name: str
    why: str


@dataclass(frozen=True, kw_only=True)
class Waterfall:
    """One test's waterfall (prefill or decode): from `start` (llama-bench as run; None where
    it could not run here) through `terms` to `end` (the server's number)."""

    test: str  # "prefill" or "decode"
    start: Measured | None
    end: Measured
    terms: tuple[Term, ...]
    beyond: tuple[Term, ...] = ()
    missing: tuple[NotMeasured, ...] = ()
    rest_evidence: str = ""  # what the rest is the difference of, and what it holds

    @property
    def gap_tok_s(self) -> float | None:
        return self.end.tok_s - self.start.tok_s if self.start is not None else None

    @property
    def explained_tok_s(self) -> float:
        return sum(t.tok_s for t in self.terms)

    @property
    def rest_tok_s(self) -> float | None:
        """The gap no term explains (None: no gap, llama-bench did not run here)."""
        gap = self.gap_tok_s
        return gap - self.explained_tok_s if gap is not None else None

    def share(self, tok_s: float) -> float | None:
        """`tok_s` as a share of the gap (None: no gap, or none at all)."""
        gap = self.gap_tok_s
        return tok_s / gap if gap else None

    def largest(self) -> Term | None:
        """The term (or step beyond) that moves the rate most, either way."""
        every = (*self.terms, *self.beyond)
        return max(every, key=lambda t: abs(t.tok_s)) if every else None

    def to_dict(self) -> dict[str, Any]:
        gap, rest = self.gap_tok_s, self.rest_tok_s

        def term(t: Term, in_gap: bool) -> dict[str, Any]:
            return {
                "key": t.key,
                "name": t.name,
                "what": t.what,
                "tok_s": t.tok_s,
                "noise_tok_s": t.noise_tok_s,
                "share_of_gap": self.share(t.tok_s) if in_gap else None,
                "before": t.before.to_dict(),
                "after": t.after.to_dict(),
            }

        return {
            "test": self.test,
            "start": self.start.to_dict() if self.start else None,
            "end": self.end.to_dict(),
            "gap_tok_s": gap,
            "terms": [term(t, True) for t in self.terms],
            "unexplained_tok_s": rest,
            "unexplained_share_of_gap": self.share(rest) if rest is not None else None,
            "unexplained_evidence": self.rest_evidence if rest is not None else None,
            "beyond": [term(t, False) for t in self.beyond],
            "not_measured": [{"key": m.key, "name": m.name, "why": m.why} for m in self.missing],
        }


@dataclass(frozen=True, kw_only=True)
class Gap:
    """`profile --server --vs-bench`: the server, its settings, the turn measured, and the two
    waterfalls."""

    server: str  # in words: "llama-server at http://127.0.0.1:8080, build b1-0c1e570"
    model: str
    local: bool  # the server runs here: llama-bench ran beside it, on the same model file
    turn: dict[str, int]  # prompt, gen, depth, repetitions
    settings: dict[str, Any]  # the server's, as the run-fact table keeps them
    sources: dict[str, str]  # where each was read: "/props", "/slots", "command line"
    bench_flags: str  # llama-bench as it was run (the start)
    server_flags: str  # llama-bench with the server's settings
    prefill: Waterfall
    decode: Waterfall
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "model": self.model,
            "local": self.local,
            "turn": self.turn,
            "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in self.settings.items()},
            "sources": self.sources,
            "llama_bench_flags": self.bench_flags,
            "llama_bench_server_flags": self.server_flags,
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict(),
            "notes": list(self.notes),
        }

"""Judged: one measurement (a depth of a profile run, or one reported number) and its verdict."""

from __future__ import annotations

from dataclasses import dataclass

from ggprof.bench.results import BenchRow
from ggprof.physics.roofline import Prediction
from ggprof.verdict.finding import Verdict


@dataclass(frozen=True, kw_only=True)
class Judged:
    label: str
    depth: int
    prediction: Prediction | None
    tg: float | None
    pp: float | None
    verdict: Verdict
    tg_row: BenchRow | None = None
    pp_row: BenchRow | None = None
    source: str = "measured"  # or "reported" (ggprof check)

    @property
    def efficiency(self) -> float | None:
        if self.prediction is None or self.tg is None:
            return None
        return self.tg / self.prediction.decode_ceiling_tok_s

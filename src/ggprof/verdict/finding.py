"""Finding, JudgeCase and Verdict: the values judging works on. Plain data.

A Verdict is the worst finding; it maps onto the exit status (0 plausible or unknown,
3 suspicious, 4 impossible).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ggprof.errors import ExitStatus

if TYPE_CHECKING:  # annotations only: importing a plugin (and `ggprof --help`) stays cheap
    from ggprof.bench.context import RunContext
    from ggprof.bench.results import ThreadProbe
    from ggprof.machine.device import ExpectedSpeed
    from ggprof.model.spec import ModelSpec
    from ggprof.physics.roofline import Prediction

Severity = Literal["impossible", "suspicious", "plausible", "unknown"]
# How bad: a verdict is the worst judged severity; "unknown" only when nothing could be judged.
RANK: dict[str, int] = {"unknown": 0, "plausible": 1, "suspicious": 2, "impossible": 3}
EXIT: dict[str, ExitStatus] = {
    "unknown": ExitStatus.OK,
    "plausible": ExitStatus.OK,
    "suspicious": ExitStatus.SUSPICIOUS,
    "impossible": ExitStatus.IMPOSSIBLE,
}
BASE_TOLERANCE = 0.05  # measurement tolerance above a ceiling, before the run's own noise
# The run's noise widens the tolerance (2 x its coefficient of variation), up to this cap: a
# claim with a huge stddev must not escape its verdict. Honest runs measured for calibration
# vary by at most 11% (docs/calibration-threads-2026-11-29-epyc.jsonl), so 5% + 2 x 11% fits.
MAX_TOLERANCE = 0.25
# Repetitions varying more than this are too noisy to judge: a finding of their own. Twice the
# most that honest runs kept for calibration varied (11%, docs/calibration-threads-2026-11-29-epyc.jsonl).
NOISY_CV = 0.20


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One judgement with its evidence. `code` is stable (scripts may match on it)."""

    severity: Severity
    code: str
    title: str
    expected: str | None = None
    observed: str | None = None
    evidence: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()  # most likely first
    next_step: str | None = None
    plugin: str = "ggprof"


@dataclass(frozen=True, kw_only=True)
class JudgeCase:
    """A measurement (or a reported number) and what is known around it."""

    model: ModelSpec
    backend: str
    prediction: Prediction | None  # None when no bandwidth is known
    measured_tg_tok_s: float | None = None
    measured_pp_tok_s: float | None = None
    n_prompt: int = 0
    depth: int = 0
    tg_cv: float | None = None
    pp_cv: float | None = None
    context: RunContext | None = None  # None for a reported number (`ggprof check`)
    probe: ThreadProbe | None = None  # decode with fewer threads, same model and depth
    tg_samples_tok_s: tuple[float, ...] = ()  # each repetition, in order
    source: Literal["measured", "reported"] = "measured"
    n_threads: int | None = None  # the decode's threads where no run context says (a kept probe's run)
    roof_note: str | None = None  # where the compute roof came from, or why the band has none
    # a model estimated from a log, not read from its file: how far its bytes per token may be off
    model_uncertainty: float = 0.0

    @property
    def run_threads(self) -> int | None:
        """The threads the judged decode ran on: the run's, else those the case was given."""
        return self.context.n_threads if self.context is not None and self.context.n_threads else self.n_threads

    @property
    def tolerance(self) -> float:
        """How far above a ceiling a number may land before it is impossible (noise, rounding)."""
        noise = 2 * max(self.tg_cv or 0.0, 0.0)
        return min(BASE_TOLERANCE + noise + max(self.model_uncertainty, 0.0), MAX_TOLERANCE)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    findings: tuple[Finding, ...]
    expected: ExpectedSpeed | None = None  # the decode band the findings were judged against
    # the one tolerance the verdict allows its measurement outside a ceiling or band (a fraction:
    # JudgeCase.tolerance), and how it is made
    tolerance: float | None = None
    tolerance_basis: str | None = None
    # the cause named first in every finding it explains, and what to do (a machine busy during the run)
    likely_cause: str | None = None
    likely_next_step: str | None = None

    @property
    def severity(self) -> Severity:
        if not self.findings:
            return "unknown"
        return max(self.findings, key=lambda f: RANK[f.severity]).severity

    @property
    def exit_status(self) -> ExitStatus:
        return EXIT[self.severity]


def worst(verdicts: list[Verdict]) -> Severity:
    judged = [v.severity for v in verdicts]
    return max(judged, key=lambda s: RANK[s]) if judged else "unknown"


def plugin_failed(plugin: str, where: str, consequence: str, error: str) -> Finding:
    """The finding for a plugin that raised: named, with its error; the rest of the verdict stands."""
    from ggprof.units import clean_name

    return Finding(
        severity="unknown",
        code="PLUGIN_FAILED",
        title=f"plugin {plugin!r} failed {where}; {consequence}",
        evidence=(clean_name(error, 300),),
        next_step="report it to the plugin's authors, or leave it out with GGPROF_PLUGINS",
        plugin=plugin,
    )

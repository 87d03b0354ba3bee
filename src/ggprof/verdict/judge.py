"""judge(): the run's backend applies the shared rules; every plugin may add findings.

The caller passes the backends and the extra-findings callable (the CLI builds both from
the plugin manager), so nothing here knows about plugins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from ggprof.bench.context import UNKNOWN_PLACEMENT
from ggprof.machine.device import Detection
from ggprof.verdict import rules
from ggprof.verdict.backend import Backend
from ggprof.verdict.busy import likely
from ggprof.verdict.finding import RANK, Finding, JudgeCase, Verdict, plugin_failed

if TYPE_CHECKING:
    from ggprof.machine.host import HostContext

ExtraFindings = Callable[[JudgeCase], Iterable[Finding]]


def no_extra_findings(case: JudgeCase) -> list[Finding]:
    return []


class _Unplugged(Backend):
    """A backend no plugin knows (MUSA, CANN, OpenCL): judged by the physical ceilings alone, which hold
    whatever ran the model; it has no band and detects nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def detect(self, host: HostContext) -> Detection:
        return Detection(backend=self.name, reason="no plugin knows this backend")


def judge(
    case: JudgeCase, backends: Mapping[str, Backend], extra_findings: ExtraFindings = no_extra_findings
) -> Verdict:
    """The run's backend judges; a backend nobody knows is an `unknown` finding, never a guess."""
    extra = list(extra_findings(case))
    backend = backends.get(case.backend)
    if backend is None and case.backend == UNKNOWN_PLACEMENT:
        unknown = Finding(
            severity="unknown",
            code="PLACEMENT_UNKNOWN",
            title="where the model ran is not known (the server does not say), so it cannot be judged",
            evidence=tuple(case.context.notes[:2]) if case.context else (),
            next_step="pass --device ID: the GPU or CPU the server runs the model on",
        )
        return Verdict(findings=(*extra, unknown))
    if backend is None:
        unknown = Finding(
            severity="unknown",
            code="UNKNOWN_BACKEND",
            title=f"no plugin knows the backend {case.backend!r}",
            evidence=(f"known backends: {', '.join(sorted(backends))}",),
            next_step="pass --backend with one of the known backends",
        )
        # what no backend can do (above the device's bandwidth or compute ceiling, more memory
        # than it has) is impossible on this one too; within the ceilings nothing is known
        physics = [f for f in rules.findings(_Unplugged(case.backend), case) if f.severity == "impossible"]
        return Verdict(findings=tuple(sorted([*physics, *extra, unknown], key=lambda f: -RANK[f.severity])))
    try:
        found, expected = rules.findings(backend, case), rules.expected_for(backend, case)
    except Exception as e:  # a backend plugin's bug: say so, keep what the other plugins found
        failed = plugin_failed(backend.name, "while judging", "the run is not judged", f"{type(e).__name__}: {e}")
        found, expected = [failed], None
    cause, step = likely(case, found)
    return Verdict(
        findings=tuple(sorted(found + extra, key=lambda f: -RANK[f.severity])),
        expected=expected,
        tolerance=case.tolerance,
        tolerance_basis=rules.tolerance_text(case),
        likely_cause=cause,
        likely_next_step=step,
    )

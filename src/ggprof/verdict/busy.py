"""A machine busy while a CPU run measured: the likely cause of its slow or noisy verdict, named
first with the share of the CPU others used and what to do (ggprof.machine.load.Contention)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ggprof.machine.load import Contention
    from ggprof.verdict.finding import Finding, JudgeCase

# The findings a busy machine explains: a decode or prompt below its band, repetitions too noisy
# to judge. Not a GPU left unused, a model that does not fit, or a speed above a ceiling.
EXPLAINED = ("RUN_TOO_NOISY", "DECODE_BELOW_BAND", "PREFILL_BELOW_BAND")


def contention_of(case: JudgeCase) -> Contention | None:
    """Others' load during a CPU run ggprof measured, where it was enough to slow the run."""
    ctx = case.context
    if case.source != "measured" or ctx is None or case.backend != "cpu":
        return None
    found = ctx.contention
    return found if found is not None and found.material else None


def first_causes(
    case: JudgeCase, diagnosed: tuple[str, ...], generic: tuple[str, ...], known: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """A slow finding's causes: the busy machine first where it was; then the causes the rules
    know (`known`) and those the backend found in the run's context (`diagnosed`), where none
    was found the generic list (what may be wrong when nothing is known), never beside a busy
    machine, which is known."""
    busy = contention_of(case)
    if busy is not None:
        return (busy.cause(), *known, *diagnosed)
    return (*known, *(diagnosed or generic))


def busy_next_step(case: JudgeCase, otherwise: str | None) -> str | None:
    busy = contention_of(case)
    return busy.next_step() if busy is not None else otherwise


def likely(case: JudgeCase, findings: Iterable[Finding]) -> tuple[str | None, str | None]:
    """The verdict's likely cause and what to do: a busy machine, where it explains a finding."""
    busy = contention_of(case)
    if busy is None or not any(f.code in EXPLAINED for f in findings):
        return None, None
    return busy.cause(), busy.next_step()

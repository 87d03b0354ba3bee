"""The rules for a speculative decode (a verify step the unit): what the step reads, why a
drafted run is slower than its band, and a speed no number of kept drafts allows."""

from __future__ import annotations

from ggprof.physics.roofline import Prediction
from ggprof.units import tps
from ggprof.verdict.backend import Backend
from ggprof.verdict.finding import Finding, JudgeCase


def drafting_evidence(p: Prediction) -> tuple[str, ...]:
    step = p.step
    assert step is not None
    d = step.drafting
    return (
        f"speculative decoding: {d.spec_type}, up to {d.n_max} drafted a step ({d.draft_source}); a verify step "
        f"reads the weights once ({step.plain_seconds * 1e3:.3g} ms, a plain step), the KV again for each drafted "
        f"position ({step.kv_seconds * 1e3:.3g} ms each) and {step.draft_seconds * 1e3:.3g} ms a drafted token; "
        f"plain decode {tps(p.decode_ceiling_tok_s)} at most",
        f"at most {d.n_max + 1} tokens per target pass: {tps(p.decode_limit_tok_s)}",
    )


def drafting_causes(p: Prediction) -> tuple[str, ...]:
    """A speculative run slower than its band: drafts rejected (below break-even, slower than plain)."""
    step = p.step
    if step is None:
        return ()
    d = step.drafting
    even = step.break_even_acceptance
    where = f" (below {even:.0%} acceptance drafting is slower than plain decode)" if even is not None else ""
    known = f"; measured {d.acceptance:.0%}" if d.acceptance is not None else ""
    drafted, _ = d.yields(d.acceptance or 0.0)
    long_steps = (
        f"long verify steps: {drafted:.3g} drafted positions a step on average (up to {d.n_max}), each adding a "
        "position's arithmetic to the target's pass; where the pass is compute-bound (a CPU, a large batch) a step "
        "costs near as many plain steps as it has positions"
    )
    if d.acceptance is not None and (even is None or d.acceptance >= even):
        return (long_steps,)  # the drafts were kept: what is left is what checking them cost
    return (f"low draft acceptance: the target rejected most drafted tokens{where}{known}", long_steps)


def above_drafting(b: Backend, case: JudgeCase, p: Prediction, tg: float, evidence: tuple[str, ...]) -> Finding:
    step = p.step
    assert step is not None
    n = step.drafting.n_max
    return Finding(
        severity="impossible",
        code="DECODE_ABOVE_DRAFT_CEILING",
        title=f"decode at {tps(tg)} is more than {n + 1} tokens per target pass allow ({tps(p.decode_limit_tok_s)})",
        expected=f"at most {tps(p.decode_limit_tok_s)}: every one of {n} drafts accepted, drafts free",
        observed=tps(tg),
        evidence=(*evidence, f"tolerance {case.tolerance:.0%} above the ceiling"),
        causes=(
            f"more drafted tokens a step than --spec-draft-n-max {n} (a larger n-max, or another drafter)",
            *b.causes.impossible,
        ),
        next_step="check the run's --spec-type and --spec-draft-n-max, and which device and model really ran",
        plugin=b.name,
    )

"""History listings and comparisons, as text, CSV and JSON."""

from __future__ import annotations

import csv
import io
from typing import Any

from ggprof.history.compare import Comparison, Difference
from ggprof.history.store import COLUMNS, Run
from ggprof.runfacts import BY_NAME
from ggprof.units import clean_name, sig3

HISTORY_FIELDS = ("id", "created_at", "kind", "model_name", "model_key", "host_fingerprint", *COLUMNS)


def history_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """Each run's columns, and its settings (run facts, spelled as llama.cpp writes them)."""
    return [{**{f: getattr(r, f) for f in HISTORY_FIELDS}, "settings": r.settings} for r in runs]


def settings_line(settings: dict[str, str]) -> str:
    """A run's settings as llama.cpp's flags write them (`-ngl 999 -ub 512 -fa auto`)."""
    return " ".join(f"{BY_NAME[n].flag} {v}" for n, v in settings.items() if n in BY_NAME)


def history_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[*HISTORY_FIELDS, "settings"], lineterminator="\n")
    writer.writeheader()
    writer.writerows({**r, "settings": settings_line(r["settings"])} for r in rows)
    return buf.getvalue()


def _rate(value: float | None, sd: float | None) -> str:
    if value is None:
        return "-"
    return f"{sig3(value)} ± {sig3(sd)}" if sd else sig3(value)


def history_text(runs: list[Run]) -> str:
    if not runs:
        return "no runs kept yet (ggprof profile and ggprof bench keep each run)"
    head = f"{'id':>4}  {'when (UTC)':<16} {'model':<24} {'device':<10} {'pp tok/s':>13} {'tg tok/s':>13}"
    lines = [f"{head} {'share':>6}  verdict"]
    for r in runs:
        when = r.created_at.replace("T", " ")[:16]
        device = f"{r.backend or '?'} t{r.n_threads}" if r.n_threads else r.backend or "?"
        share = f"{r.efficiency:.0%}" if r.efficiency is not None else "-"
        lines.append(
            f"{r.id:>4}  {when:<16} {clean_name(r.model_name or r.model_key, 24):<24} {clean_name(device, 10):<10} "
            f"{_rate(r.pp_tok_s, r.pp_stddev_tok_s):>13} {_rate(r.tg_tok_s, r.tg_stddev_tok_s):>13} {share:>6}  "
            f"{r.verdict or r.kind}"
        )
    lines.append("share: measured decode / the bandwidth ceiling; ± the stddev of the repetitions")
    return "\n".join(lines)


def _diff_dict(d: Difference) -> dict[str, Any]:
    return {
        "test": d.test,
        "a_tok_s": d.a.mean,
        "a_stddev_tok_s": d.a.sd,
        "a_n": d.a.n,
        "b_tok_s": d.b.mean,
        "b_stddev_tok_s": d.b.sd,
        "b_n": d.b.n,
        "speedup": d.speedup,
        "t": d.t,
        "df": d.df,
        "significant": d.significant,
        "verdict": d.verdict,
    }


def compare_dict(c: Comparison) -> dict[str, Any]:
    return {
        "a": c.a_label,
        "b": c.b_label,
        "method": "Welch's t-test on the repetitions, two-sided, 5%",
        "tests": [_diff_dict(d) for d in c.diffs],
        "other_differences": list(c.settings),
        "only_in_a": list(c.only_in_a),
        "only_in_b": list(c.only_in_b),
    }


def compare_text(c: Comparison) -> str:
    a, b = clean_name(c.a_label, 30), clean_name(c.b_label, 30)
    lines = [
        f"A = {a}, B = {b}",
        "| test | A t/s | B t/s | speedup | difference |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for d in c.diffs:
        lines.append(
            f"| {d.test} | {_rate(d.a.mean, d.a.sd)} | {_rate(d.b.mean, d.b.sd)} | {d.speedup:.3f} | {d.verdict} |"
        )
    lines.append("difference: Welch's t-test on the repetitions (two-sided, 5%); ± the stddev")
    if c.settings:
        lines.append(
            "also different (not only the thing compared): " + "; ".join(clean_name(s, 80) for s in c.settings)
        )
    for label, tests in (("only in A", c.only_in_a), ("only in B", c.only_in_b)):
        if tests:
            lines.append(f"{label}: {', '.join(tests)}")
    return "\n".join(lines)

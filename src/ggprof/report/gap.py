"""The waterfall of `profile --server --vs-bench`, from llama-bench's number to the server's:
as text (the command's output, and `report`'s block) and as a picture (`plot`). Both read the
gap as its JSON keeps it (ggprof.bench.gap.Gap.to_dict), so a kept run draws as it printed."""

from __future__ import annotations

import statistics
from typing import Any

from ggprof.units import clean_name, sig3

TESTS = ("prefill", "decode")


def gap_record(gap: dict[str, Any]) -> dict[str, Any]:
    """What history keeps: the gap, and the server's numbers as rows (its prefill and decode)."""
    turn, rows = gap.get("turn") or {}, []
    for test in TESTS:
        end = (gap.get(test) or {}).get("end") or {}
        samples = end.get("samples_tok_s") or []
        pp = test == "prefill"
        rows.append(
            {
                "engine": "server",
                "backends": "unknown",
                "n_prompt": turn.get("prompt", 0) if pp else 0,
                "n_gen": 0 if pp else turn.get("gen", 0),
                "n_depth": turn.get("depth", 0) if pp else turn.get("depth", 0) + turn.get("prompt", 0),
                "avg_ts": end.get("tok_s"),
                "stddev_ts": statistics.stdev(samples) if len(samples) > 1 else 0.0,
                "samples_ts": samples,
            }
        )
    return {"gap": gap, "rows": rows, "context": {"engine": "server", "backends_used": []}}


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{sig3(v)} tok/s"


def _signed(v: float) -> str:
    return f"{'+' if v >= 0 else '-'}{sig3(abs(v))}"


def _share(v: float | None) -> str:
    return "" if v is None else f"{v:.0%} of the gap"


def gap_text(gap: dict[str, Any]) -> str:
    """The waterfall, one block a test, each term with its tok/s, noise, share of the gap and
    the numbered evidence that measured it (listed once, at the end)."""
    turn = gap.get("turn") or {}
    lines = [
        f"Why {clean_name(gap.get('server'), 160)} runs {clean_name(gap.get('model'), 80)} at another speed "
        "than llama-bench",
        f"the turn: a {turn.get('depth', 0):,}-token conversation, then {turn.get('prompt', 0):,} new tokens and "
        f"{turn.get('gen', 0):,} decoded; {turn.get('repetitions', 0)} repetitions, each rate their median",
    ]
    if gap.get("local"):
        lines += [
            f"  llama-bench as it was run:     {clean_name(gap.get('llama_bench_flags'), 200)}",
            f"  with the server's settings:    {clean_name(gap.get('llama_bench_server_flags'), 200)}",
        ]
    sources = gap.get("sources") or {}
    said = sorted(set(sources.values()))
    if said:
        lines.append(f"  the server's settings were read from {', '.join(clean_name(s, 40) for s in said)}")
    evidence: list[str] = []

    def cite(text: str) -> str:
        text = clean_name(text, 400)
        if text not in evidence:
            evidence.append(text)
        return f"[{evidence.index(text) + 1}]"

    for test in TESTS:
        w = gap.get(test) or {}
        lines += ["", *_test_lines(w, cite)]
    for n in gap.get("notes") or []:
        lines.append(f"note: {clean_name(n, 300)}")
    lines += ["", "evidence:"] + [f"  [{i}] {e}" for i, e in enumerate(evidence, 1)]
    return "\n".join(lines)


def _test_lines(w: dict[str, Any], cite: Any) -> list[str]:
    start, end = w.get("start"), w.get("end") or {}
    lines = [f"{w.get('test')}:"]
    total = start.get("tok_s") if start else None
    width = 42
    if start:
        lines.append(
            f"  {clean_name(start.get('label'), width):<{width}} {_rate(total):>14}  {cite(start['evidence'])}"
        )
    else:
        lines.append(f"  {'llama-bench: not run here':<{width}} {'-':>14}")
    for t in w.get("terms") or []:
        if total is not None:
            total += t["tok_s"]
        before, after = t.get("before") or {}, t.get("after") or {}
        lines.append(
            f"  {'+ ' + clean_name(t.get('name'), width - 2):<{width}} {_signed(t['tok_s']):>8} ± "
            f"{sig3(t.get('noise_tok_s') or 0):<5} {_share(t.get('share_of_gap')):>14}  "
            f"{cite(before.get('evidence', ''))} -> {cite(after.get('evidence', ''))}"
        )
        lines.append(f"      {clean_name(t.get('what'), 300)}")
    rest = w.get("unexplained_tok_s")
    if rest is not None:
        lines.append(
            f"  {'+ unexplained':<{width}} {_signed(rest):>8}         {_share(w.get('unexplained_share_of_gap')):>14}"
        )
        lines.append(f"      {clean_name(w.get('unexplained_evidence'), 300)}")
    gap = w.get("gap_tok_s")
    said = f"  (gap {_signed(gap)} tok/s)" if gap is not None else ""
    lines.append(
        f"  {'= ' + clean_name(end.get('label'), width - 2):<{width}} {_rate(end.get('tok_s')):>14}  "
        f"{cite(end.get('evidence', ''))}{said}"
    )
    for t in w.get("beyond") or []:
        after = t.get("after") or {}
        lines.append(
            f"  beyond: {clean_name(t.get('name'), width - 10):<{width - 8}} {_signed(t['tok_s']):>8} ± "
            f"{sig3(t.get('noise_tok_s') or 0):<5} -> {_rate(after.get('tok_s'))}  {cite(after.get('evidence', ''))}"
        )
        lines.append(f"      {clean_name(t.get('what'), 300)}")
    for m in w.get("not_measured") or []:
        lines.append(f"  not measured: {clean_name(m.get('name'), 60)} ({clean_name(m.get('why'), 200)})")
    return lines


def gap_markdown(gap: dict[str, Any]) -> str:
    """`report`'s block: the waterfall as a table a test."""
    out = []
    for test in TESTS:
        w = gap.get(test) or {}
        start, end = w.get("start"), w.get("end") or {}
        first = _rate(start.get("tok_s")) if start else "llama-bench not run here"
        out += ["", f"**{test}** ({first} -> {_rate(end.get('tok_s'))})", ""]
        out += ["| term | tok/s | ± | share of the gap | what |", "| --- | ---: | ---: | ---: | --- |"]
        for t in [*(w.get("terms") or []), *(w.get("beyond") or [])]:
            share = t.get("share_of_gap")
            out.append(
                f"| {_cell(t.get('name'))} | {_signed(t['tok_s'])} | {sig3(t.get('noise_tok_s') or 0)} | "
                f"{'-' if share is None else f'{share:.0%}'} | {_cell(t.get('what'))} |"
            )
        if (rest := w.get("unexplained_tok_s")) is not None:
            share = w.get("unexplained_share_of_gap")
            out.append(f"| unexplained | {_signed(rest)} | | {'-' if share is None else f'{share:.0%}'} | |")
    return "\n".join(out)


def _cell(text: object) -> str:
    return clean_name(text, 160).replace("|", "/")

"""The public "server slower than bench" reports behind docs/commands.md's "What public reports
found" (benchmarks/data/server-gap-public.jsonl): a data-integrity test. Each row cites its
thread, quotes the figures it records, and names the waterfall terms its cause corresponds to
from ggprof's set; every number in the docs table is one of the rows' figures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "server-gap-public.jsonl"
TERMS = {"settings", "depth", "sampling", "streaming", "prompt_cache", "client", "slots", "rest", "not modelled"}
UNKNOWN = "unknown"  # the thread's cause was not found: named so, never guessed
FIGURE_KEYS = ("bench", "server")


def _rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def _figures(row: dict[str, Any]) -> list[float]:
    """The measured numbers of a row: every int or float under bench and server."""
    return [
        value
        for key in FIGURE_KEYS
        for value in row[key].values()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    ]


def _spelled(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row["id"])
def test_each_row_cites_quotes_and_names_its_terms(row: dict[str, Any]) -> None:
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/issues/\d+", row["source"])
    assert row["id"].split("#")[1] == row["source"].rsplit("/", 1)[1]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"])
    quote = row["source_quote"]
    figures = _figures(row)
    assert figures, "a report without one figure is no comparison"
    for value in figures:
        if row["server"].get("sample_ms_per_token") == value or row["bench"].get("depth") == value:
            continue  # quoted too, checked below where it is a figure of the thread
        assert _spelled(value) in quote, f"{value} is not in the quote"
    if "sample_ms_per_token" in row["server"]:
        assert f"{row['server']['sample_ms_per_token']} ms per token" in quote
    terms = row["terms"]
    assert terms and (set(terms) <= TERMS or terms == [UNKNOWN])
    assert row["terms_why"].strip()
    if terms == [UNKNOWN]:
        assert "not found" in row["cause"].lower() or "none" in row["cause"].lower()
    assert row["cause"].strip() and row["cause_quotes"]
    assert "not_found" in row  # what could not be read is said, not left out


@pytest.mark.parametrize("row", [r for r in _rows() if r["gap_pct"] is not None], ids=lambda row: row["id"])
def test_a_reported_gap_is_its_two_figures(row: dict[str, Any]) -> None:
    bench, server = row["bench"], row["server"]
    key = "repro_tg_tok_s" if "repro_tg_tok_s" in bench else "tg_tok_s"
    assert round(100 * (server[key] / bench[key] - 1), 1) == row["gap_pct"]


def test_the_docs_table_is_the_jsonl() -> None:
    """Every report in the docs table is a row, and every number the table gives is in that
    row (a figure, its gap, or its quote)."""
    doc = (ROOT / "docs" / "commands.md").read_text()
    table = doc.split("<!-- public-gaps -->", 1)[1].split("<!-- /public-gaps -->", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("| [")]
    rows = {row["source"]: row for row in _rows()}
    assert len(lines) == len(rows)
    for line in lines:
        url = re.search(r"\]\((https://[^)]+)\)", line)
        assert url and url.group(1) in rows, line
        row = rows[url.group(1)]
        cells = line.split(" | ")
        assert row["id"] in cells[0]
        numbers = set(_figures(row)) | ({abs(row["gap_pct"])} if row["gap_pct"] is not None else set())
        text = re.sub(r"#\d+|RTX \d+", "", " | ".join(cells[1:]))  # threads and GPUs, not figures
        for spelled in re.findall(r"\d+(?:\.\d+)?", text):
            assert float(spelled) in numbers or spelled in row["source_quote"], (spelled, line)
        term_cell = cells[-1].strip(" |")
        named = {"the sampler chain": "sampling", "not modelled": "not modelled", UNKNOWN: UNKNOWN}
        expected = {named.get(term.strip(), term.strip()) for term in term_cell.split(",")}
        assert expected == set(row["terms"]), line

"""benchmarks/data/speculative-results.jsonl, the public speculative results that
benchmarks/bench_speculative.py judges: each row says where it was published, quotes its
figures, and names the device profile it ran on (or why it is not judged)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ggprof.machine.profiles import ProfileDB

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "speculative-results.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("row", ROWS, ids=[f"line {i}" for i in range(1, len(ROWS) + 1)])
def test_a_row_has_its_source_its_figures_quoted_and_a_profile(row: dict[str, Any]) -> None:
    assert row["source"].startswith("https://"), row["source"]
    quote = row["source_quote"]
    assert f"{row['tg_tok_s_spec']:g}" in quote
    # the plain figure in the quote, or in the notes where another run of the source gives it
    assert f"{row['tg_tok_s_plain']:g}" in quote + row["notes"]
    assert row["profile"] or row["skip"], "no profile and no reason to skip the row"
    known = ProfileDB.default().all()
    for device in (row["profile"] or "").split(","):
        assert not device or device in known, device
    assert row["hardware"], "the hardware as published is kept beside its profile"

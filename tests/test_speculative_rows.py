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


def test_the_committed_reach_is_a_refit_of_the_rows(tmp_path: Path) -> None:
    """speculative-fits.json is what `calibrate.py --write` (bench_speculative.write_reach) fits on
    speculative-results.jsonl now: each row that states its acceptance, its measured speed-up over
    the verify-step model's."""
    import sys

    sys.path.insert(0, str(DATA.parents[1]))
    import bench_speculative

    from ggprof.calibration import committed_reach
    from ggprof.calibration.placements import fit_share

    fresh = fit_share(bench_speculative.reach_rows(bench_speculative.load_rows(), tmp_path), bench_speculative.REACH)
    assert fresh is not None and committed_reach() is not None
    assert json.loads(fresh.to_json()) == json.loads(committed_reach().to_json())  # type: ignore[union-attr]


def test_a_rows_reach_is_its_measured_speed_up_over_the_models(tmp_path: Path) -> None:
    """Row 36 (Llama-3.1-8B Q8_0 drafted by Llama-3.2-1B Q8_0 on an RTX 3060, n = 5, a = 0.72055):
    32.49 -> 55.473 tok/s, a 1.707x speed-up. The model's at that acceptance: E = (1 - a^6) / (1 - a)
    = 3.078 tokens a step; the step reads the 8B's weights once (7.97 GB, KV none at depth 0) and
    the 1B's five times (1.31 GB each): 14.54 GB, against a plain step's 7.97 GB, so 3.078 x 7.97 /
    14.54 = 1.688x. The reach: 1.707 / 1.688 = 1.01."""
    import sys

    sys.path.insert(0, str(DATA.parents[1]))
    import bench_speculative

    rows = bench_speculative.load_rows()
    found = {r.label.split(":")[0]: r for r in bench_speculative.reach_rows(rows, tmp_path)}
    row = rows[35]
    assert row["model"].startswith("Llama-3.1-8B") and row["acceptance"] == pytest.approx(0.72055)
    assert found["row 35"].share == pytest.approx(1.01, abs=0.01)

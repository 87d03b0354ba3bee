"""benchmarks/data/moe-results.jsonl, the public results of mixtures of experts run wholly on one
device that benchmarks/bench_moe.py fits a MoE layer's fixed time on: each row sourced with its
figure quoted and its device's profile; the committed fit a refit of them; a mixture's decode
judged with the term and a dense model's without it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from ggufs import GPT_OSS_120B, LLAMA_3_1_8B_F16, write_model
from support import in_process

from ggprof.machine.profiles import ProfileDB

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "moe-results.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("row", ROWS, ids=[f"line {i}" for i in range(1, len(ROWS) + 1)])
def test_a_row_has_its_source_its_figure_quoted_and_a_profile(row: dict[str, Any]) -> None:
    assert row["source"].startswith("https://"), row["source"]
    assert f"{row['tok_s']:g}" in row["source_quote"]
    assert row["profile"] is None or row["profile"] in ProfileDB.default().all()
    assert isinstance(row["moe"], bool) and row["model_family"]


def test_the_committed_fit_is_a_refit_of_the_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_moe

    from ggprof.calibration import committed_moe
    from ggprof.calibration.moe import fit_layer_cost

    fresh = fit_layer_cost(bench_moe.layer_rows(bench_moe.load_rows(), tmp_path), bench_moe.WHAT)
    assert fresh is not None and committed_moe() is not None
    assert json.loads(fresh.to_json()) == json.loads(committed_moe().to_json())  # type: ignore[union-attr]


def test_a_mixtures_decode_pays_its_moe_layers_and_a_dense_models_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpt-oss-120b on an RTX PRO 6000 (one 96 GB GPU holds it): 36 MoE layers at the fitted time
    lower the band's slow end; Llama 3.1 8B F16 (no expert) keeps its band."""
    from ggprof.calibration import committed_moe

    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    fit = committed_moe()
    assert fit is not None
    moe = write_model(tmp_path / "gpt-oss-120b.gguf", GPT_OSS_120B)[0]
    r = in_process("predict", str(moe), "--device", "rtx-pro-6000-blackwell", "--json")
    p = json.loads(r.stdout)
    source = p["efficiency_band_source"]
    assert "plus 36 MoE layers' kernels at the fixed time a MoE layer adds to a token on a GPU" in source
    dense = write_model(tmp_path / "llama-8b.gguf", LLAMA_3_1_8B_F16)[0]
    r = in_process("predict", str(dense), "--device", "rtx-pro-6000-blackwell", "--json")
    assert "MoE layers" not in json.loads(r.stdout)["efficiency_band_source"]

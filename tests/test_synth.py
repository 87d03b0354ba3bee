"""`ggprof synth`: shapes, sizes, finite weights, caching."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from support import RunCli

from ggprof.model.spec import load_model
from ggprof.model.synth import SHAPES, default_path, ensure_model, write_model


def test_list_shapes(run_cli: RunCli) -> None:
    r = run_cli("synth", "--list")
    assert r.exit_code == 0
    for name in ("tiny", "small", "small-tied", "1b", "3b", "8b", "moe"):
        assert f"\n{name} " in "\n" + r.stdout
    rows = {row["shape"]: row for row in json.loads(run_cli("synth", "--list", "--json").stdout)}
    assert rows["8b"]["n_params"] == SHAPES["8b"].n_params
    assert 30e6 < rows["tiny"]["size_bytes_q4_0"] < 80e6  # ~50 MB class
    assert 3.5e9 < rows["8b"]["size_bytes_q4_0"] < 5e9  # 8B class


@pytest.mark.parametrize("quant", ["q4_0", "q8_0", "f16"])
def test_written_model_matches_its_shape_and_is_finite(tmp_path: Path, quant: str) -> None:
    shape = SHAPES["tiny"]
    path = write_model(shape, quant, tmp_path / f"tiny-{quant}.gguf")
    spec = load_model(path)
    assert spec.tensor_bytes == shape.size_bytes(quant)
    assert (spec.n_layers, spec.n_embd, spec.n_heads, spec.n_kv_heads) == (8, 512, 8, 2)
    assert spec.quant_label == {"q4_0": "Q4_0", "q8_0": "Q8_0", "f16": "F16"}[quant]
    reader = gguf.GGUFReader(path)
    for t in reader.tensors:
        data = np.asarray(t.data)
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            values = data.astype(np.float32)
        elif t.tensor_type == gguf.GGMLQuantizationType.F16:
            values = data.view(np.float16).astype(np.float32)
        else:  # quantized blocks: the fp16 scale leads every block
            block_bytes = {"q4_0": 18, "q8_0": 34}[quant]
            values = data.reshape(-1, block_bytes)[:, :2].copy().view(np.float16).astype(np.float32)
        assert np.isfinite(values).all(), t.name
        nonzero = np.abs(values[values != 0])
        assert (nonzero >= np.finfo(np.float16).tiny).all(), f"denormal in {t.name}"


def test_tied_and_moe_shapes(tmp_path: Path) -> None:
    tied = load_model(write_model(SHAPES["small-tied"], "q4_0", tmp_path / "t.gguf"))
    assert tied.tied_embeddings
    moe = load_model(write_model(SHAPES["moe"], "q4_0", tmp_path / "m.gguf"))
    assert (moe.n_experts, moe.n_experts_used) == (8, 2)
    assert moe.decode_bytes_per_token < 0.4 * moe.tensor_bytes  # 2 of 8 experts per token


def test_cached_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: RunCli) -> None:
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    r = run_cli("synth", "--shape", "tiny", "--json")
    d = json.loads(r.stdout)
    assert Path(d["path"]) == default_path("tiny", "q4_0") and Path(d["path"]).is_relative_to(tmp_path / "cache")
    mtime = Path(d["path"]).stat().st_mtime_ns
    assert ensure_model("tiny", "q4_0").stat().st_mtime_ns == mtime  # not written again
    out = tmp_path / "elsewhere.gguf"
    r = run_cli("synth", "--shape", "tiny", "--quant", "q8_0", "-o", str(out))
    assert r.exit_code == 0 and out.exists() and str(out) in r.stdout


def test_unknown_shape(run_cli: RunCli) -> None:
    r = run_cli("synth", "--shape", "9000b")
    assert r.exit_code == 2 and r.stderr.startswith("Error: unknown shape '9000b'")

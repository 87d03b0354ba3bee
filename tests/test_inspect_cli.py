"""`ggprof inspect`: human summary and JSON on real and written models."""

from __future__ import annotations

import json
from pathlib import Path

from ggufs import Shape, write_model
from support import RunCli

REQUIRED_KEYS = {
    "path",
    "file_size_bytes",
    "gguf_version",
    "architecture",
    "quant_label",
    "n_params",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "head_dim_k",
    "head_dim_v",
    "context_length",
    "vocab_size",
    "n_experts",
    "n_experts_used",
    "tied_embeddings",
    "bytes_by_type",
    "decode_bytes_per_token",
    "kv_bytes_per_token",
}


def test_gemma_json(gemma_path: Path, run_cli: RunCli) -> None:
    r = run_cli("inspect", "--json", str(gemma_path))
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) >= REQUIRED_KEYS
    assert d["architecture"] == "gemma3"
    assert (d["n_layers"], d["n_heads"], d["n_kv_heads"], d["head_dim_k"], d["head_dim_v"]) == (18, 4, 1, 256, 256)
    assert d["tied_embeddings"] is True
    assert d["n_params"] == 268_098_176
    assert d["vocab_size"] == 262_144
    assert d["quant_label"] == "Q4_K_M"
    assert d["sliding_window"] == 512
    assert d["swa_layers"] == [i for i in range(18) if i % 6 != 5]
    assert sum(d["bytes_by_type"].values()) == sum(d["layer_bytes"]) + d["non_layer_bytes"]
    assert d["kv_bytes_per_token"] == 18 * 512 * 2
    assert d["file_size_bytes"] == gemma_path.stat().st_size


def test_gemma_text_fits_80_columns(gemma_path: Path, run_cli: RunCli) -> None:
    r = run_cli("inspect", str(gemma_path))
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    text = r.stdout
    assert "gemma3, Q4_K_M, 268M params (268,098,176)" in text
    assert "18 layers" in text and "vocab 262,144" in text
    assert "4 heads, 1 KV head, head dim 256" in text
    assert "512 tokens on 15 of 18 layers" in text
    assert "253 MB (241 MiB)" in text  # GB and GiB labelled


def test_moe_split_and_per_layer_heads_in_json(tmp_path: Path, run_cli: RunCli) -> None:
    files = write_model(
        tmp_path / "moe.gguf",
        Shape(n_layers=3, n_kv_heads=[2, 4, 1], n_experts=8, n_experts_used=2),
        split_max_tensors=10,
    )
    d = json.loads(run_cli("inspect", "--json", str(files[0])).stdout)
    assert d["n_kv_heads"] == [2, 4, 1]
    assert (d["n_experts"], d["n_experts_used"]) == (8, 2)
    assert len(d["paths"]) == len(files) == 4
    assert d["file_size_bytes"] == sum(f.stat().st_size for f in files)
    text = run_cli("inspect", str(files[0])).stdout
    assert "2 of 8 used per token" in text and "KV heads 1-4" in text and "4 shards" in text


def test_usage_errors_are_one_line(run_cli: RunCli) -> None:
    r = run_cli("inspect")
    assert r.exit_code == 2
    assert r.stderr == "Error: Missing argument 'MODEL.gguf'.\n"
    r = run_cli("inspect", "--bogus", "x")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "No such option" in r.stderr


def test_inspect_of_a_local_file_loads_no_engine_verdict_or_network_module(gemma_path: Path) -> None:
    """`ggprof inspect FILE` loads what reading a header needs (the plugins' architecture rules
    included), not the engines, the verdict rules, the log reader, the pipelines or the network:
    its start-up is most of its time (benchmarks/bench_inspect.py times it)."""
    import subprocess
    import sys

    code = (
        "import sys, runpy\n"
        "sys.argv = ['ggprof', 'inspect', sys.argv[1]]\n"
        "try:\n    runpy.run_module('ggprof', run_name='__main__')\n"
        "finally:\n    print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(gemma_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "gemma3" in r.stdout, r.stderr[-2000:]
    loaded = set(r.stderr.split())
    assert "ggprof.model.spec" in loaded and "ggprof.plugins" in loaded  # it did read the model, with the plugins
    unwanted = {"ggprof.engines", "ggprof.verdict.judge", "ggprof.logs", "ggprof.pipelines", "ggprof.model.hub"}
    unwanted |= {"ggprof.bench.supervise", "psutil", "http.client", "ssl", "huggingface_hub"}
    assert loaded & unwanted == set()

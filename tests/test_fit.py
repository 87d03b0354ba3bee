"""`ggprof fit`: models found in an Ollama store, LM Studio's folder and the Hugging Face cache
(laid out as the tools lay them out, in a temporary home), ranked on a user-given device."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ggufs import F16, Q4_K, Shape, write_model
from support import RunCli

# Sparse-data GGUFs with real headers: the bytes a token reads are these shapes' own.
SMALL = Shape(
    n_layers=4, n_embd=512, n_heads=8, n_kv_heads=2, n_ff=1024, vocab=2000, qtype=Q4_K, file_type=15, context=8192
)
MEDIUM = Shape(
    n_layers=16, n_embd=2048, n_heads=16, n_kv_heads=4, n_ff=5632, vocab=32000, qtype=Q4_K, file_type=15, context=8192
)
LARGE = Shape(
    n_layers=32, n_embd=4096, n_heads=32, n_kv_heads=8, n_ff=14336, vocab=32000, qtype=Q4_K, file_type=15, context=8192
)
HUGE = Shape(
    n_layers=80, n_embd=8192, n_heads=64, n_kv_heads=8, n_ff=28672, vocab=32000, qtype=F16, file_type=1, context=8192
)
SHORT = Shape(n_layers=2, n_embd=256, n_heads=4, n_kv_heads=2, n_ff=512, vocab=1000, context=2048)
ROOT = Path(__file__).resolve().parents[1]
DEVICE = ("--bandwidth", "90", "--memory", "16")  # a desktop CPU: 90 GB/s, 16 GB of RAM


def sha(path: Path, salt: str = "") -> str:
    """A content address from the header's first bytes (the data section is a sparse hole)."""
    with path.open("rb") as f:
        return hashlib.sha256(f.read(4096) + salt.encode()).hexdigest()


def ollama_store(root: Path, models: dict[str, Shape], tmp: Path) -> None:
    """`manifests/registry.ollama.ai/library/<name>/<tag>` naming `blobs/sha256-<hex>`."""
    (root / "blobs").mkdir(parents=True)
    for ref, shape in models.items():
        name, tag = ref.split(":")
        src = write_model(tmp / f"{name}-{tag}.gguf", shape)[0]
        digest = sha(src, ref)
        os.replace(src, root / "blobs" / f"sha256-{digest}")
        manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
        manifest.parent.mkdir(parents=True)
        layers = [
            {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 1},
            {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64, "size": 1},
        ]
        manifest.write_text(json.dumps({"schemaVersion": 2, "config": {}, "layers": layers}))


def hf_cache(hub: Path, repo: str, filename: str, shape: Shape, tmp: Path) -> None:
    """`models--org--name/snapshots/<rev>/<file>` -> a symlink into `blobs/`, as huggingface_hub does."""
    base = hub / ("models--" + repo.replace("/", "--"))
    (base / "blobs").mkdir(parents=True)
    blob = write_model(tmp / "hf.gguf", shape)[0]
    target = base / "blobs" / sha(blob)
    os.replace(blob, target)
    snap = base / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / filename).symlink_to(os.path.relpath(target, snap))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with an Ollama store, an LM Studio folder, a Hugging Face cache, and junk."""
    home = tmp_path / "home"
    for var in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "LLAMA_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    ollama_store(home / ".ollama" / "models", {"medium:latest": MEDIUM, "huge:70b": HUGE}, work)
    broken = home / ".ollama" / "models" / "manifests" / "registry.ollama.ai" / "library" / "gone" / "latest"
    broken.parent.mkdir(parents=True)
    broken.write_text(
        json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "f" * 64}]})
    )
    lms = home / ".lmstudio" / "models" / "acme" / "large-GGUF"
    lms.mkdir(parents=True)
    write_model(lms / "large-Q4_K_M.gguf", LARGE)
    (lms / "README.md").write_text("not a model")
    (lms / "notes.gguf").write_text("this is not a GGUF file, whatever its name says")
    hf_cache(home / ".cache" / "huggingface" / "hub", "org/small-GGUF", "small-q4_k_m.gguf", SMALL, work)
    (home / ".cache" / "llama.cpp").mkdir(parents=True)
    write_model(home / ".cache" / "llama.cpp" / "short.gguf", SHORT)
    return home


def fit_json(run_cli: RunCli, *args: str) -> tuple[int, dict[str, Any]]:
    r = run_cli("fit", *args, "--json")
    assert r.stdout, r.stderr
    return r.exit_code, json.loads(r.stdout)


def test_scan_of_the_default_places_ranks_and_picks(home: Path, run_cli: RunCli) -> None:
    code, d = fit_json(run_cli, *DEVICE, "--ctx", "4096", "--min-tok-s", "5")
    models = {m["name"]: m for m in d["models"]}
    assert code == 0 and set(models) == {
        "medium:latest",
        "huge:70b",
        "org/small-GGUF: small-q4_k_m",
        "large-Q4_K_M",
        "short",
    }
    assert {m["store"] for m in d["models"]} == {"ollama", "huggingface", "lm-studio", "llama.cpp"}
    # the pick: the largest model that fits in 16 GB at 4,096 tokens and decodes at >= 5 tok/s
    assert d["models"][0]["name"] == "large-Q4_K_M" and d["models"][0]["pick"] and d["best"] == d["models"][0]["path"]
    assert models["huge:70b"]["fits"] is False and models["huge:70b"]["why_not"].startswith("does not fit: needs")
    assert models["short"]["why_not"] == "context too short: trained for 2,048 tokens < --ctx 4,096"
    assert models["medium:latest"]["why_not"].startswith("smaller than the pick")
    # fitting models after the pick, fastest first; the one that does not fit last
    fitting = [m["expected_tok_s_high"] for m in d["models"][1:] if m["fits"]]
    assert fitting == sorted(fitting, reverse=True) and d["models"][-1]["name"] == "huge:70b"
    skipped = {Path(s["path"]).name: s["reason"] for s in d["skipped"]}
    assert skipped["latest"] == "the manifest of gone:latest points to a missing blob (sha256-" + "f" * 64 + ")"
    assert skipped["notes.gguf"].startswith("not a GGUF file")
    assert "README.md" not in skipped  # folders are scanned for GGUF files, not everything
    assert {s["store"] for s in d["scanned"] if s["exists"]} == {"ollama", "lm-studio", "huggingface", "llama.cpp"}


def test_json_keys_and_figures_of_one_model(home: Path, run_cli: RunCli) -> None:
    large = home / ".lmstudio" / "models" / "acme" / "large-GGUF" / "large-Q4_K_M.gguf"
    code, d = fit_json(run_cli, str(large), *DEVICE, "--ctx", "4096")
    (m,) = d["models"]
    assert set(m) >= {
        "path", "name", "quant_label", "bits_per_weight", "file_size_bytes", "fits", "n_gpu_layers",
        "decode_ceiling_tok_s", "expected_tok_s_low", "expected_tok_s_high", "max_ctx",
    }  # fmt: skip
    assert m["quant_label"] == "Q4_K_M" and m["bits_per_weight"] == pytest.approx(
        4.5, abs=0.01
    )  # all Q4_K: 144 B / 256
    assert m["label_note"] is None and m["n_gpu_layers"] == 0 and m["fits"] is True
    # the ceiling at 90 GB/s with the KV of 4,096 tokens (32 layers x 8 KV heads x 128 x 2 x 2 bytes per token)
    from ggprof.model.spec import load_model

    spec = load_model(large)
    per_token = spec.decode_bytes_per_token + 4096 * 32 * 8 * 128 * 2 * 2
    assert m["decode_ceiling_tok_s"] == pytest.approx(90e9 / per_token, rel=1e-6)
    # the CPU band fitted on public results, from the stored parameters (docs/calibration.md): a
    # K-quant model reaches 1 / read_factor of the bandwidth, times the residual spread's ends
    # (the CPU fit has no per-layer or per-GB cost)
    stored = json.loads((ROOT / "src" / "ggprof" / "calibration" / "speed-fits.json").read_text())["decode"]["cpu"]
    assert stored["per_unit_s"] == stored["per_gb_s"] == 0
    share = 1 / stored["read_factor"]["k"]
    low, high = share * math.exp(stored["residual_low"]), min(share * math.exp(stored["residual_high"]), 1.0)
    assert m["expected_tok_s_low"] == pytest.approx(low * m["decode_ceiling_tok_s"], rel=1e-4)
    assert m["expected_tok_s_high"] == pytest.approx(high * m["decode_ceiling_tok_s"], rel=1e-4)
    assert code == 0 and d["skipped"] == [] and d["scanned"] == []


def test_a_gpu_too_small_gets_the_best_split(home: Path, run_cli: RunCli) -> None:
    large = home / ".lmstudio" / "models" / "acme" / "large-GGUF" / "large-Q4_K_M.gguf"
    ggprof_host = run_cli("host", "--quick")  # the split's CPU part needs this host's bandwidth
    assert ggprof_host.exit_code == 0
    code, d = fit_json(run_cli, str(large), "--device", "rtx-4090", "--gpu-memory", "3", "--memory", "64")
    (m,) = d["models"]
    assert code == 0 and m["fits"] and 0 < m["n_gpu_layers"] < 33  # some layers on the 3 GB GPU, the rest in RAM
    code, d = fit_json(run_cli, str(large), "--device", "rtx-4090")
    assert d["models"][0]["n_gpu_layers"] == 33  # 24 GB: everything offloaded (-ngl all)


def test_the_human_table_fits_100_columns(home: Path, run_cli: RunCli) -> None:
    r = run_cli("fit", *DEVICE, "--min-tok-s", "5")
    assert r.exit_code == 0 and "* large-Q4_K_M" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 100


def test_ollama_and_lm_studio_references(home: Path, run_cli: RunCli) -> None:
    r = run_cli("inspect", "ollama:medium", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["n_layers"] == 16
    r = run_cli("inspect", "ollama:huge:70b", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["n_layers"] == 80
    r = run_cli("predict", "acme/large-GGUF", *DEVICE[:2], "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["model"].endswith("large-Q4_K_M.gguf")
    r = run_cli("inspect", "ollama:nosuch:7b")
    assert r.exit_code == 2 and r.stderr.startswith("Error: ollama:nosuch:7b: no such model in Ollama's store")
    r = run_cli("inspect", "ollama:gone")
    assert r.exit_code == 2 and "points to a missing blob" in r.stderr


def test_bad_paths_are_skipped_with_the_reason(home: Path, tmp_path: Path, run_cli: RunCli) -> None:
    good = home / ".cache" / "llama.cpp" / "short.gguf"
    code, d = fit_json(run_cli, str(good), str(tmp_path / "missing"), *DEVICE, "--ctx", "1024")
    assert code == 0 and [m["name"] for m in d["models"]] == ["short"]
    assert d["skipped"] == [{"path": str(tmp_path / "missing"), "reason": "no such file or folder"}]


def test_an_unreadable_folder_is_skipped(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Permissions do not apply to root (CI runs as root), so the refusal is the OS's answer, replayed."""
    from ggprof.model.stores import Scan

    locked = home / ".lmstudio" / "models" / "acme"
    real_scandir = os.scandir

    def scandir(path: str | os.PathLike[str]) -> Iterator[os.DirEntry[str]]:
        if Path(str(path)) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    found = Scan()
    found.path(home / ".lmstudio" / "models")
    assert found.candidates == [] and [(s.path, s.reason) for s in found.skipped] == [
        (locked, "permission denied: folder not readable")
    ]


def test_nothing_readable_is_one_error_line(tmp_path: Path, run_cli: RunCli) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_text("nope")
    r = run_cli("fit", str(junk), str(tmp_path / "missing.gguf"), *DEVICE)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"Error: no readable GGUF model in {junk}, {tmp_path / 'missing.gguf'}; ")


def test_split_models_are_one_model(tmp_path: Path, run_cli: RunCli) -> None:
    folder = tmp_path / "split"
    folder.mkdir()
    shards = write_model(folder / "m.gguf", SHORT, split_max_tensors=8)  # gguf's own splitter
    assert [p.name for p in shards] == ["m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"]
    code, d = fit_json(run_cli, str(folder), *DEVICE, "--ctx", "1024")
    assert code == 0 and [m["name"] for m in d["models"]] == ["m"] and d["skipped"] == []


def test_many_files_are_read_by_workers_with_the_same_result(tmp_path: Path, run_cli: RunCli) -> None:
    from ggprof.pipelines.choose import PARALLEL_FROM_FILES

    folder = tmp_path / "many"
    folder.mkdir()
    first = write_model(folder / "model-00.gguf", SMALL)[0]
    for i in range(1, PARALLEL_FROM_FILES + 4):
        os.link(first, folder / f"model-{i:02d}.gguf")
    (folder / "zz-junk.gguf").write_text("this is not a GGUF file, whatever its name says")
    code, d = fit_json(run_cli, str(folder), *DEVICE, "--ctx", "1024")
    assert code == 0 and len(d["models"]) == PARALLEL_FROM_FILES + 4
    assert len({(m["decode_ceiling_tok_s"], m["max_ctx"], m["bits_per_weight"]) for m in d["models"]}) == 1
    assert [(Path(s["path"]).name, s["reason"][:16]) for s in d["skipped"]] == [("zz-junk.gguf", "not a GGUF file ")]


@pytest.mark.parametrize("ctx", [2048, 8192, 16384])
def test_a_split_that_fits_holds_the_context_it_was_asked_for(ctx: int, tmp_path: Path, run_cli: RunCli) -> None:
    """A 70B Q4_K split over a 24 GB GPU and 64 GB of RAM: when the row says it fits at --ctx N,
    its largest context is at least N (the KV of the layers in RAM counts against RAM, not the
    GPU: it once said "fits" and "max ctx 2,915" in one row)."""
    from dataclasses import replace

    from ggufs import LLAMA_70B_F16, Q4_K

    model = write_model(tmp_path / "llama-70b-q4_k.gguf", replace(LLAMA_70B_F16, qtype=Q4_K, file_type=15))[0]
    assert run_cli("host", "--quick").exit_code == 0  # the split's CPU part needs this host's bandwidth
    code, d = fit_json(run_cli, str(model), "--device", "rtx-4090", "--memory", "64", "--ctx", str(ctx))
    assert code == 0
    (m,) = d["models"]
    assert m["fits"] and 0 < m["n_gpu_layers"] < 81, m  # a split: 40 GB of weights, 24 GB of VRAM
    assert m["max_ctx"] >= ctx, m

"""Model stores from outside (Ollama, LM Studio, any folder): a scan never leaves the store by a
link, and every file it does not use is listed as skipped with the true reason."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ggufs import Shape, write_model
from support import RunCli

SHAPE = Shape()
MODEL_LAYER = "application/vnd.ollama.image.model"


def ollama(home: Path, name: str, blob: str = "a" * 64) -> Path:
    """An Ollama store with one manifest naming blobs/sha256-<blob>; the blob's path."""
    root = home / ".ollama" / "models"
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": MODEL_LAYER, "digest": f"sha256:{blob}"}]}))
    return root / "blobs" / f"sha256-{blob}"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    for var in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "LLAMA_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    good = home / ".cache" / "llama.cpp"  # one readable model, so that `fit` has something to list
    good.mkdir(parents=True)
    write_model(good / "good.gguf", SHAPE)
    return home


def skipped(run_cli: RunCli, *args: str) -> dict[str, str]:
    r = run_cli("fit", *args, "--bandwidth", "90", "--memory", "16", "--json")
    return {Path(s["path"]).name: s["reason"] for s in json.loads(r.stdout)["skipped"]} if r.stdout else {}


@pytest.mark.parametrize(
    ("blob_is", "reason"),
    [
        ("a link out of the store", "a blob that is a link out of the store"),
        ("/dev/zero", "a blob that is a link out of the store"),
        ("a FIFO", "a blob that is not a regular file (a FIFO)"),
        ("a folder", "a blob that is not a regular file (a folder)"),
        ("missing", "a missing blob"),
    ],
)
def test_an_ollama_blob_is_read_only_inside_the_store(
    blob_is: str, reason: str, home: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    outside = write_model(tmp_path / "secret.gguf", SHAPE)[0]
    blob = ollama(home, "m")
    if blob_is == "a link out of the store":
        blob.symlink_to(outside)
    elif blob_is == "/dev/zero":
        blob.symlink_to("/dev/zero")
    elif blob_is == "a FIFO":
        os.mkfifo(blob)
    elif blob_is == "a folder":
        blob.mkdir()
    r = run_cli("inspect", "ollama:m")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and reason in r.stderr, r.stderr
    assert skipped(run_cli)["latest"].startswith(f"the manifest of m:latest points to {reason}")


def test_a_blob_linked_inside_the_store_is_read(home: Path, tmp_path: Path, run_cli: RunCli) -> None:
    blob = ollama(home, "m")
    real = write_model(blob.parent / "the-real-file", SHAPE)[0]
    blob.symlink_to(real.name)
    assert run_cli("inspect", "ollama:m").exit_code == 0


def test_an_lm_studio_folder_linked_out_of_the_store_is_not_scanned(
    home: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_model(elsewhere / "private.gguf", SHAPE)
    publisher = home / ".lmstudio" / "models" / "acme"
    publisher.mkdir(parents=True)
    (publisher / "model").symlink_to(elsewhere)
    r = run_cli("inspect", "acme/model")
    assert r.exit_code == 2 and "a link out of" in r.stderr and "not followed" in r.stderr, r.stderr
    assert skipped(run_cli)["model"].startswith("a link out of the store")


def test_every_file_not_used_is_listed_with_its_reason(tmp_path: Path, run_cli: RunCli) -> None:
    folder = tmp_path / "models"
    deep = folder.joinpath(*[f"d{i}" for i in range(13)])
    deep.mkdir(parents=True)
    write_model(deep / "deep.gguf", SHAPE)
    os.mkfifo(folder / "fifo.gguf")
    (folder / "nowhere.gguf").symlink_to(tmp_path / "gone.gguf")
    (folder / "loop.gguf").symlink_to(folder / "loop.gguf")
    (folder / "to-dev.gguf").symlink_to("/dev/zero")
    write_model(folder / "ok.gguf", SHAPE)
    reasons = skipped(run_cli, str(folder))
    assert reasons == {
        "d12": "more than 12 folders deep: not scanned",
        "fifo.gguf": "not a regular file (a FIFO)",
        "nowhere.gguf": "a link that points nowhere",
        "loop.gguf": "a link loop",
        "to-dev.gguf": "a link to something that is not a regular file (a device)",
    }


def test_a_folder_the_user_names_follows_its_links_to_files_elsewhere(tmp_path: Path, run_cli: RunCli) -> None:
    """Models linked into a folder (often to Ollama's blobs) are how many people keep them: the
    folder is the user's, so its links are followed (the store rule is for the stores ggprof
    finds by itself)."""
    folder = tmp_path / "models"
    folder.mkdir()
    (tmp_path / "blobs").mkdir()
    elsewhere = write_model(tmp_path / "blobs" / "sha256-abc", SHAPE)[0]
    (folder / "linked.gguf").symlink_to(elsewhere)
    write_model(folder / "ok.gguf", SHAPE)
    r = run_cli("fit", str(folder), "--bandwidth", "90", "--memory", "16", "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and d["skipped"] == []
    assert sorted(Path(m["path"]).name for m in d["models"]) == ["linked.gguf", "ok.gguf"]


@pytest.mark.parametrize("ref", ["ollama:" + "a" * 5000, "ollama:" + "a/" * 3000 + "b"])
def test_a_huge_reference_is_one_line(ref: str, home: Path, run_cli: RunCli) -> None:
    r = run_cli("inspect", ref)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and len(r.stderr) < 600, r.stderr

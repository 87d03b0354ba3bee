"""Speculative decoding on the real llama-server built from the vendored llama.cpp: the Gemma
model drafting for itself (`-md`, it shares its own vocabulary) and an n-gram drafter
(`--spec-type ngram-mod`). `profile --server` reads how the server drafts from its command
line and what it drafted from its timings (`draft_n`, `draft_n_accepted`), and judges the
decode per verify step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llamacpp_tools import start_llama_server
from support import as_process, judged, kept


def _server(tools: Path, model: Path, folder: Path, *args: str) -> Iterator[str]:
    proc, url = start_llama_server(tools, model, folder / "log.txt", "-c", "2048", "-t", "2", "--no-warmup", *args)
    with kept(proc, gently=True):
        yield url


@pytest.fixture(scope="module")
def self_drafting(llama_tools: Path, gemma_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("draft-simple")
    args = ("-md", str(gemma_path), "--spec-type", "draft-simple", "--spec-draft-n-max", "4")
    yield from _server(llama_tools, gemma_path, folder, *args)


@pytest.fixture(scope="module")
def ngram(llama_tools: Path, gemma_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _server(llama_tools, gemma_path, tmp_path_factory.mktemp("ngram"), "--spec-type", "ngram-mod")


def _profile(url: str, tmp_path: Path) -> dict[str, Any]:
    r = as_process(
        "profile", "--server", url, "-p", "32", "-n", "64", "-r", "3", "--json", "--db", str(tmp_path / "r.db"),
        timeout_s=600,
    )  # fmt: skip
    return judged(r)


def _decode(d: dict[str, Any]) -> dict[str, Any]:
    found: list[dict[str, Any]] = [f for f in d["findings"] if f["code"].startswith("DECODE_")]
    (decode,) = found
    return decode


@pytest.mark.slow
def test_a_server_drafting_with_a_draft_model_is_judged_per_verify_step(self_drafting: str, tmp_path: Path) -> None:
    d = _profile(self_drafting, tmp_path)
    context = d["context"]
    assert isinstance(context, dict)
    assert context["drafting"] == {
        "spec_type": "draft-simple",
        "spec_draft_n_max": 4,
        "model_draft": context["drafting"]["model_draft"],
    }
    assert context["drafting"]["model_draft"].endswith("gemma-3-270m-q4_k_m.gguf")
    drafted, accepted, steps = context["draft_n"], context["draft_n_accepted"], context["draft_steps"]
    # greedy requests, the same model drafting: the target keeps (nearly) every draft
    assert drafted > 0 and accepted >= 0.9 * drafted and steps > 0
    decode = _decode(d)
    # judged per verify step (its basis below); whether inside the band depends on this machine's load
    assert (
        "speculative decoding (draft-simple, up to 4 drafted a step, draft model gemma-3-270m-q4_k_m.gguf)"
        in (decode["expected"])
    )
    assert f"the server's timings: {accepted:,} of {drafted:,} drafted tokens accepted" in decode["expected"]
    assert any(e.startswith("at most 5 tokens per target pass") for e in decode["evidence"])


@pytest.mark.slow
def test_an_ngram_drafting_server_is_judged_per_verify_step(ngram: str, tmp_path: Path) -> None:
    d = _profile(ngram, tmp_path)
    context = d["context"]
    assert isinstance(context, dict)
    assert context["drafting"] == {"spec_type": "ngram-mod"}
    # a small model's greedy text repeats itself: the lookup finds drafts, and the target keeps them
    assert context["draft_n"] > 0 and context["draft_steps"] > 0
    decode = _decode(d)
    # judged per verify step (its basis below); whether inside the band depends on this machine's load
    assert (
        "(speculative decoding (ngram-mod, up to 64 drafted a step, an n-gram lookup over the text so far); "
        in (decode["expected"])
    )

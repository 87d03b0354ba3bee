"""A spilled cache: the weights fit the GPU, the KV cache at a long context does not. Windows'
CUDA system-memory fallback places what no longer fits (the cache, allocated after the weights) in
RAM, and a token reads its cache over the link; managed memory pages whatever it needs. Judged on
public rows of benchmarks/data/placement-results.jsonl (an RTX 3080 10 GB on Windows running a
Qwen3.8-27B of 8.39 GiB at contexts of 72K-640K) on a header of the model's shape."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import gguf
import pytest
from ggufs import QWEN36_27B, write_model
from support import RunCli, spill_fit_without

ROOT = Path(__file__).resolve().parents[1]
ROWS = [json.loads(x) for x in (ROOT / "benchmarks/data/placement-results.jsonl").read_text().splitlines() if x]
LOGS = ROOT / "tests" / "data" / "logs"

# Qwen3.5/3.6-27B's 48 gated delta nets (llama.cpp's qwen35): each keeps a conv state of 3 x 10240
# f32 (the conv kernel less one, over q, k and v: 6144 + 2 x 16 x 128 channels) and 48 value heads'
# 128 x 128 f32 state, read and written each token
STATE_BYTES = 48 * (3 * 10240 * 4 + 48 * 128 * 128 * 4)
PCIE4_X16 = 16e9 * 16 * 128 / 130 / 8  # the profile's link: PCIe 4.0 x16, one direction


@pytest.fixture(scope="module")
def qwen27b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # the row's UD-IQ2_XXS: IQ2_XXS layers, the output layer Q6_K, the feed-forward widened until the
    # file is the 8.39 GiB the row states
    q = gguf.GGMLQuantizationType
    shape = replace(QWEN36_27B, qtype=q.IQ2_XXS, head_qtype=q.Q6_K, n_ff=24832)
    model = write_model(tmp_path_factory.mktemp("qwen") / "qwen3.8-27b-ud-iq2_xxs.gguf", shape)[0]
    assert model.stat().st_size / 2**30 == pytest.approx(8.39, rel=0.01)
    return model


@pytest.fixture(autouse=True)
def no_host_ram(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))


def the_row(**facts: Any) -> dict[str, Any]:
    found = [
        r for r in ROWS if r["gpus"] == ["RTX 3080"] and r["category"] == "spill" and "sysmem" in r["notes"]
        if all(r[k] == v for k, v in facts.items())
    ]  # fmt: skip
    assert len(found) == 1, found
    return dict(found[0])


def check(run_cli: RunCli, model: Path, tg: float, *extra: str, ctx: int = 131072) -> dict[str, Any]:
    args = ("--device", "rtx-3080", "--backend", "cuda", "-ngl", "99", "-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0")
    r = run_cli("check", str(model), *args, "-c", str(ctx), "--tg", f"{tg:.4g}", *extra, "--json")
    assert r.stderr == "", r.stderr
    d: dict[str, Any] = json.loads(r.stdout)
    return d


def held_out_spill() -> Any:
    """The committed spill share refitted without the RTX 3080's rows (its machine left out)."""
    from ggprof import calibration

    held = spill_fit_without("RTX 3080", {"RTX 5070", "RTX 5090", "RTX 4090"})  # the other three machines
    return calibration.using_placements(replace(calibration.committed_placement_fits(), spill=held))


def test_a_spilled_cache_is_read_over_the_link(qwen27b: Path, run_cli: RunCli) -> None:
    """At 128K the row decodes at 19.9 tok/s (45.0 resident at 64K). With --spill fallback the
    weights stay on the GPU and a token's cache crosses the link: the recurrent state, read and
    written, at depth 0. The honest row is plausible at the share the other machines' spills fit,
    and a third of it is flagged (the managed 4090's pages counted twice over the link, as they
    cross it: its share is the others', so the band is narrow enough: docs/calibration.md)."""
    r = the_row(ctx=131072, depth=None)
    assert r["tg_tok_s"] == 19.9
    assert qwen27b.stat().st_size < 10 * 2**30  # the weights fit the card: only the cache can spill
    with held_out_spill():
        d = check(run_cli, qwen27b, r["tg_tok_s"], "--spill", "fallback")
        slowed = check(run_cli, qwen27b, r["tg_tok_s"] / 3, "--spill", "fallback")
    assert slowed["verdict"] == "suspicious", slowed["findings"]
    assert d["verdict"] == "plausible", d["findings"]
    p = d["predictions"][0]
    assert p["spill"] == "fallback" and p["cache_spill_bytes"] == 2 * STATE_BYTES
    assert p["token_parts"]["link_s"] * PCIE4_X16 == pytest.approx(2 * STATE_BYTES, rel=1e-3)
    assert any(rule.startswith("spilled cache: the weights fit rtx-3080's memory") for rule in p["rules"])
    found = next(f for f in d["findings"] if f["code"] == "WEIGHTS_BEYOND_VRAM")
    assert "with Windows' system-memory fallback the cache is placed in RAM" in found["title"]
    assert found["causes"][0].startswith("spill: the KV cache beyond the GPU's memory read from RAM")


def test_the_cache_read_grows_with_depth(qwen27b: Path, run_cli: RunCli) -> None:
    """After a prompt of 19,599 tokens the same server decodes at 11.1 tok/s: the KV of the 16
    attending layers (q4_0: 4 KV heads of 256, 18 bytes a block of 32) crosses the link beside the state."""
    r = the_row(depth=19599)
    with held_out_spill():
        d = check(run_cli, qwen27b, r["tg_tok_s"], "--spill", "fallback", "--depth", str(r["depth"]))
    assert d["verdict"] == "plausible", d["findings"]
    kv = 16 * 2 * 4 * 256 // 32 * 18 * r["depth"]
    assert d["predictions"][0]["token_parts"]["link_s"] * PCIE4_X16 == pytest.approx(kv + 2 * STATE_BYTES, rel=1e-3)


def test_unsaid_spill_keeps_either_mechanism(qwen27b: Path, run_cli: RunCli) -> None:
    """Without --spill the allocation may page whole (managed memory): a third of the row's speed
    stays explained, and the finding says so."""
    r = the_row(ctx=131072, depth=None)
    d = check(run_cli, qwen27b, r["tg_tok_s"] / 3)
    assert d["verdict"] == "plausible", d["findings"]
    found = next(f for f in d["findings"] if f["code"] == "WEIGHTS_BEYOND_VRAM")
    assert "the allocation pages over the host link" in found["title"]
    # the same with managed memory said
    assert check(run_cli, qwen27b, r["tg_tok_s"] / 3, "--spill", "managed")["verdict"] == "plausible"


def test_a_pool_over_the_free_memory_may_spill_its_cache(qwen27b: Path, run_cli: RunCli) -> None:
    """At 64K the source's run was "last fully resident", 45.0 tok/s; at 72K it spilled, 23.6.
    ggprof's estimate puts the 64K pool over the memory it takes as free (95% of the card's) and
    inside the card ("tight"), the 72K one over the card: with Windows' fallback, which places in RAM
    what no longer fits what is free, the cache may have crossed at 64K too, so the band spans both
    and the finding says so. Without --spill (a Linux driver spills nothing) the 64K pool keeps its
    cache, and a third is slow."""
    quote = the_row(ctx=73728)["source_quote"]
    assert "64K | **45.0** | 412 MiB | last fully resident" in quote and "72K | 23.6 | 606 MiB" in quote
    with held_out_spill():
        tight = check(run_cli, qwen27b, 45.0, "--spill", "fallback", ctx=65536)
        over = check(run_cli, qwen27b, 23.6, "--spill", "fallback", ctx=73728)
    pool = tight["predictions"][0]["memory_pools"][0]
    assert pool["fit"] == "tight" and pool["available_bytes"] < pool["required_bytes"] <= pool["total_bytes"]
    assert over["predictions"][0]["memory_pools"][0]["fit"] == "does_not_fit"
    for d in (tight, over):
        assert d["verdict"] == "plausible", d["findings"]
        assert d["predictions"][0]["cache_spill_bytes"] == 2 * STATE_BYTES
    found = next(f for f in tight["findings"] if f["code"] == "WEIGHTS_BEYOND_VRAM")
    assert " free of " in found["title"] and "the cache may be placed in RAM" in found["title"]
    spilled = next(f for f in over["findings"] if f["code"] == "WEIGHTS_BEYOND_VRAM")
    assert "the cache is placed in RAM" in spilled["title"]
    # a third of the resident speed at 64K: a spill explains it there (the finding says what tells it)
    with held_out_spill():
        third = check(run_cli, qwen27b, 15.0, "--spill", "fallback", ctx=65536)
    assert third["verdict"] == "plausible" and "WEIGHTS_BEYOND_VRAM" in {f["code"] for f in third["findings"]}
    unsaid = check(run_cli, qwen27b, 45.0, ctx=65536)
    p = unsaid["predictions"][0]
    assert p["token_parts"]["link_s"] == 0 and p["cache_spill_bytes"] is None
    assert "WEIGHTS_BEYOND_VRAM" not in {f["code"] for f in unsaid["findings"]}
    assert check(run_cli, qwen27b, 15.0, ctx=65536)["verdict"] == "suspicious"


def test_a_context_that_fits_spills_nothing(qwen27b: Path, run_cli: RunCli) -> None:
    """At 32K the pool fits what is free: nothing crosses with the fallback either, and a third of
    the resident speed is slow."""
    d = check(run_cli, qwen27b, 45.0, "--spill", "fallback", ctx=32768)
    assert d["predictions"][0]["memory_pools"][0]["fit"] == "fits"
    assert d["predictions"][0]["token_parts"]["link_s"] == 0 and d["predictions"][0]["cache_spill_bytes"] is None
    assert check(run_cli, qwen27b, 15.0, "--spill", "fallback", ctx=32768)["verdict"] == "suspicious"


def test_only_cuda_spills(qwen27b: Path, run_cli: RunCli) -> None:
    """Windows' system-memory fallback and managed memory are CUDA's driver's: a Vulkan run of the
    same placement keeps no spill mechanism, and its cache is judged as before (the allocation),
    read in place once: no Vulkan driver migrates pages, so even the band's slow end crosses once
    where an unsaid CUDA spill's crosses twice."""
    args = ("--device", "rtx-3080", "-ngl", "99", "-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0", "-c", "131072")
    r = run_cli("check", str(qwen27b), *args, "--backend", "vulkan", "--tg", "19.9", "--spill", "fallback", "--json")
    p = json.loads(r.stdout)["predictions"][0]
    assert p["spill"] is None and p["cache_spill_bytes"] is None
    weights = p["decode_bytes_per_token"]  # every weight on the GPU, none in RAM: the allocation a token reads
    assert p["token_parts"]["link_s"] * PCIE4_X16 == pytest.approx(weights, rel=1e-3)
    cuda = json.loads(run_cli("check", str(qwen27b), *args, "--backend", "cuda", "--tg", "19.9", "--json").stdout)
    assert cuda["predictions"][0]["token_parts"]["link_s"] * PCIE4_X16 == pytest.approx(2 * weights, rel=1e-3)


def test_a_windows_log_says_fallback() -> None:
    """A log whose backends load from DLLs ran on Windows: its spill is the system-memory fallback."""
    from ggprof.logs.parse import parse_lines
    from ggprof.logs.text import read_log

    (run, *_) = parse_lines(read_log(str(LOGS / "llamacpp-22748-cuda-laptop-server.txt")).lines).runs
    assert run.value("windows") is True
    assert run.facts["windows"].line == 6  # load_backend: loaded CUDA backend from C:\Apps\llamacpp\ggml-cuda.dll
    # a Linux CUDA log (two devices, its backends built in)
    (other, *_) = parse_lines(read_log(str(LOGS / "llamacpp-12346-two-cuda-devices.txt")).lines).runs
    assert other.value("windows") is None


def test_predict_a_spilled_cache(qwen27b: Path, run_cli: RunCli) -> None:
    """`predict --spill fallback` at a context whose cache does not fit beside the weights: the
    weights stay on the GPU (the ceiling is theirs and the KV's), the band reads the cache over the
    link, and the memory fit still says the pool does not fit."""
    args = ("--device", "rtx-3080", "-ngl", "99", "-ctk", "q4_0", "-ctv", "q4_0", "--ctx", "131072")
    d = json.loads(run_cli("predict", str(qwen27b), *args, "--spill", "fallback", "--json").stdout)
    p = d
    assert p["spill"] == "fallback" and p["cache_spill_bytes"] == 2 * STATE_BYTES  # depth 0: the state
    assert p["spill_bytes"] == 0
    assert p["fit"] == "does_not_fit"
    unsaid = json.loads(run_cli("predict", str(qwen27b), *args, "--json").stdout)
    q = unsaid
    assert q["cache_spill_bytes"] is None
    # either mechanism unsaid: the band's slow end reads every weight over the link, far slower
    assert q["expected_tok_s_low"] < p["expected_tok_s_low"] / 5

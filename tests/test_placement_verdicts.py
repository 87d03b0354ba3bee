"""Verdicts across placements on the real CLI: public rows of benchmarks/data/placement-results.jsonl
judged by `check` on a header of their model's shape, honest and slowed to a third, one per
category; a number only some placement explains is never impossible and names that placement.
The benchmark's thresholds are not asserted here (benchmarks/bench_placements.py shows them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ggufs import GPT_OSS_120B, LLAMA_70B_F16, write_model
from support import RunCli, spill_fit_without

ROOT = Path(__file__).resolve().parents[1]
ROWS = [json.loads(x) for x in (ROOT / "benchmarks/data/placement-results.jsonl").read_text().splitlines() if x]


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("gpt-oss") / "gpt-oss-120b.gguf", GPT_OSS_120B)[0]


@pytest.fixture(autouse=True)
def no_host_ram(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows ran elsewhere: this host's measured RAM is never read (an empty cache)."""
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))


def row(category: str, model: str, gpu: str, **facts: Any) -> dict[str, Any]:
    found = [
        r
        for r in ROWS
        if r["category"] == category and r["model"].startswith(model) and gpu in ",".join(r["gpus"] or [])
        if all(r[k] == v for k, v in facts.items())
    ]
    assert len(found) == 1, found
    return dict(found[0])


def verdicts(run_cli: RunCli, *args: str) -> tuple[str, str, dict[str, Any]]:
    """The verdict of the row as published and slowed to a third (args end with --tg X [--pp Y])."""
    honest = run_cli("check", *args, "--json")
    assert honest.stderr == "", honest.stderr
    slow_args = list(args)
    for flag in ("--tg", "--pp"):
        if flag in slow_args:
            at = slow_args.index(flag) + 1
            slow_args[at] = f"{float(slow_args[at]) / 3:.4g}"
    slowed = run_cli("check", *slow_args, "--json")
    d = json.loads(honest.stdout)
    # README's exit statuses: 0 plausible, 3 suspicious (an honest row is never impossible)
    assert honest.exit_code == {"plausible": 0, "suspicious": 3}[d["verdict"]]
    return d["verdict"], json.loads(slowed.stdout)["verdict"], d


def test_unified_memory_strix_halo(gpt_oss: Path, run_cli: RunCli) -> None:
    """One pool: gpt-oss-120b (59 GiB) on the Ryzen AI Max+ 395 reads every byte at its 256 GB/s,
    no link, no RAM term."""
    r = row("unified_memory", "gpt-oss-120b", "8060S", backend="Vulkan (RADV)", depth=0)
    honest, slowed, d = verdicts(
        run_cli, str(gpt_oss), "--device", "ryzen-ai-max-395", "--backend", "vulkan", "--build", "9187",
        "--tg", str(r["tg_tok_s"]), "--pp", str(r["pp_tok_s"]),
    )  # fmt: skip
    assert (honest, slowed) == ("plausible", "suspicious")
    p = d["predictions"][0]
    assert p["decode_ceiling_tok_s"] == pytest.approx(256e9 / p["decode_bytes_per_token"], rel=1e-6)


def test_experts_in_ram_without_the_ram_stated(gpt_oss: Path, run_cli: RunCli) -> None:
    """-ncmoe 32 on an RTX 5090, the RAM unstated: judged from a desktop's slowest RAM (DDR4-2400
    dual channel) to a server's fastest (a desktop GPU sits in EPYC workstations too), plausible;
    its decode band reaches lower than a stated RAM's, and a third of it is caught once the RAM
    is stated (a desktop's fastest, dual-channel DDR5-6400)."""
    r = row("experts_in_ram", "gpt-oss-120b", "RTX 5090", n_cpu_moe=32)
    args = (str(gpt_oss), "--device", "rtx-5090", "--backend", "cuda", "-ngl", "99", "-ncmoe", "32")
    honest = run_cli("check", *args, "--tg", str(r["tg_tok_s"]), "--pp", str(r["pp_tok_s"]), "--json")
    d = json.loads(honest.stdout)
    assert (d["verdict"], honest.exit_code) == ("plausible", 0)
    source = d["predictions"][0]["efficiency_band_source"]
    assert (
        "RAM not stated: a desktop's dual-channel DDR4-2400 to a server's 12-channel DDR5-6000 (38.4-576 GB/s" in source
    )
    third = ("--tg", f"{r['tg_tok_s'] / 3:.4g}", "--json")
    unstated = json.loads(run_cli("check", *args, *third).stdout)
    stated = run_cli("check", *args, *third, "--ram-bandwidth", "102.4")
    assert (json.loads(stated.stdout)["verdict"], stated.exit_code) == ("suspicious", 3)
    # the RAM's part is most of a token: 38.4 GB/s at the class's slowest against 102.4 stated
    lows = [a["predictions"][0]["expected_tok_s_low"] for a in (unstated, json.loads(stated.stdout))]
    assert lows[0] < lows[1] / 2
    # a stated RAM is judged on: at 15 GB/s the honest speed is over its ceiling
    slow_ram = run_cli("check", *args, "--tg", str(r["tg_tok_s"]), "--ram-bandwidth", "15", "--json")
    assert json.loads(slow_ram.stdout)["verdict"] == "impossible"


def test_several_gpus_70b_f16_on_six_3090s(tmp_path: Path, run_cli: RunCli) -> None:
    """141 GB of weights over six 24 GiB cards fits (a GPU's "GB" is a GiB): judged, not refused."""
    model = write_model(tmp_path / "llama-70b-f16.gguf", LLAMA_70B_F16)[0]
    r = row("multi_gpu", "Meta-Llama-3-70B", "RTX 3090", quant="F16")
    honest, slowed, _ = verdicts(
        run_cli, str(model), "--device", ",".join(["rtx-3090"] * 6), "--backend", "cuda", "-sm", "layer",
        "--tg", str(r["tg_tok_s"]), "--pp", str(r["pp_tok_s"]),
    )  # fmt: skip
    assert (honest, slowed) == ("plausible", "suspicious")


def test_spill_is_judged_over_the_link(gpt_oss: Path, run_cli: RunCli) -> None:
    """gpt-oss-120b with -ngl 99 on an RTX 5090 (managed memory a patched build keeps in RAM): 63 GB
    on a 32 GiB card. The ceiling reads only the excess over PCIe 5.0 x16; the band, every weight of
    the GPU's allocation over it at the spill's fitted share: read in place once at its fast end,
    and, the mechanism unsaid, migrated out and back in (twice) at its slow end: plausible, never
    impossible. Said (`--spill mapped`, read in place), both ends cross once."""
    from ggprof.calibration import committed_placement_fits

    r = row("spill", "gpt-oss-120b", "RTX 5090")
    args = (str(gpt_oss), "--device", "rtx-5090", "--backend", "cuda", "-ngl", "99")
    honest, slowed, d = verdicts(run_cli, *args, "--tg", str(r["tg_tok_s"]))
    assert honest == "plausible" and slowed != "impossible"
    p = d["predictions"][0]
    spill = p["spill_bytes"]
    on_gpu = p["decode_bytes_per_token"] * (1 - spill / p["offload"]["gpu_weight_bytes"])
    in_ram = p["decode_bytes_per_token"] - on_gpu
    assert p["decode_ceiling_tok_s"] == pytest.approx(1 / (on_gpu / 1792e9 + in_ram / 63e9), rel=1e-3)
    fit = committed_placement_fits().spill
    assert fit is not None
    # at depth 0 the GPU reads no KV: every byte a token reads crosses the link at the fit's share,
    # twice at the band's slow end (migrated pages go out and come back), once at its fast end
    weights = p["decode_bytes_per_token"]
    assert p["token_parts"]["link_s"] * 63e9 == pytest.approx(2 * weights, rel=1e-3)
    assert p["expected_tok_s_low"] == pytest.approx(fit.low * 63e9 / (2 * weights), rel=1e-3)
    assert p["expected_tok_s_high"] == pytest.approx(fit.high * 63e9 / weights, rel=1e-3)
    said = json.loads(run_cli("check", *args, "--tg", str(r["tg_tok_s"]), "--spill", "mapped", "--json").stdout)
    q = said["predictions"][0]
    assert "patched build whose pages prefer RAM" in r["backend"] and said["verdict"] == "plausible"
    assert q["token_parts"]["link_s"] * 63e9 == pytest.approx(weights, rel=1e-3)
    assert q["expected_tok_s_low"] == pytest.approx(fit.low * 63e9 / weights, rel=1e-3)
    assert q["expected_tok_s_high"] == pytest.approx(p["expected_tok_s_high"], rel=1e-6)


def test_an_unknown_placement_names_the_one_that_explains_it(gpt_oss: Path, run_cli: RunCli) -> None:
    """A 120B MoE on a 24 GB GPU at 20 tok/s, no placement given: not impossible; the verdict names
    experts in RAM (-ncmoe) and spill, and what tells them apart."""
    r = run_cli("check", str(gpt_oss), "--device", "rtx-3090", "--backend", "cuda", "--tg", "20", "--json")
    d = json.loads(r.stdout)
    assert d["verdict"] != "impossible", r.stdout
    found = next(f for f in d["findings"] if f["code"] == "PLACEMENT_EXPLAINS")
    assert found["title"].startswith("experts in RAM (-ngl 99 -ncmoe ") and "explains 20.0 tok/s" in found["title"]
    # slower than spilling allows, it is named: spill explains a third of it
    r = run_cli("check", str(gpt_oss), "--device", "rtx-3090", "--backend", "cuda", "--tg", "6", "--json")
    spill = next(f for f in json.loads(r.stdout)["findings"] if f["code"] == "WEIGHTS_BEYOND_VRAM")
    assert spill["causes"][0].startswith("spill:") and "explains the number" in spill["causes"][0]
    assert any(c.startswith("experts in RAM (-ngl 99 -ncmoe N") for c in spill["causes"])
    assert "the load log's buffer sizes" in found["next_step"] and "command line" in found["next_step"]


@pytest.fixture(scope="module")
def llama2_70b_q2k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Llama 2 70B's shape (vocabulary 32000) as llama-quant.cpp's Q2_K - Medium mixes it (the
    output layer Q6_K, attn_v and ffn_down Q3_K on the layers use_more_bits picks), its feed-forward
    width set so that the file is the 23.71 GiB llama.cpp PR #8035's llama-bench printed."""
    from dataclasses import replace

    import gguf

    q = gguf.GGMLQuantizationType
    shape = replace(
        LLAMA_70B_F16, vocab=32000, qtype=q.Q2_K, head_qtype=q.Q6_K, more_bits_qtype=q.Q3_K, file_type=None, n_ff=31232
    )
    model = write_model(tmp_path_factory.mktemp("llama2") / "llama-2-70b-q2_k.gguf", shape)[0]
    assert model.stat().st_size / 2**30 == pytest.approx(23.71, rel=0.01)
    return model


def test_weights_that_fit_without_their_buffers_are_judged_as_spill(llama2_70b_q2k: Path, run_cli: RunCli) -> None:
    """Llama 2 70B Q2_K (23.71 GiB, llama.cpp PR #8035) on an RTX 4090 (24 GiB) with -ngl 81 and
    GGML_CUDA_ENABLE_UNIFIED_MEMORY=1: 0.15 tok/s. The weights fit, the KV cache and the compute
    buffers do not: the allocation pages over the link. Judged as spill (plausible), not as a model
    that cannot load."""
    r = row("spill", "llama 70B (68.98B, Llama-2-70B class)", "RTX 4090")
    assert r["model_params_b"] == 68.98  # llama-bench's count: Llama 2 70B's (Llama 3 70B has 70.55 B)
    assert r["model_size_gib"] == 23.71
    args = (str(llama2_70b_q2k), "--device", "rtx-4090", "--backend", "cuda", "-ngl", "81", "--tg", str(r["tg_tok_s"]))
    d = json.loads(run_cli("check", *args, "--json").stdout)
    assert d["verdict"] == "plausible"
    found = next(f for f in d["findings"] if f["code"] == "WEIGHTS_BEYOND_VRAM")
    assert "the weights fit without the KV cache and compute buffers (an estimate)" in found["title"]
    assert "MODEL_DOES_NOT_FIT" not in [f["code"] for f in d["findings"]]


def test_managed_pages_cross_the_link_twice(
    llama2_70b_q2k: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stock managed memory over a full GPU evicts a page to RAM to fault the next one in, and a
    token's weights cycle through it: each byte of the allocation crosses the link twice a token.
    The 4090's 0.15 tok/s, judged with `--spill managed` by the spill share fitted without the 4090
    (the other three machines read their spills in place, once), is plausible, and a third of it is
    flagged. Counted once, its pages imply 12% of the link against the others' 18%-48%, and the
    honest run is flagged too. (With Windows' fallback the same weights, which fit the card, would
    stay in VRAM: only their cache would cross.)"""
    from dataclasses import replace

    from ggprof import calibration
    from ggprof.physics.placement import SPILL_CROSSINGS

    r = row("spill", "llama 70B (68.98B, Llama-2-70B class)", "RTX 4090")
    assert "GGML_CUDA_ENABLE_UNIFIED_MEMORY=1" in r["flags"]
    held = spill_fit_without("RTX 4090", {"RTX 5070", "RTX 5090", "RTX 3080"})
    args = (str(llama2_70b_q2k), "--device", "rtx-4090", "--backend", "cuda", "-ngl", "81", "--spill", "managed")
    with calibration.using_placements(replace(calibration.committed_placement_fits(), spill=held)):
        honest = json.loads(run_cli("check", *args, "--tg", str(r["tg_tok_s"]), "--json").stdout)
        slowed = json.loads(run_cli("check", *args, "--tg", f"{r['tg_tok_s'] / 3:.4g}", "--json").stdout)
        # the control: the same run with a migrated page counted once
        monkeypatch.setitem(SPILL_CROSSINGS, "managed", (1, 1))
        once = json.loads(run_cli("check", *args, "--tg", str(r["tg_tok_s"]), "--json").stdout)
    assert (honest["verdict"], slowed["verdict"], once["verdict"]) == ("plausible", "suspicious", "suspicious")
    p = honest["predictions"][0]
    link = 16e9 * 16 * 128 / 130 / 8  # the profile's PCIe 4.0 x16, one direction
    # at depth 0 the GPU reads no KV of its own: the band is the link's, the pages crossing twice at
    # its slow end and once at its fast end (the copies out and in may overlap on the link)
    assert p["token_parts"]["link_s"] * link == pytest.approx(2 * p["decode_bytes_per_token"], rel=1e-3)
    assert once["predictions"][0]["token_parts"]["link_s"] == pytest.approx(p["token_parts"]["link_s"] / 2)
    assert p["expected_tok_s_high"] == pytest.approx(once["predictions"][0]["expected_tok_s_high"], rel=1e-6)

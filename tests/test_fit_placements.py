"""`ggprof fit` on a GPU proposes placements as llama.cpp's flags: a mixture of experts too large
for the GPU gets its experts in RAM, predicted at the RAM's bandwidth, within what published runs
of that setup reached; no placement says it fits where its context does not; and what
llama.cpp's own --fit would choose is its rule (common/fit.cpp), computed by hand here."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ggufs import GPT_OSS_120B, LLAMA_70B_F16, Q4_K, write_model
from support import RunCli

from ggprof.machine.device import EfficiencyBand
from ggprof.physics.placement import blended_band, placement
from ggprof.runfacts import facts_from_argv

ROOT = Path(__file__).resolve().parents[1]
RTX_5090_DDR5 = ("--device", "rtx-5090", "--ram", "128", "--ram-bandwidth", "80")  # dual-channel DDR5-5000


def public_tg_spread() -> tuple[float, float]:
    """The decode speeds published for gpt-oss-120b on one RTX 5090 with experts in RAM
    (benchmarks/data/placement-results.jsonl, each row with its source)."""
    text = (ROOT / "benchmarks" / "data" / "placement-results.jsonl").read_text()
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    tg = [
        r["tg_tok_s"]
        for r in rows
        if r["model"] == "gpt-oss-120b"
        and r["category"] == "experts_in_ram"
        and r["gpus"] == ["RTX 5090"]
        and r["tg_tok_s"] is not None
    ]
    assert len(tg) >= 3, tg
    return min(tg), max(tg)


def fit_json(run_cli: RunCli, *args: str) -> dict[str, Any]:
    r = run_cli("fit", *args, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("gpt-oss") / "gpt-oss-120b-mxfp4.gguf", GPT_OSS_120B)[0]


def test_gpt_oss_120b_on_an_rtx_5090_gets_its_experts_in_ram(gpt_oss: Path, run_cli: RunCli) -> None:
    d = fit_json(run_cli, str(gpt_oss), *RTX_5090_DDR5, "--ctx", "32768")
    (m,) = d["models"]
    top = m["placements"][0]
    n_layers = 36
    assert top["fits"] and top["n_gpu_layers"] == n_layers + 1 and 0 < top["n_cpu_moe"] < n_layers, top
    assert m["flags"] == top["flags"] and m["n_cpu_moe"] == top["n_cpu_moe"] and m["fits"]
    # every layer on the GPU does not fit 32 GB; nothing faster than the top one fits
    full = next(p for p in m["placements"] if p["n_cpu_moe"] == 0 and p["n_gpu_layers"] == n_layers + 1)
    assert not full["fits"]
    fitting = [p["expected_tok_s_low"] for p in m["placements"] if p["fits"]]
    assert fitting == sorted(fitting, reverse=True) and len(fitting) >= 3  # -ncmoe N, -cmoe, -ngl K
    # the prediction lies where published runs of this setup landed (their RAM unstated)
    low, high = public_tg_spread()
    tg_low, tg_high = top["expected_tok_s_low"], top["expected_tok_s_high"]
    assert tg_low < high and tg_high > low, (tg_low, tg_high, low, high)  # the band and the spread overlap
    assert low <= math.sqrt(tg_low * tg_high) <= high  # and the band's middle lies inside the spread
    assert d["ram"]["bandwidth_bytes_per_s"] == pytest.approx(80e9, rel=1e-9)
    assert (d["ram"]["bandwidth_source"], d["ram"]["bandwidth_detail"]) == ("user", "--ram-bandwidth 80")


def test_the_flags_paste_back_to_the_same_placement(gpt_oss: Path, run_cli: RunCli) -> None:
    from ggprof.model.spec import load_model

    spec = load_model(gpt_oss)
    d = fit_json(run_cli, str(gpt_oss), *RTX_5090_DDR5, "--ctx", "32768", "-ctk", "q8_0")
    for p in d["models"][0]["placements"]:
        facts = dict(facts_from_argv(p["flags"].split(), ("n_gpu_layers", "n_cpu_moe", "n_ctx", "type_k")))
        assert facts["n_ctx"] == 32768 and facts["type_k"] == "q8_0", p["flags"]
        pasted = placement(spec, facts["n_gpu_layers"], True, facts.get("n_cpu_moe", 0))
        assert pasted == placement(spec, p["n_gpu_layers"], True, p["n_cpu_moe"]), p["flags"]


def test_the_table_shows_the_quant_whole_and_the_flags(gpt_oss: Path, run_cli: RunCli) -> None:
    r = run_cli("fit", str(gpt_oss), *RTX_5090_DDR5, "--ctx", "32768")
    assert r.exit_code == 0, r.stderr
    assert " MXFP4_MOE " in r.stdout and "MX...OE" not in r.stdout
    assert "RAM: 128 GB (--memory), bandwidth 80.0 GB/s (user: --ram-bandwidth 80)" in r.stdout
    assert "  1.  -ngl 99 -ncmoe " in r.stdout and " -ngl 99 -cmoe -c 32768 " in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 100


def test_a_missing_ram_bandwidth_is_named_not_blamed_on_the_model(
    gpt_oss: Path, run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))  # this host never measured
    d = fit_json(run_cli, str(gpt_oss), "--device", "rtx-5090", "--ram", "128", "--ctx", "32768")
    (m,) = d["models"]
    assert not m["fits"] and m["why_not"].startswith("does not fit without RAM: ")
    assert "pass --ram-bandwidth GB/s" in m["why_not"]
    r = run_cli("fit", str(gpt_oss), "--device", "rtx-5090", "--ram", "128")
    assert r.exit_code == 0 and "no readable GGUF model" not in r.stdout + r.stderr


def test_llama_cpp_fit_rule_by_hand(gpt_oss: Path, run_cli: RunCli) -> None:
    """On a 24 GB GPU: llama.cpp's --fit keeps 1,024 MiB free, so its -ncmoe is the smallest N whose
    GPU part is at most 24 GB - 1 GiB; ggprof's own is the smallest within 24 GB (given: usable)."""
    from ggprof.model.spec import load_model
    from ggprof.physics.memory import memory_at
    from ggprof.physics.roofline import PredictInputs
    from ggprof.plugins import extensions

    ext = extensions()
    spec = load_model(gpt_oss, swa_default=ext.swa_default)
    d = fit_json(run_cli, str(gpt_oss), *RTX_5090_DDR5, "--gpu-memory", "24", "--ctx", "32768")
    (m,) = d["models"]
    gpu = next(p["memory"][0] for p in m["placements"] if p["flags"] == m["flags"])

    def gpu_bytes(n: int) -> int:
        from ggprof.machine.device import Device

        device = Device(id="gpu", name="gpu", backend="cuda", memory_bytes=24 * 10**9)
        return memory_at(spec, device, None, PredictInputs(ctx=32768, n_gpu_layers=37, n_cpu_moe=n))[0].required_bytes

    ours, theirs = m["n_cpu_moe"], m["llama_fit"]["n_cpu_moe"]
    assert gpu["required_bytes"] == gpu_bytes(ours) <= 24 * 10**9 < gpu_bytes(ours - 1)
    assert gpu_bytes(theirs) <= 24 * 10**9 - 2**30 < gpu_bytes(theirs - 1)
    assert theirs == ours + 1  # 1 GiB kept free: one layer's experts more in RAM
    r = run_cli("fit", str(gpt_oss), *RTX_5090_DDR5, "--gpu-memory", "24", "--ctx", "32768")
    assert f"llama.cpp --fit would choose: -ngl 99 -ncmoe {theirs} -c 32768 (" in r.stdout


@pytest.mark.parametrize("ram", ["64", "16"])
def test_70b_on_24_gb_never_fits_without_its_context(ram: str, tmp_path: Path, run_cli: RunCli) -> None:
    """A 70B Q4_K (40 GB) on a 24 GB GPU at 8,192 tokens: a placement that says it fits holds the
    context; with 16 GB of RAM beside it none does, and the model says it does not fit."""
    model = write_model(tmp_path / "llama-70b-q4_k.gguf", replace(LLAMA_70B_F16, qtype=Q4_K, file_type=15))[0]
    args = ("--device", "rtx-4090", "--ram", ram, "--ram-bandwidth", "60", "--ctx", "8192")
    (m,) = fit_json(run_cli, str(model), *args)["models"]
    for p in m["placements"]:
        assert not p["fits"] or p["max_ctx"] >= 8192, p
        assert not p["fits"] or not any(pool["verdict"] == "does_not_fit" for pool in p["memory"]), p
    if ram == "64":
        assert m["fits"] and m["max_ctx"] >= 8192 and 0 < m["n_gpu_layers"] < 81
    else:
        assert not m["fits"] and not any(p["fits"] for p in m["placements"])
        assert m["why_not"].startswith("does not fit")
        assert "fits and is fast enough" not in run_cli("fit", str(model), *args).stdout


def test_a_token_in_two_memories_takes_each_part_at_its_own_band() -> None:
    gpu = EfficiencyBand(low=0.5, high=0.9, source="gpu")
    cpu = EfficiencyBand(low=0.4, high=0.8, source="cpu")
    band = blended_band(gpu, cpu, gpu_s=1.0, cpu_s=3.0)
    assert band.low == pytest.approx(4 / (1 / 0.5 + 3 / 0.4), rel=1e-12)
    assert band.high == pytest.approx(4 / (1 / 0.9 + 3 / 0.8), rel=1e-12)
    assert "75% in RAM" in band.source

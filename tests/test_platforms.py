"""A CPU named without its RAM (llama-bench's `cpu_info`, `check --cpu`): the RAM beside it is
bounded by its platform's channels and transfer rates (vendor specifications), each figure
computed here by hand as channels x 8 bytes x MT/s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ggufs import GPT_OSS_120B, Shape, write_model
from support import in_process

from ggprof.machine.platforms import platform_of, platform_ram
from ggprof.model.spec import load_model

# A small MoE: 4 layers, 8 experts of which 2 are used a token, Q8_0 (34 bytes per 32 weights)
MOE = Shape(n_layers=4, n_embd=256, n_heads=8, n_ff=512, vocab=1000, n_experts=8, n_experts_used=2)
READ_A_TOKEN_A_LAYER = 3 * 256 * 512 * 8 * 34 // 32 * 2 // 8  # the 2 experts a token uses of 8


@pytest.mark.parametrize(
    ("cpu", "platform", "low_gb_s", "high_gb_s"),
    [
        # AM5: 2 channels, DDR5-3600 with four DIMMs (AMD's spec) to EXPO's DDR5-8000
        ("AMD Ryzen 9 7950X 16-Core Processor", "AM5", 2 * 8 * 3.6, 2 * 8 * 8.0),
        # X299: 4 channels, DDR4-2666 (the 7th/9th gen X) to XMP's DDR4-3600
        ("Intel(R) Core(TM) i9-10900X CPU @ 3.70GHz", "LGA2066", 4 * 8 * 2.666, 4 * 8 * 3.6),
        # SP3: 8 channels of DDR4-3200, judged down to half of them filled at DDR4-2666 (the 7001 series)
        ("AMD EPYC 7343 16-Core Processor", "SP3", 4 * 8 * 2.666, 8 * 8 * 3.2),
        # a quad-channel X-series beyond the 79xx/99xx/109xx numbers, and a Broadwell-E
        ("Intel(R) Core(TM) i9-9820X CPU @ 3.30GHz", "LGA2066", 4 * 8 * 2.666, 4 * 8 * 3.6),
        ("Intel(R) Core(TM) i7-6950X CPU @ 3.00GHz", "Broadwell-E", 4 * 8 * 2.133, 4 * 8 * 3.2),
        # laptops: a 128-bit bus, not a desktop's DIMMs
        ("AMD Ryzen 7 7730U with Radeon Graphics", "laptops", 2 * 8 * 2.4, 2 * 8 * 8.533),
        ("AMD Ryzen AI 9 HX 370 w/ Radeon 890M", "Strix Point", 2 * 8 * 5.6, 2 * 8 * 8.0),
        # SP5 Genoa: 12 channels of DDR5-4800, down to 6 filled
        ("AMD EPYC 9654 96-Core Processor", "Genoa", 6 * 8 * 4.8, 12 * 8 * 4.8),
        # a Threadripper PRO whose generation is not named: sWRX8's DDR4-3200 to sTR5's DDR5-6400
        ("remote threadripper pro 24 core", "generation not named", 4 * 8 * 3.2, 8 * 8 * 6.4),
        ("13th Gen Intel(R) Core(TM) i9-13900K", "LGA1700", 2 * 8 * 2.133, 2 * 8 * 7.5),
    ],
)
def test_a_named_cpu_bounds_its_ram(cpu: str, platform: str, low_gb_s: float, high_gb_s: float) -> None:
    p = platform_of(cpu)
    assert p is not None and platform in p.name
    ram = platform_ram(cpu)
    assert ram is not None and ram.bandwidth is not None and ram.bandwidth_low is not None
    assert ram.bandwidth.value == pytest.approx(high_gb_s * 1e9, rel=1e-9)
    assert ram.bandwidth_low.value == pytest.approx(low_gb_s * 1e9, rel=1e-9)
    assert p.source in ram.bandwidth.detail and "RAM not stated" in ram.bandwidth.detail


@pytest.mark.parametrize(
    "cpu", ["Apple M2 Ultra", "AMD Ryzen AI Max+ 395 w/ Radeon 8060S", "", "x" * 300 + " epyc 9654"]
)
def test_a_cpu_the_table_does_not_know_has_no_platform(cpu: str) -> None:
    """Unified-memory chips carry their memory in their own profile; a name is searched in its first
    200 characters only (past them, even an EPYC's number is not read)."""
    assert platform_of(cpu) is None and platform_ram(cpu) is None


def test_a_name_is_read_in_its_first_200_characters() -> None:
    assert platform_of(" epyc 9654") is not None and platform_of("x" * 300 + " epyc 9654") is None


def _rows(tmp_path: Path, tg_tok_s: float, cpu_info: str) -> Path:
    row = {
        "n_prompt": 0, "n_gen": 128, "n_depth": 0, "backends": "CUDA", "n_gpu_layers": 99, "n_cpu_moe": 4,
        "cpu_info": cpu_info, "avg_ts": tg_tok_s, "stddev_ts": 0.5,
    }  # fmt: skip
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([row]))
    return path


def test_llama_bench_cpu_info_bounds_the_ram_of_its_experts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """llama-bench's JSON names its CPU: every expert of the MoE in RAM (-ncmoe 4), the RAM not
    stated and this host's never read. The ceiling is the platform's fastest RAM (AM5: DDR5-8000,
    128 GB/s), not a server's 576 GB/s; a speed only RAM slower than AM5's slowest explains is
    suspicious, though a desktop's DDR4-2400 (the GPU's class without the CPU) explains it."""
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    model = write_model(tmp_path / "moe.gguf", MOE)[0]
    spec = load_model(model)
    in_ram = 4 * READ_A_TOKEN_A_LAYER
    on_gpu = spec.decode_bytes_per_token - in_ram
    ceiling = 1 / (on_gpu / 1008e9 + in_ram / 128e9)  # RTX 4090: 1008 GB/s
    cpu = "AMD Ryzen 9 7950X 16-Core Processor"
    r = in_process(
        "check", str(model), "--llama-bench", str(_rows(tmp_path, 10.0, cpu)), "--device", "rtx-4090", "--json"
    )
    p = json.loads(r.stdout)["predictions"][0]
    assert p["decode_ceiling_tok_s"] == pytest.approx(ceiling, rel=1e-6)
    assert "AMD Ryzen 7000/8000/9000 (AM5): 2 channels of DDR5 at 3600-8000 MT/s" in p["efficiency_band_source"]
    # the expected band's low end, as the RAM's class would have it and as the platform has it
    slow_class = json.loads(
        in_process("check", str(model), "--llama-bench", str(_rows(tmp_path, 10.0, "")), "--device", "rtx-4090",
                   "--json").stdout
    )["predictions"][0]  # fmt: skip
    assert "dual-channel DDR4-2400" in slow_class["efficiency_band_source"]
    low_class, low_platform = slow_class["expected_tok_s_low"], p["expected_tok_s_low"]
    # the platform's slowest RAM reads 57.6 GB/s, the class's 38.4: its low end is that much faster at most
    assert low_class < low_platform <= low_class * 57.6 / 38.4 * 1.0001
    between = (low_class * low_platform) ** 0.5
    for cpu_info, verdict, code in (("", "plausible", 0), (cpu, "suspicious", 3)):
        got = in_process(
            "check", str(model), "--llama-bench", str(_rows(tmp_path, between, cpu_info)), "--device", "rtx-4090",
            "--json",
        )  # fmt: skip
        assert (json.loads(got.stdout)["verdict"], got.exit_code) == (verdict, code), cpu_info
    # --cpu says the same for a number given by hand; --ram-bandwidth, when given, is the RAM
    by_hand = ("check", str(model), "--tg", f"{between:.6g}", "--device", "rtx-4090", "-ngl", "99", "-ncmoe", "4")
    assert in_process(*by_hand, "--cpu", "Ryzen 9 7950X").exit_code == 3
    stated = json.loads(in_process(*by_hand, "--cpu", "Ryzen 9 7950X", "--ram-bandwidth", "90", "--json").stdout)
    assert stated["predictions"][0]["decode_ceiling_tok_s"] == pytest.approx(1 / (on_gpu / 1008e9 + in_ram / 90e9))


def test_an_unknown_cpu_is_one_clear_line(tmp_path: Path) -> None:
    model = write_model(tmp_path / "moe.gguf", MOE)[0]
    r = in_process(
        "check", str(model), "--tg", "10", "--device", "rtx-4090", "-ncmoe", "4", "--cpu", "Pentium\x1b[2J 4"
    )
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("Error: --cpu 'Pentium") and "its platform is not known" in r.stderr
    assert "\x1b" not in r.stderr and r.stderr.count("\n") == 1


def test_fit_for_another_machine_takes_its_cpus_platform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`fit --cpu`: the machine the model is chosen for, not this host. Its RAM is the platform's
    (AM5: 128 GB/s at the fastest, 57.6 at the slowest), so a placement with experts in RAM has a
    decode band reaching lower than with that fastest RAM stated; --ram-bandwidth, given, is the RAM."""
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    model = write_model(tmp_path / "gpt-oss-120b.gguf", GPT_OSS_120B)[0]
    args = ("fit", str(model), "--device", "rtx-5090", "--ram", "128", "--ctx", "32768", "--json")

    def fitted(*extra: str) -> dict[str, Any]:
        r = in_process(*args, "--cpu", "AMD Ryzen 9 9950X 16-Core Processor", *extra)
        assert r.exit_code == 0 and r.stderr == "", r.stderr
        answer: dict[str, Any] = json.loads(r.stdout)
        return answer

    platform, stated = fitted(), fitted("--ram-bandwidth", "128")
    assert platform["ram"]["bandwidth_bytes_per_s"] == pytest.approx(128e9)
    assert "AM5" in platform["ram"]["bandwidth_detail"] and platform["ram"]["memory_bytes"] == 128 * 10**9
    assert stated["ram"]["bandwidth_source"] == "user"

    def top(answer: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = answer["models"][0]["placements"][0]
        return found

    assert top(platform)["flags"] == top(stated)["flags"] and top(platform)["n_cpu_moe"] > 0  # experts in RAM
    assert top(platform)["expected_tok_s_low"] < top(stated)["expected_tok_s_low"]
    assert top(platform)["expected_tok_s_high"] == pytest.approx(top(stated)["expected_tok_s_high"], rel=1e-9)


def test_a_named_cpu_takes_this_hosts_measured_ram_only_when_it_is_this_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This host's RAM measured at 50 GB/s (a seeded cache): a llama-bench row naming this host's
    CPU is judged at it; one naming another CPU the table knows, at that CPU's platform (AM5's
    128 GB/s at the fastest); one naming a CPU the table does not know, at the GPU's class (a
    server's 576 GB/s at the fastest), never at this host's RAM."""
    from ggprof.machine import cache
    from ggprof.machine.facts import gather_facts
    from ggprof.machine.measurements import BandwidthMeasurement, KernelResult, SgemmMeasurement

    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    facts = gather_facts()
    reads = KernelResult("read", (50e9,) * 5)
    measured = BandwidthMeasurement(
        read=reads, copy=reads, triad=reads, threads=1, array_bytes=64 << 20, repetitions=5, elapsed_s=1.0
    )
    cache.save(facts, measured, SgemmMeasurement(1e11, 256, (1e11,)))
    model = write_model(tmp_path / "moe.gguf", MOE)[0]
    spec = load_model(model)
    in_ram = 4 * READ_A_TOKEN_A_LAYER
    on_gpu = spec.decode_bytes_per_token - in_ram

    def ceiling(cpu_info: str) -> float:
        rows = _rows(tmp_path, 10.0, cpu_info)
        r = in_process("check", str(model), "--llama-bench", str(rows), "--device", "rtx-4090", "--json")
        assert r.stderr == "", r.stderr
        return float(json.loads(r.stdout)["predictions"][0]["decode_ceiling_tok_s"])

    assert ceiling(facts.cpu_model) == pytest.approx(1 / (on_gpu / 1008e9 + in_ram / 50e9), rel=1e-6)
    assert ceiling("AMD Ryzen 9 7950X 16-Core Processor") == pytest.approx(1 / (on_gpu / 1008e9 + in_ram / 128e9))
    assert ceiling("Pentium 4 HT") == pytest.approx(1 / (on_gpu / 1008e9 + in_ram / 576e9), rel=1e-6)


def test_fit_cpu_without_a_gpu_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    model = write_model(tmp_path / "moe.gguf", MOE)[0]
    r = in_process("fit", str(model), "--device", "ddr5-6000-dual", "--cpu", "AMD EPYC 9654")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("Error: --cpu names the RAM beside a GPU") and r.stderr.count("\n") == 1


def test_predict_takes_the_ram_beside_its_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`predict --device GPU -ncmoe N` for a machine not this one: its RAM given as --ram-bandwidth,
    or as --cpu's platform (AM5's fastest, 128 GB/s, for the ceiling); with neither and no
    measurement of this host, one clear line naming both."""
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    model = write_model(tmp_path / "moe.gguf", MOE)[0]
    spec = load_model(model)
    in_ram = 4 * READ_A_TOKEN_A_LAYER
    on_gpu = spec.decode_bytes_per_token - in_ram
    args = ("predict", str(model), "--device", "rtx-4090", "-ngl", "99", "-ncmoe", "4", "--json")

    def ceiling(*extra: str) -> float:
        r = in_process(*args, *extra)
        assert r.exit_code == 0 and r.stderr == "", r.stderr
        return float(json.loads(r.stdout)["decode_ceiling_tok_s"])

    assert ceiling("--ram-bandwidth", "80") == pytest.approx(1 / (on_gpu / 1008e9 + in_ram / 80e9), rel=1e-6)
    assert ceiling("--cpu", "Ryzen 9 7950X") == pytest.approx(1 / (on_gpu / 1008e9 + in_ram / 128e9), rel=1e-6)
    neither = in_process(*args)
    assert neither.exit_code == 2 and "give --ram-bandwidth BW or --cpu NAME" in neither.stderr

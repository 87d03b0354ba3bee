"""`ggprof host`: OS facts, a real bandwidth measurement, the cache, and device detection
through the plugins with vendor tools replaced by scripts that print their outputs."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from support import RunCli

from ggprof.machine.device import Detection
from ggprof.machine.memory import parse_system_profiler, parse_udevadm, parse_windows_cim
from ggprof.machine.profiles import ProfileDB
from ggprof.pipelines.extensions import Extensions

# `nvidia-smi --query-gpu=index,name,memory.total,memory.free,clocks.max.memory
#  --format=csv,noheader,nounits` (format per `nvidia-smi --help-query-gpu`)
NVIDIA_SMI = "0, NVIDIA GeForce RTX 4090, 24564, 23987, 10501\n1, NVIDIA H100 80GB HBM3, 81559, 81000, 2619\n"
VULKANINFO = """\
==========
VULKANINFO
==========

Devices:
========
GPU0:
\tapiVersion         = 1.3.260
\tvendorID           = 0x1002
\tdeviceType         = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU
\tdeviceName         = AMD Radeon RX 7900 XTX
GPU1:
\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU
\tdeviceName         = llvmpipe (LLVM 15.0.7, 256 bits)
"""
ROCM_SMI = json.dumps({"card0": {"Card Series": "AMD Instinct MI300X", "VRAM Total Memory (B)": "206141652992"}})
UDEVADM = """\
MEMORY_ARRAY_LOCATION=System board or motherboard
MEMORY_ARRAY_NUM_DEVICES=4
MEMORY_DEVICE_0_PRESENT=0
MEMORY_DEVICE_1_SIZE=17179869184
MEMORY_DEVICE_1_TYPE=DDR5
MEMORY_DEVICE_1_SPEED_MTS=6000
MEMORY_DEVICE_1_CONFIGURED_SPEED_MTS=5600
MEMORY_DEVICE_2_PRESENT=0
MEMORY_DEVICE_3_SIZE=17179869184
MEMORY_DEVICE_3_TYPE=DDR5
MEMORY_DEVICE_3_SPEED_MTS=6000
MEMORY_DEVICE_3_CONFIGURED_SPEED_MTS=5600
"""


def fake_tool(bin_dir: Path, name: str, output: str = "", exit_code: int = 0, sleep_s: float = 0) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / f"{name}.out").write_text(output)
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\nsleep {sleep_s}\ncat '{bin_dir / name}.out'\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def detect(backend: str) -> Detection:
    from ggprof.machine.host import describe_host
    from ggprof.plugins import extensions

    ext = extensions()

    report = describe_host(ext.backends.values(), ext.profiles, measure=False)
    return next(d for d in report.detections if d.backend == backend)


def test_nvidia_smi_devices_use_profiles_for_bandwidth(tools: Path) -> None:
    fake_tool(tools, "nvidia-smi", NVIDIA_SMI)
    det = detect("cuda")
    rtx, h100 = det.devices
    assert (rtx.id, rtx.profile_id, rtx.memory_bytes) == ("cuda:0", "rtx-4090", 24564 << 20)
    assert rtx.bandwidth is not None and rtx.bandwidth.value == 1008e9 and rtx.bandwidth.source == "profile"
    assert rtx.memory_available_bytes == 23987 << 20
    assert h100.profile_id == "h100-sxm"
    assert h100.peak_flops is not None and h100.peak_flops.value == pytest.approx(989.4e12)


@pytest.mark.parametrize(
    ("output", "code", "reason"),
    [("", 127, "no working nvidia-smi"), ("garbage\x1b[31m, ???\n", 0, "found no GPU"), ("", 9, "no working")],
)
def test_broken_nvidia_smi_means_not_detected(tools: Path, output: str, code: int, reason: str) -> None:
    fake_tool(tools, "nvidia-smi", output, exit_code=code)
    det = detect("cuda")
    assert det.devices == [] and reason in (det.reason or "")


def test_hanging_tool_times_out(tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGPROF_TOOL_TIMEOUT_S", "0.5")
    fake_tool(tools, "nvidia-smi", NVIDIA_SMI, sleep_s=30)
    assert detect("cuda").devices == []


def test_nvml_bandwidth_formula() -> None:
    from ggprof_backends.cuda import nvml_bandwidth

    assert nvml_bandwidth(10501, 384).value == pytest.approx(1008e9, rel=1e-3)  # RTX 4090
    assert nvml_bandwidth(2619, 5120).value == pytest.approx(3.35e12, rel=1e-3)  # H100 SXM


def test_vulkaninfo_skips_software_devices(tools: Path) -> None:
    fake_tool(tools, "vulkaninfo", VULKANINFO)
    (dev,) = detect("vulkan").devices
    assert (dev.id, dev.name, dev.profile_id) == ("vulkan:0", "AMD Radeon RX 7900 XTX", "rx-7900-xtx")
    assert dev.bandwidth is not None and dev.bandwidth.value == 960e9


# `sycl-ls` on an Arc A770 beside a UHD 730, the sample output llama.cpp's docs/backend/SYCL.md
# prints (Level Zero and OpenCL entries of both GPUs, and the CPU's OpenCL runtime). The GPU is
# what this machine lacks.
L0 = "Intel(R) oneAPI Unified Runtime over Level-Zero"
SYCL_LS = "\n".join(
    (
        f"[level_zero:gpu][level_zero:0] {L0}, Intel(R) Arc(TM) A770 Graphics 12.55.8 [1.3.29735+27]",
        f"[level_zero:gpu][level_zero:1] {L0}, Intel(R) UHD Graphics 730 12.2.0 [1.3.29735+27]",
        "[opencl:cpu][opencl:0] Intel(R) OpenCL, 13th Gen Intel(R) Core(TM) i5-13400 OpenCL 3.0 (Build 0) "
        "[2025.20.8.0.06_160000]",
        "[opencl:gpu][opencl:1] Intel(R) OpenCL Graphics, Intel(R) Arc(TM) A770 Graphics OpenCL 3.0 NEO  [24.39.31294]",
        "[opencl:gpu][opencl:2] Intel(R) OpenCL Graphics, Intel(R) UHD Graphics 730 OpenCL 3.0 NEO  [24.39.31294]",
        "",
    )
)


def test_sycl_ls_lists_the_level_zero_gpus(tools: Path) -> None:
    fake_tool(tools, "sycl-ls", SYCL_LS)
    a770, uhd = detect("sycl").devices
    assert (a770.id, a770.name, a770.profile_id) == ("sycl:0", "Intel(R) Arc(TM) A770 Graphics", "arc-a770")
    assert a770.bandwidth is not None and a770.bandwidth.value == 560e9
    assert (uhd.id, uhd.name, uhd.profile_id, uhd.bandwidth) == ("sycl:1", "Intel(R) UHD Graphics 730", None, None)
    fake_tool(tools, "sycl-ls", SYCL_LS.replace("[level_zero:gpu]", "[opencl:gpu]"))
    det = detect("sycl")
    assert (det.devices, det.reason) == ([], "sycl-ls listed no Level Zero GPU")


# amd-smi static --asic --vram --json on a Strix Halo: the generic market name ROCm's own device
# line gives it (tests/data/logs: "AMD Radeon Graphics, gfx1151"), the gfx target amd-smi prints as
# TARGET_GRAPHICS_VERSION (its recorded `static` output in ROCm/rocm-systems PR #2987; the JSON
# keys are the lower-cased names), 512 MB of carve-out VRAM. The GPU is what this machine lacks.
AMD_SMI_STRIX_HALO = json.dumps(
    [
        {
            "gpu": 0,
            "asic": {
                "market_name": "AMD Radeon Graphics",
                "target_graphics_version": "gfx1151",
                "num_compute_units": 40,
            },
            "vram": {"type": "UNKNOWN", "size": {"value": 512, "unit": "MB"}},
        }
    ]
)


def test_amd_smi_names_a_generic_gpu_by_its_gfx_target(tools: Path) -> None:
    """A Strix Halo's amd-smi says "AMD Radeon Graphics": its gfx target names the chip, so the
    device gets its profile's figures; a target that is not one is left out of the name."""
    fake_tool(tools, "amd-smi", AMD_SMI_STRIX_HALO)
    (dev,) = detect("rocm").devices
    assert (dev.name, dev.profile_id, dev.memory_bytes) == (
        "AMD Radeon Graphics (gfx1151)",
        "ryzen-ai-max-395",
        512 << 20,
    )
    assert dev.bandwidth is not None and dev.bandwidth.source == "profile"
    hostile = json.loads(AMD_SMI_STRIX_HALO)
    hostile[0]["asic"]["target_graphics_version"] = "gfx1151\x1b[2J" + "x" * 10_000
    fake_tool(tools, "amd-smi", json.dumps([*hostile, {"gpu": 1, "asic": ["not", "a", "table"]}]))
    first, second = detect("rocm").devices
    assert (first.name, first.profile_id) == ("AMD Radeon Graphics", None)
    assert (second.name, second.profile_id) == ("AMD GPU", None)


def test_rocm_smi_fallback(tools: Path) -> None:
    fake_tool(tools, "amd-smi", "", exit_code=2)
    fake_tool(tools, "rocm-smi", ROCM_SMI)
    (dev,) = detect("rocm").devices
    assert (dev.profile_id, dev.memory_bytes) == ("mi300x", 206141652992)


def test_metal_elsewhere_is_not_detected_with_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import platform

    monkeypatch.setattr(platform, "system", lambda: "Linux")  # as on CI, and pinned where it is not
    det = detect("metal")
    assert det.devices == [] and det.reason == "not an Apple silicon Mac"


def test_metal_on_apple_silicon_from_recorded_tools(tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sysctl and system_profiler as they answer on an M3 Max (40-core GPU): the 40-core profile."""
    import platform

    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    fake_tool(tools, "sysctl", "Apple M3 Max\n")
    profiler = {"SPDisplaysDataType": [{"_name": "Apple M3 Max", "sppci_cores": "40"}]}
    fake_tool(tools, "system_profiler", json.dumps(profiler))
    (dev,) = detect("metal").devices
    assert (dev.id, dev.profile_id, dev.unified_memory) == ("metal:0", "apple-m3-max", True)
    assert dev.bandwidth is not None and dev.bandwidth.value == 400e9


def test_gpu_cores_from_system_profiler() -> None:
    from ggprof_backends.metal import parse_gpu_cores

    text = json.dumps({"SPDisplaysDataType": [{"_name": "Apple M3 Max", "sppci_cores": "30"}]})
    assert parse_gpu_cores(text) == 30
    assert parse_gpu_cores("not json") is None


def test_memory_modules_and_theoretical_peak() -> None:
    mem = parse_udevadm(UDEVADM)
    assert mem is not None
    assert (mem.type, mem.speed_mts, mem.channels_inferred) == ("DDR5", 5600, 2)
    assert mem.theoretical_bandwidth_bytes_per_s == 5600e6 * 8 * 2
    assert "inferred" in mem.describe()
    win = parse_windows_cim(
        json.dumps([{"Capacity": 8 << 30, "Speed": 3200, "ConfiguredClockSpeed": 2933, "SMBIOSMemoryType": 26}] * 2)
    )
    assert win is not None and (win.type, win.speed_mts, win.theoretical_bandwidth_bytes_per_s) == (
        "DDR4",
        2933,
        2933e6 * 16,
    )
    mac = parse_system_profiler(
        json.dumps(
            {
                "SPMemoryDataType": [
                    {"_items": [{"dimm_size": "8 GB", "dimm_speed": "2667 MHz", "dimm_type": "DDR4"}] * 2}
                ]
            }
        )
    )
    assert mac is not None and mac.speed_mts == 2667
    assert parse_udevadm("garbage") is None and parse_windows_cim("{") is None


def test_cpu_profile_from_modules() -> None:
    from ggprof_backends.cpu import CPUBackend

    from ggprof.machine.facts import gather_facts
    from ggprof.machine.host import HostContext

    ctx = HostContext(
        facts=gather_facts(), memory=parse_udevadm(UDEVADM), bandwidth=None, sgemm=None, profiles=ProfileDB.default()
    )
    (cpu,) = CPUBackend().detect(ctx).devices
    assert cpu.profile_id == "ddr5-5600-dual"
    assert cpu.bandwidth is not None and cpu.bandwidth.source == "os"
    assert cpu.bandwidth.value == pytest.approx(89.6e9)


def test_cpu_peak_is_derived_from_simd() -> None:
    from ggprof_backends.cpu import peak_int8_flops

    fig = peak_int8_flops(("AVX2", "FMA"), 8, 5000.0, None)
    assert fig is not None and fig.value == 8 * 5e9 * 128 and fig.source == "derived"
    assert peak_int8_flops((), 8, 5000.0, None) is None


HOST_KEYS = {
    "cpu_model",
    "physical_cores",
    "logical_cores",
    "llc_bytes",
    "ram_total_bytes",
    "ram_available_bytes",
    "swap_used_bytes",
    "simd",
    "measured_read_bandwidth_bytes_per_s",
    "measured_copy_bandwidth_bytes_per_s",
    "measured_triad_bandwidth_bytes_per_s",
    "measured_sgemm_flops_per_s",
    "theoretical_bandwidth_bytes_per_s",
    "theoretical_bandwidth_source",
    "profile_id",
    "devices",
}


def test_host_quick_measures_then_reuses_cache(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    r = run_cli("host", "--json", "--no-measure")
    d = json.loads(r.stdout)
    assert d["measured_read_bandwidth_bytes_per_s"] is None and d["devices"][0]["bandwidth_source"] != "measured"
    r = run_cli("host", "--json", "--quick")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) >= HOST_KEYS
    assert d["physical_cores"] >= 1 and d["ram_total_bytes"] > 0
    for key in ("read", "copy", "triad"):
        assert d[f"measured_{key}_bandwidth_bytes_per_s"] > 1e8
    assert d["measured_sgemm_flops_per_s"] > 1e8
    assert d["measurement_from_cache"] is False
    cpu = d["devices"][0]
    assert (cpu["id"], cpu["backend"], cpu["bandwidth_source"]) == ("cpu", "cpu", "measured")
    assert cpu["bandwidth_bytes_per_s"] == d["measured_read_bandwidth_bytes_per_s"]
    again = json.loads(run_cli("host", "--json", "--no-measure").stdout)
    assert again["measurement_from_cache"] is True
    assert again["measured_read_bandwidth_bytes_per_s"] == d["measured_read_bandwidth_bytes_per_s"]
    fresh = json.loads(run_cli("host", "--json", "--quick", "--refresh").stdout)
    assert fresh["measured_at"] > d["measured_at"]
    text = run_cli("host", "--no-measure").stdout
    assert "GB/s" in text and "cached" in text
    assert run_cli("host", "--refresh", "--no-measure").exit_code == 2


def smbios_type17(size_mb: int, mem_type: int, speed: int, configured: int) -> bytes:
    """One SMBIOS 3.x Memory Device record (type 17, 0x28 bytes) as the spec lays it out."""
    rec = bytearray(0x28)
    rec[0], rec[1] = 17, 0x28
    rec[0x0C:0x0E] = size_mb.to_bytes(2, "little")
    rec[0x12] = mem_type
    rec[0x15:0x17] = speed.to_bytes(2, "little")
    rec[0x20:0x22] = configured.to_bytes(2, "little")
    return bytes(rec) + b"DIMM 0\0\0"


def test_smbios_dmi_table() -> None:
    from ggprof.machine.memory import parse_smbios

    empty_slot = smbios_type17(0, 2, 0, 0)
    bios = bytes([0, 0x18]) + bytes(0x16) + b"\0\0"  # a type 0 record, no strings
    end = bytes([127, 4, 0, 0]) + b"\0\0"
    table = bios + smbios_type17(16384, 34, 6000, 5600) + empty_slot + smbios_type17(16384, 34, 6000, 5600) + end
    mem = parse_smbios(table)
    assert mem is not None and len(mem.modules) == 2
    assert (mem.type, mem.speed_mts, mem.modules[0].size_bytes) == ("DDR5", 5600, 16 << 30)
    assert parse_smbios(b"\x11\x02garbage") is None


def _make_cached_measurement_noisy(cache: Path, spread: float) -> None:
    """Rewrite the cached read kernel's repetitions so that they disagree by `spread`."""
    (path,) = cache.glob("host-*.json")
    data = json.loads(path.read_text())
    best = max(data["bandwidth"]["read"]["samples_bytes_per_s"])
    data["bandwidth"]["read"]["samples_bytes_per_s"] = [best, best * 0.9, best * (1 - spread)]
    path.write_text(json.dumps(data))


def test_a_noisy_cached_bandwidth_is_measured_again(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached figure whose repetitions disagreed by 61% is never reused quietly."""
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    assert run_cli("host", "--json", "--quick").exit_code == 0
    _make_cached_measurement_noisy(tmp_path / "cache", 0.61)
    r = run_cli("host", "--json", "--quick")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["measurement_from_cache"] is False
    assert "disagreed by 61% (over 50%): measured again" in r.stderr


def test_a_noisy_bandwidth_that_cannot_be_remeasured_is_named_in_the_verdict(
    run_cli: RunCli, gemma_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check` measures nothing: a verdict resting on a noisy cached figure says so (suspicious,
    exit 3); the same figure with honest repetitions adds no such finding."""
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    assert run_cli("host", "--json", "--quick").exit_code == 0
    _make_cached_measurement_noisy(tmp_path / "cache", 0.2)
    r = run_cli("check", str(gemma_path), "--tg", "1", "--backend", "cpu", "--json")
    assert "BANDWIDTH_UNRELIABLE" not in {f["code"] for f in json.loads(r.stdout)["findings"]}
    _make_cached_measurement_noisy(tmp_path / "cache", 0.61)
    r = run_cli("check", str(gemma_path), "--tg", "1", "--backend", "cpu", "--json")
    d = json.loads(r.stdout)
    (finding,) = [f for f in d["findings"] if f["code"] == "BANDWIDTH_UNRELIABLE"]
    assert finding["severity"] == "suspicious" and "61%" in finding["title"]
    assert (r.exit_code, d["verdict"]) == (3, "suspicious")


def test_a_quick_cached_figure_is_refined_by_the_next_runs(
    ext: Extensions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run's quick figure (5 reads that agreed, cached here by hand so that a noisy
    machine cannot make it unreliable) takes 5 more real reads a run, on arrays of the same
    size, until it rests on 15 over 3 runs. A best-of figure never falls by it; the file keeps
    every repetition; a round whose own reads disagreed by over 50% is left out and said;
    then the figure is reused as it is."""
    from ggprof.machine import cache
    from ggprof.machine.facts import gather_facts
    from ggprof.machine.host import describe_host
    from ggprof.machine.measurements import (
        REFINE_READS,
        REFINED_READS,
        BandwidthMeasurement,
        KernelResult,
        SgemmMeasurement,
    )

    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    first = KernelResult("read", (1.0e9, 1.01e9, 1.02e9, 1.01e9, 1.0e9))  # below any real machine's reads
    seeded = BandwidthMeasurement(
        read=first, copy=first, triad=first, threads=1, array_bytes=64 << 20, repetitions=5, elapsed_s=1.0
    )
    cache.save(gather_facts(), seeded, SgemmMeasurement(1e11, 256, (1e11,)))
    reads = first.samples_bytes_per_s
    for _ in range(10):  # two merged rounds; a left-out one (a busy moment) is tried again next run
        later = describe_host(ext.backends.values(), ext.profiles, measure=True, quick=True, refine=True)
        got = later.context.bandwidth
        assert got is not None and later.from_cache
        if not later.refined_now:
            assert any("left out" in w for w in later.warnings) and got.read.samples_bytes_per_s == reads
            continue
        assert got.array_bytes == 64 << 20 and got.threads == 1
        assert got.read.samples_bytes_per_s[: len(reads)] == reads  # the earlier ones kept, in order
        assert len(got.read.samples_bytes_per_s) == len(reads) + REFINE_READS
        assert got.read.best_bytes_per_s >= max(reads) > 0  # a best-of figure never falls
        reads = got.read.samples_bytes_per_s
        saved = json.loads(cache.cache_path(later.facts).read_text())["bandwidth"]
        assert saved["sessions"] == got.sessions and saved["read"]["samples_bytes_per_s"] == list(reads)
        if len(reads) == REFINED_READS:
            break
    assert len(reads) == REFINED_READS and max(reads) > 1.02e9  # real reads beat the 1 GB/s seeded
    settled = describe_host(ext.backends.values(), ext.profiles, measure=True, quick=True, refine=True)
    assert settled.context.bandwidth is not None and not settled.refined_now
    assert settled.context.bandwidth.read.samples_bytes_per_s == reads and settled.context.bandwidth.sessions == 3
    cpu = settled.cpu
    assert cpu is not None and cpu.bandwidth is not None
    assert f"best of {REFINED_READS} over 3 runs, spread " in cpu.bandwidth.describe()
    assert cpu.bandwidth.spread == pytest.approx(0.02 / 1.02)  # what a verdict weighs: the first run's own


def test_a_refining_round_never_changes_what_a_quick_figure_read_and_counts_sessions() -> None:
    """Merging by hand: 5 reads at 10-20 GB/s and 5 more at 21-25 GB/s: best 25 GB/s of 10
    over 2 runs, spread (25 - 10) / 25 = 60%."""
    from ggprof.machine.measurements import BandwidthMeasurement, KernelResult

    first = KernelResult("read", (10e9, 12e9, 15e9, 18e9, 20e9))
    bw = BandwidthMeasurement(
        read=first, copy=first, triad=first, threads=2, array_bytes=1 << 28, repetitions=5, elapsed_s=1.0
    )
    assert bw.needs_refining and bw.describe_reads() == "best of 5, spread 50%"
    more = bw.refined(KernelResult("read", (21e9, 22e9, 23e9, 24e9, 25e9)), 0.5)
    assert more.read.best_bytes_per_s == 25e9 and more.sessions == 2 and more.repetitions == 10
    assert more.elapsed_s == pytest.approx(1.5) and more.copy == first
    assert more.describe_reads() == "best of 10 over 2 runs, spread 60% (50% in the first)"
    # unreliable is the first run's own disagreement (50%, not over 50%), not the runs' difference
    assert not more.unreliable
    noisy = replace(bw, read=KernelResult("read", (8e9, 12e9, 15e9, 18e9, 20e9)))  # (20 - 8) / 20 = 60%
    assert noisy.unreliable and noisy.refined(KernelResult("read", (20e9,) * 5), 0.5).unreliable
    # 10 reads cannot hold a first run and 3 refining rounds of 5, nor 4 (no slice from the end)
    assert not replace(more, sessions=4).first_run_reads and not replace(more, sessions=5).first_run_reads

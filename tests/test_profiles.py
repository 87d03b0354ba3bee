"""The hardware profile database: required ids, published figures, matching, user files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import RunCli

from ggprof.errors import BadInputError, ProfileError
from ggprof.machine.profiles import Profile, ProfileDB


def get_profile(profile_id: str) -> Profile:
    return ProfileDB.default().get(profile_id)


def match_profile(name: str, cores: int | None) -> tuple[Profile | None, str | None]:
    return ProfileDB.default().match(name, cores)


REQUIRED = [
    *("ddr4-2666-dual", "ddr4-3200-dual", "ddr5-4800-dual", "ddr5-5600-dual", "ddr5-6400-dual"),
    *("apple-m1", "apple-m1-pro", "apple-m1-max", "apple-m1-ultra", "apple-m2", "apple-m2-pro", "apple-m2-max"),
    *("apple-m2-ultra", "apple-m3", "apple-m3-pro", "apple-m3-max", "apple-m4", "apple-m4-pro", "apple-m4-max"),
    *("rtx-3060", "rtx-3080", "rtx-3090", "rtx-4060", "rtx-4070", "rtx-4080", "rtx-4090", "rtx-5090"),
    *("a100-80gb", "h100-sxm", "h100-pcie", "h200", "l4", "t4", "rx-7900-xtx", "mi300x"),
]


def test_required_profiles_exist_with_sources() -> None:
    profiles = ProfileDB.default().all()
    assert set(REQUIRED) <= set(profiles)
    for p in profiles.values():
        assert p.source and p.memory_bandwidth_gbs > 0 and p.backends


@pytest.mark.parametrize(
    ("pid", "gbs"),
    [
        ("ddr4-3200-dual", 51.2),  # docs/physics.md: 51 GB/s
        ("ddr5-5600-dual", 89.6),  # docs/physics.md: 90 GB/s
        ("apple-m3-pro", 150),
        ("apple-m3-max", 400),  # the 40-core M3 Max, the variant most often quoted
        ("apple-m4-max", 546),
        ("rtx-4090", 1008),
        ("h100-sxm", 3350),
        ("h200", 4800),
        ("mi300x", 5300),
    ],
)
def test_published_bandwidth(pid: str, gbs: float) -> None:
    assert get_profile(pid).memory_bandwidth_gbs == gbs


def test_h100_ridge_point_matches_physics_doc() -> None:
    h100 = get_profile("h100-sxm")
    assert h100.peak_flops is not None
    assert h100.peak_flops / h100.bandwidth_bytes_per_s == pytest.approx(295, abs=1)


@pytest.mark.parametrize(
    ("name", "cores", "pid"),
    [
        ("NVIDIA GeForce RTX 4090", None, "rtx-4090"),
        ("NVIDIA GeForce RTX 4060 Ti", None, "rtx-4060-ti"),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", None, "rtx-4070-ti-super"),
        ("NVIDIA GeForce GTX 1080 Ti", None, "gtx-1080-ti"),
        ("Intel(R) Arc(TM) A770 Graphics", None, "arc-a770"),
        ("NVIDIA GeForce RTX 4090 D", None, "rtx-4090-d"),
        ("Apple M2 Ultra", 60, "apple-m2-ultra-60c"),
        ("NVIDIA Quantum Widget", None, None),
        ("NVIDIA GeForce RTX 3060", None, "rtx-3060"),
        ("NVIDIA H100 80GB HBM3", None, "h100-sxm"),
        ("NVIDIA H100 PCIe", None, "h100-pcie"),
        ("NVIDIA H200", None, "h200"),
        ("NVIDIA A100-SXM4-80GB", None, "a100-80gb"),
        ("Tesla T4", None, "t4"),
        ("NVIDIA L4", None, "l4"),
        ("AMD Radeon RX 7900 XTX", None, "rx-7900-xtx"),
        ("AMD Instinct MI300X", None, "mi300x"),
        ("Apple M3 Max", 40, "apple-m3-max"),
        ("Apple M3 Max", 30, "apple-m3-max-30c"),
        ("Apple M4 Max", 32, "apple-m4-max-32c"),
        ("Apple M2", 10, "apple-m2"),
        ("Apple M2 Pro", 19, "apple-m2-pro"),
    ],
)
def test_detection_matches(name: str, cores: int | None, pid: str | None) -> None:
    profile, _ = match_profile(name, cores)
    assert (profile.id if profile else None) == pid


def test_ambiguous_apple_chip_without_core_count_says_so() -> None:
    profile, note = match_profile("Apple M3 Max", None)
    assert profile is not None and profile.id == "apple-m3-max"
    assert note is not None and "apple-m3-max-30c" in note


@pytest.mark.parametrize(
    ("pid", "device_class"),
    [
        ("a100-80gb", "nvidia datacenter"),
        ("a40", "nvidia discrete"),  # a datacenter card, but the graphics chip of the RTX 3090 and GDDR6
        ("rtx-3090", "nvidia discrete"),
        ("jetson-agx-orin", "nvidia integrated"),
        ("tesla-p100", "nvidia datacenter"),
        ("tesla-p40", "nvidia discrete"),  # the GTX 1080 Ti's chip
        ("mi50-32gb", "amd datacenter"),
        ("rx-7900-xtx", "amd discrete"),
        ("ryzen-ai-max-395", "amd integrated"),
        ("apple-m2", "apple integrated"),
        ("ddr5-5600-dual", None),
    ],
)
def test_device_class(pid: str, device_class: str | None) -> None:
    """The class the speed fits group a device in: integrated, discrete, or a datacenter compute
    GPU of the HBM line."""
    assert get_profile(pid).device_class == device_class


def test_every_hbm_compute_architecture_is_datacenter() -> None:
    """The compute line's chips (GA100, GH100, GB100, CDNA) are all marked, and nothing of a
    graphics architecture is."""
    for p in ProfileDB.default().all().values():
        arch = p.architecture or ""
        if arch.endswith("-datacenter") or arch.startswith("cdna") or arch == "hopper":
            assert p.datacenter, p.id
        if arch.startswith(("rdna", "ada", "turing", "apple", "xe")) or arch in ("ampere", "blackwell"):
            assert not p.datacenter, p.id


def test_unknown_device_lists_closest() -> None:
    with pytest.raises(BadInputError, match=r"unknown device 'rtx4090'; closest: rtx-4090"):
        get_profile("rtx4090")


def test_user_profile_overrides_and_adds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "cfg"
    (cfg / "profiles").mkdir(parents=True)
    (cfg / "profiles" / "mine.toml").write_text(
        'id = "my-box"\nname = "My box"\nkind = "cpu-memory"\nbackends = ["cpu"]\n'
        'memory_bandwidth_gbs = 61.5\nsource = "measured by me with STREAM"\n'
    )
    monkeypatch.setenv("GGPROF_CONFIG_DIR", str(cfg))
    assert get_profile("my-box").memory_bandwidth_gbs == 61.5
    assert "ddr4-3200-dual" in ProfileDB.default().all()


_GPU = 'id = "x"\nname = "X"\nkind = "gpu"\nbackends = ["cuda"]\nmemory_bandwidth_gbs = 5\nsource = "s"\n'
BAD_PROFILES = [
    ("id = 3", "field 'id'"),
    ('id = "x"\nname = "X"\nkind = "toaster"', "field 'kind'"),
    ('id = "x"\nname = "X"\nkind = "gpu"\nbackends = ["cuda"]\nmemory_bandwidth_gbs = -5', "memory_bandwidth_gbs"),
    ('id = "x"\nname = "X"\nkind = "gpu"\nbackends = []\nmemory_bandwidth_gbs = 5', "field 'backends'"),
    ('id = "x"\nname = "X"\nkind = "gpu"\nbackends = ["cuda"]\nmemory_bandwidth_gbs = 5', "field 'source'"),
    (_GPU + 'match = ["("]', "field 'match'"),
    (_GPU + "bandwith = 1", "field 'bandwith': unknown field"),
    (_GPU + 'datacenter = "yes"', "field 'datacenter': must be true or false"),
    (_GPU + "datacenter = true\nintegrated = true", "field 'datacenter': a datacenter GPU has its own memory"),
    ("id = [unclosed", "invalid TOML"),
]


@pytest.mark.parametrize(("text", "problem"), BAD_PROFILES)
def test_malformed_profile_one_line_naming_file_and_field(
    text: str, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: RunCli
) -> None:
    (tmp_path / "profiles").mkdir()
    bad = tmp_path / "profiles" / "bad.toml"
    bad.write_text(text)
    monkeypatch.setenv("GGPROF_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ProfileError, match=str(bad)):
        ProfileDB.default().all()
    r = run_cli("profiles")
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"Error: {bad}: ") and problem in r.stderr


def test_profiles_json(run_cli: RunCli) -> None:
    r = run_cli("profiles", "--json")
    assert r.exit_code == 0
    rows = {row["id"]: row for row in json.loads(r.stdout)}
    for row in rows.values():
        assert {"id", "name", "kind", "backends", "memory_bandwidth_gbs", "memory_gb", "source"} <= set(row)
    assert rows["rtx-4090"]["memory_gb"] == 24 and rows["rtx-4090"]["kind"] == "gpu"
    assert rows["ddr5-5600-dual"]["memory_gb"] is None
    # a chip whose matrix units outpace its vector units: both ceilings, the vector one twice FP32
    a770 = rows["arc-a770"]
    assert a770["peak_flops_per_s"] == pytest.approx(a770["peak_fp16_tflops"] * 1e12, rel=1e-9)
    assert a770["vector_flops_per_s"] == pytest.approx(2 * a770["peak_fp32_tflops"] * 1e12, rel=1e-9)
    m2 = rows["apple-m2"]  # FP16 at the FP32 rate, no faster matrix units: one ceiling
    assert m2["vector_flops_per_s"] == pytest.approx(m2["peak_flops_per_s"], rel=1e-9)
    text = run_cli("profiles").stdout
    assert all(len(line) <= 100 for line in text.splitlines())


def test_the_search_budget_is_one_commands() -> None:
    """A command's bound on profile-pattern searches ends with it: a library call after a command
    (many run in one test process) is not counted against it, so it never fails on what earlier
    commands spent."""
    from support import in_process

    from ggprof.machine.profiles import SEARCHES

    assert in_process("profiles").exit_code == 0
    assert (SEARCHES.armed, SEARCHES.count, SEARCHES.spent_s) == (False, 0, 0.0)

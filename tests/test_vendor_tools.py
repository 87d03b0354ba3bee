"""Vendor and OS tools as a hostile host would have them: fake nvidia-smi, rocm-smi, amd-smi,
vulkaninfo, sycl-ls and udevadm first on PATH, each misbehaving on purpose. `ggprof host` runs
as a real process held to its own deadline and memory; whatever a tool does, the answer comes
in time, bounded, with a note naming the tool, and nothing a tool started is left running."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest
from support import as_bounded_process

LIMITS = {"timeout_s": 30, "max_rss_bytes": 300 << 20}
TOOLS = ("nvidia-smi", "rocm-smi", "amd-smi", "vulkaninfo", "sycl-ls", "udevadm")
RTX_4090 = "0, NVIDIA GeForce RTX 4090, 24564, 24000, 10501"


def _tools(tmp_path: Path, scripts: dict[str, str]) -> dict[str, str]:
    """PATH with each script as an executable named for its tool, first."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name, body in scripts.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "GGPROF_CACHE_DIR": str(tmp_path / "cache")}


def _host(env: dict[str, str]) -> tuple[dict[str, object], str]:
    r = as_bounded_process("host", "--no-measure", "--json", env=env, **LIMITS)  # type: ignore[arg-type]
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_a_tool_printing_a_gibibyte_is_cut_off_and_named(tmp_path: Path) -> None:
    """`yes` writes forever: read to 8 MiB, then the tool is ended; before, `host` took 3-4.5 GB
    and ran past 45 s."""
    env = _tools(tmp_path, {"nvidia-smi": f"yes '{RTX_4090}'"})
    d, err = _host(env)
    assert "nvidia-smi: printed more than 8 MiB; cut off, not read" in err
    assert not any(dev["backend"] == "cuda" for dev in d["devices"])  # type: ignore[attr-defined]


def test_tools_leaving_children_on_their_output_answer_at_once_and_leave_nothing(tmp_path: Path) -> None:
    """Six tools each fork a child that holds their output open for a minute: each answer is
    read when its tool exits, and every child is ended with it."""
    pids = tmp_path / "pids"
    pids.mkdir()
    answers = {"nvidia-smi": f"echo '{RTX_4090}'", "udevadm": "echo MEMORY_DEVICE_0_SIZE=17179869184"}
    scripts = {
        name: f"(sleep 60; echo late) &\necho $! > '{pids / name}'\n{answers.get(name, 'echo nothing')}"
        for name in TOOLS
    }
    env = _tools(tmp_path, scripts)
    r = as_bounded_process("host", "--no-measure", "--json", env=env, **LIMITS)  # type: ignore[arg-type]
    assert r.exit_code == 0, r.stderr
    assert r.wall_s < 15  # before: six such tools kept `host` running past 15 s
    d = json.loads(r.stdout)
    (gpu,) = [dev for dev in d["devices"] if dev["backend"] == "cuda"]  # the device is not lost
    assert gpu["name"] == "NVIDIA GeForce RTX 4090" and gpu["memory_bytes"] == 24564 << 20
    started = [int(p.read_text()) for p in pids.iterdir()]
    assert len(started) >= 2  # nvidia-smi's and udevadm's at least: the others run where their plugin asks
    assert not [pid for pid in started if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


def test_a_tool_that_never_answers_ends_at_its_deadline(tmp_path: Path) -> None:
    env = _tools(tmp_path, {"nvidia-smi": "exec sleep 60"})
    r = as_bounded_process(
        "host",
        "--no-measure",
        "--json",
        env={**env, "GGPROF_TOOL_TIMEOUT_S": "1"},
        **LIMITS,  # type: ignore[arg-type]
    )
    assert r.exit_code == 0 and "nvidia-smi: no answer within 1 s; ended" in r.stderr and r.wall_s < 15


@pytest.mark.parametrize("mib", ["1e300", "-5", "inf", "nan", "9" * 400])
def test_a_gpu_memory_no_device_has_is_dropped_with_a_note(tmp_path: Path, mib: str) -> None:
    env = _tools(tmp_path, {"nvidia-smi": f"echo '0, NVIDIA GeForce RTX 4090, {mib}, {mib}, 10501'"})
    d, err = _host(env)
    (gpu,) = [dev for dev in d["devices"] if dev["backend"] == "cuda"]  # type: ignore[attr-defined]
    # the device stays, with its profile's memory (24 GB), not the tool's figure
    assert gpu["memory_bytes"] == 24 * 2**30 and gpu["memory_source"] == "profile rtx-4090"  # a "24 GB" card: GiB
    assert "nvidia-smi: a device's memory of " in err and "is outside any real device's" in err


@pytest.mark.parametrize(
    ("props", "what"),
    [
        ("MEMORY_DEVICE_0_SIZE=17179869184\nMEMORY_DEVICE_0_TYPE=DDR5\nMEMORY_DEVICE_0_SPEED_MTS=1000000000", "rate"),
        ("MEMORY_DEVICE_0_SIZE=17179869184\nMEMORY_DEVICE_0_TYPE=DDR5\nMEMORY_DEVICE_0_SPEED_MTS=" + "9" * 400, "rate"),
        (
            "\n".join(f"MEMORY_DEVICE_{i}_SIZE=17179869184\nMEMORY_DEVICE_{i}_SPEED_MTS=5600" for i in range(10_000)),
            "modules",
        ),
    ],
)
def test_memory_modules_no_machine_has_give_no_peak(tmp_path: Path, props: str, what: str) -> None:
    """1e9 MT/s gave a theoretical 16,000,000 GB/s, 10,000 modules likewise; a 400-digit speed
    exited 1 (internal error)."""
    (tmp_path / "props.txt").write_text(props + "\n")
    env = _tools(tmp_path, {"udevadm": f"cat '{tmp_path / 'props.txt'}'"})
    d, err = _host(env)
    assert d["theoretical_bandwidth_bytes_per_s"] is None
    words = "memory modules in one machine of 10000" if what == "modules" else "a memory's transfer rate (MT/s) of"
    assert f"udevadm: {words}" in err


def test_thousands_of_profile_patterns_are_bounded_in_all(tmp_path: Path) -> None:
    """User profiles with 250,000 `match` patterns, each quick: the searches (and compiles) are
    bounded in all, not only one by one (before, `host` ran past 20 s). `host` answers in time,
    the GPU's detection saying what stopped it; `profiles` is one error line."""
    folder = tmp_path / "config" / "profiles"
    folder.mkdir(parents=True)
    for f in range(5):
        patterns = ", ".join(f'"zz{f}x{i}"' for i in range(50_000))
        (folder / f"many-{f}.toml").write_text(
            f'id = "many-{f}"\nname = "many {f}"\nkind = "gpu"\nbackends = ["cuda"]\nmemory_bandwidth_gbs = 100\n'
            f'source = "test"\nmatch = [{patterns}]\n'
        )
    # a GPU to match them against: its name is searched with every pattern
    env = {**_tools(tmp_path, {"nvidia-smi": f"echo '{RTX_4090}'"}), "GGPROF_CONFIG_DIR": str(tmp_path / "config")}
    d, _ = _host(env)
    (cuda,) = [b for b in d["backends"] if b["backend"] == "cuda"]  # type: ignore[attr-defined]
    assert not cuda["detected"] and "`match` patterns took more than 200,000 searches or 3 s" in cuda["reason"]
    r = as_bounded_process("profiles", env=env, **LIMITS)  # type: ignore[arg-type]
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("\n") == 1
    assert r.stderr.startswith("Error: ") and "`match` patterns took more than 200,000 searches or 3 s" in r.stderr

"""Figures that scheduling cannot fool: bandwidth passes timed by their workers, the CPUs this
process may really use (affinity set, cgroup quota), and no verdict on a figure that cannot be
true (refused bandwidth; a run faster than the host figure allows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import pytest
from support import RunCli

from ggprof.machine.cpus import CpuBudget, cgroup_quota, parse_cpu_list, read_budget
from ggprof.machine.measurements import BandwidthMeasurement, KernelResult
from ggprof.pipelines.extensions import Extensions

if TYPE_CHECKING:
    import numpy as np

PASS_S = 0.05


def test_a_pass_lasts_from_the_first_workers_start_to_the_last_ones_end() -> None:
    """Each worker is busy for 50 ms; the main thread is held back for 40 ms right after it
    releases them (as a busy scheduler holds it). A clock read by the main thread would see
    10 ms; the workers' own stamps see the whole pass, every time."""
    from ggprof.machine.stream import _Team

    def busy(_k: int) -> None:
        until = time.perf_counter() + PASS_S
        while time.perf_counter() < until:
            pass

    for threads in (1, 2, 4):
        team = _Team(threads, after_release=lambda: time.sleep(0.04))
        try:
            passes = [team.time(busy) for _ in range(5)]
        finally:
            team.close()
        assert min(passes) >= PASS_S, (threads, passes)


def test_a_worker_started_late_stretches_the_pass() -> None:
    """Worker 1 starts 30 ms after worker 0 (both 20 ms of work): the pass is the 50 ms from
    the first start to the last end, not either worker's 20 ms."""
    from ggprof.machine.stream import _Team

    gate = threading.Event()

    def kernel(k: int) -> None:
        if k == 1:
            gate.wait(0.03)
        time.sleep(0.02)

    team = _Team(2)
    try:
        assert team.time(kernel) >= 0.05
    finally:
        team.close()


def test_a_failing_kernel_is_raised_not_left_waiting() -> None:
    from ggprof.machine.stream import _Team

    def kernel(k: int) -> None:
        if k == 0:
            raise MemoryError("no room")

    team = _Team(2)
    try:
        with pytest.raises(MemoryError, match="no room"):
            team.time(kernel)
        assert team.time(lambda _k: None) > 0  # the team still answers
    finally:
        team.close()


# -- the read kernel -----------------------------------------------------------------------------


def test_the_fastest_read_kernel_is_picked() -> None:
    """On an Emerald Rapids VM (numpy 2.4) the bitwise-or read 16.4-18.4 GB/s where a compiled
    OpenMP loop read 24.3-26.5 (benchmarks/data/bandwidth-2026-12-04-before.txt) and the max
    25.8-27.0 (bandwidth-2026-12-04.txt)."""
    from ggprof.machine.stream import fastest_kernel

    assert fastest_kernel({"or": 18.2e9, "max": 26.7e9}) == "max"  # the medians of those files
    assert fastest_kernel({"or": 34.2e9, "max": 29.4e9}) == "or"  # 0.96x and 0.86x of C on 2026-12-01
    assert fastest_kernel({"or": 20e9, "max": 20e9}) == "or"  # a tie: the first named


def test_every_read_after_the_probe_uses_the_kernel_it_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bitwise-or is made a third of a second slower per pass than any real pass of the max
    over 64 MiB: the probe picks the max, and every read after it (the repetitions and the
    one-worker reads the figure is held to) is the max, which the measurement names."""
    from ggprof.machine import stream
    from ggprof.machine.measurements import READ_KERNELS

    calls: list[str] = []

    def slow_or(x: np.ndarray) -> None:
        calls.append("or")
        time.sleep(0.3)

    def recorded_max(x: np.ndarray) -> None:
        calls.append("max")
        stream._max_doubles(x)

    monkeypatch.setattr(stream, "_READ_FUNCTIONS", {"or": slow_or, "max": recorded_max})
    m = stream.measure_bandwidth(2, None, 0, quick=True)  # no free RAM reported: 64 MiB arrays
    assert m.array_bytes == 64 << 20 and m.read_kernel == "max"
    probe = (1 + stream.PROBE_PASSES) * 2  # a warm-up pass and the timed ones, on 2 workers
    last_or = max(i for i, k in enumerate(calls) if k == "or")
    assert calls.count("or") == probe and last_or < 2 * probe
    after = calls[last_or + 1 :]
    assert set(after) == {"max"}
    assert len(after) >= 2 * m.repetitions + stream.ONE_THREAD_READS
    assert "max over doubles" in m.describe_kernel() and READ_KERNELS["max"] == "max over doubles"
    calls.clear()
    reads, _ = stream.measure_reads(2, 64 << 20, 3, "max")  # a refining round reads as the figure did
    assert len(reads.samples_bytes_per_s) == 3 and set(calls) == {"max"}


def test_a_cached_figure_keeps_its_kernel_and_one_read_by_another_rule_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import asdict, replace

    from ggprof.machine import cache
    from ggprof.machine.facts import gather_facts
    from ggprof.machine.measurements import SgemmMeasurement

    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    facts, sgemm = gather_facts(), SgemmMeasurement(1e11, 256, (1e11,))
    path = cache.save(facts, replace(measurement(26, 13), read_kernel="max"), sgemm)
    loaded = cache.load(facts)
    assert loaded is not None and loaded[0].read_kernel == "max"
    data = json.loads(path.read_text())
    for bad in ("sum", None, 3):  # a kernel this version does not have
        path.write_text(json.dumps({**data, "bandwidth": {**data["bandwidth"], "read_kernel": bad}}))
        assert cache.load(facts) is None
    old = asdict(measurement(18, 9))  # version 2: read by the bitwise-or alone, no kernel named
    del old["read_kernel"]
    path.write_text(json.dumps({**data, "version": 2, "bandwidth": old}))
    assert cache.load(facts) is None


# -- the CPUs this process may use ---------------------------------------------------------------


def fake_root(
    tmp_path: Path,
    *,
    cores: int = 16,
    smt: int = 1,
    affinity: str | None = None,
    v2: dict[str, str] | None = None,
    v1: tuple[str, str] | None = None,
    cgroup_path: str = "/",
) -> Path:
    """A folder standing in for /: the topology of `cores` cores with `smt` threads each, this
    process's cgroup (`cgroup_path`) with cpu.max files per cgroup level (`v2`: relative path ->
    text) or a v1 quota and period, and an affinity set."""
    root = tmp_path / "root"
    for cpu in range(cores * smt):
        topo = root / "sys/devices/system/cpu" / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text("0\n")
        (topo / "core_id").write_text(f"{cpu % cores}\n")
    (root / "proc/self").mkdir(parents=True)
    if affinity is not None:
        (root / "affinity").write_text(affinity)
    if v1 is not None:
        (root / "proc/self/cgroup").write_text(f"4:cpu,cpuacct:{cgroup_path}\n2:memory:/\n")
        (root / "proc/self/mountinfo").write_text(
            "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        )
        level = root / "sys/fs/cgroup/cpu,cpuacct" / cgroup_path.lstrip("/")
        level.mkdir(parents=True, exist_ok=True)
        (level / "cpu.cfs_quota_us").write_text(v1[0] + "\n")
        (level / "cpu.cfs_period_us").write_text(v1[1] + "\n")
    else:
        (root / "proc/self/cgroup").write_text(f"0::{cgroup_path}\n")
        (root / "proc/self/mountinfo").write_text(
            "41 31 0:38 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
        )
        for rel, text in (v2 or {}).items():
            level = root / "sys/fs/cgroup" / rel
            level.mkdir(parents=True, exist_ok=True)
            (level / "cpu.max").write_text(text + "\n")
        (root / "sys/fs/cgroup" / cgroup_path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return root


class RootChanges(TypedDict, total=False):
    """What a fake root's cgroups and affinity set say."""

    affinity: str
    v2: dict[str, str]
    v1: tuple[str, str]
    cgroup_path: str


@pytest.mark.parametrize(
    ("kwargs", "usable", "limited_by", "quota"),
    [
        ({}, 16, "physical cores", None),
        ({"v2": {"": "max 100000"}}, 16, "physical cores", None),  # cpu.max "max": no quota
        ({"v2": {"": "200000 100000"}}, 2, "cgroup quota", 2.0),  # docker run --cpus=2
        ({"v2": {"": "150000 100000"}}, 1, "cgroup quota", 1.5),  # 1.5 CPUs: one whole thread
        ({"v2": {"": "50000 100000"}}, 1, "cgroup quota", 0.5),  # under one CPU: still one thread
        # a parent's limit binds the child: the tightest level along the path counts
        (
            {"v2": {"kubepods": "400000 100000", "kubepods/pod1": "max 100000"}, "cgroup_path": "/kubepods/pod1"},
            4,
            "cgroup quota",
            4.0,
        ),
        ({"v1": ("300000", "100000"), "cgroup_path": "/docker/abc"}, 3, "cgroup quota", 3.0),
        ({"v1": ("-1", "100000")}, 16, "physical cores", None),
        ({"affinity": "0-3"}, 4, "CPU affinity", None),  # taskset -c 0-3
        ({"affinity": "0,2,5"}, 3, "CPU affinity", None),
        ({"affinity": "0-3", "v2": {"": "200000 100000"}}, 2, "cgroup quota", 2.0),
        ({"affinity": "0-1", "v2": {"": "400000 100000"}}, 2, "CPU affinity", 4.0),
        ({"affinity": "0-15"}, 16, "physical cores", None),  # every CPU: no limit
    ],
)
def test_the_cpu_budget_is_the_smallest_of_cores_affinity_and_quota(
    tmp_path: Path, kwargs: RootChanges, usable: int, limited_by: str, quota: float | None
) -> None:
    root = fake_root(tmp_path, **kwargs)
    budget = read_budget(16, 16, root=root)
    assert (budget.usable, budget.limited_by) == (usable, limited_by)
    assert budget.quota_cpus == (pytest.approx(quota) if quota is not None else None)
    assert f"{usable} of 16 physical cores usable, limited by {limited_by}" in budget.describe()


def test_smt_siblings_in_the_affinity_set_count_as_one_core(tmp_path: Path) -> None:
    """8 cores x 2 threads; CPUs 0-1 and 8-9 are the two threads of cores 0 and 1."""
    root = fake_root(tmp_path, cores=8, smt=2, affinity="0,1,8,9")
    budget = read_budget(8, 16, root=root)
    assert (budget.affinity_cores, budget.usable, budget.limited_by) == (2, 2, "CPU affinity")


def test_hostile_cgroup_files_mean_no_quota(tmp_path: Path) -> None:
    for text in ("", "max", "abc 100000", "100000 0", "-5 100000", "1 2 3", "9" * 5000):
        root = fake_root(tmp_path / str(abs(hash(text))), v2={"": text})
        assert cgroup_quota(root) is None, text
    assert parse_cpu_list("0-3,x,7,9-8,10-999999999") == {0, 1, 2, 3, 7}
    assert CpuBudget(physical_cores=4, logical_cores=4, affinity=(), quota_cpus=None).usable == 1


def test_this_process_reads_its_own_budget() -> None:
    """The real files: whatever the machine, the budget is at least one core and never more
    than the machine's, and the affinity set is this process's own."""
    from ggprof.machine.facts import gather_facts

    facts = gather_facts()
    assert facts.cpus is not None and 1 <= facts.usable_cores <= facts.physical_cores
    if hasattr(os, "sched_getaffinity"):
        assert facts.cpus.affinity == tuple(sorted(os.sched_getaffinity(0)))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity sets on this OS")
def test_taskset_sets_the_threads_of_ggprof_host() -> None:
    """A real affinity set of one CPU (what `taskset -c 0` makes): one usable core, one thread
    for the bandwidth kernels and for llama.cpp by default."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: an affinity set cannot limit anything")
    cpu = min(os.sched_getaffinity(0))
    code = (
        f"import os, sys; os.sched_setaffinity(0, {{{cpu}}}); from ggprof.cli import main; "
        "sys.exit(main(['host', '--json', '--no-measure']))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["usable_cores"], d["usable_cores_limited_by"], d["cpu_affinity"]) == (1, "CPU affinity", [cpu])
    assert d["default_threads"] == 1


@pytest.fixture
def sixteen_core_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`docker run --cpus=2` on a 16-core host: psutil counts the host's 16 cores (what it
    reports inside such a container), the cgroup allows 2 CPUs' worth of time."""
    import psutil

    from ggprof.machine import facts

    root = fake_root(tmp_path, cores=16, v2={"": "200000 100000"}, affinity="0-15")
    monkeypatch.setattr(facts, "SYSTEM_ROOT", root)
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 16)
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    return root


def test_a_cgroup_quota_sets_the_measurements_threads(run_cli: RunCli, sixteen_core_container: Path) -> None:
    r = run_cli("host", "--json", "--quick")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["physical_cores"], d["usable_cores"], d["usable_cores_limited_by"]) == (16, 2, "cgroup quota")
    assert d["cpu_quota_cpus"] == pytest.approx(2.0) and "cpu.max 200000 100000" in d["cpu_quota_source"]
    assert d["measured_bandwidth_method"].startswith("STREAM-style kernels, 2 threads,")
    assert d["default_threads"] == 2
    text = run_cli("host", "--no-measure").stdout
    assert "2 of 16 physical cores, limited by cgroup quota" in text


def test_a_cgroup_quota_sets_llama_cpps_default_threads(
    run_cli: RunCli, sixteen_core_container: Path, tmp_path: Path
) -> None:
    """The default -t of a real llama.cpp run is the quota's 2, not the 16 cores; -t 16 is
    named as more than this process may use."""
    from ggprof.model.synth import SHAPES, write_model

    model = write_model(SHAPES["tiny"], "q4_0", tmp_path / "tiny.gguf")
    r = run_cli("bench", str(model), "-p", "8", "-n", "4", "-r", "1", "--json")
    assert r.exit_code == 0, r.stderr
    assert [row["n_threads"] for row in json.loads(r.stdout)] == [2, 2]
    r = run_cli("bench", str(model), "-p", "0", "-n", "1", "-r", "1", "-t", "16", "--json")
    assert "-t 16 is more than the 2 cores this process may use (limited by cgroup quota)" in r.stderr


# -- figures that cannot be true -----------------------------------------------------------------


def measurement(read_gb_s: float, one_thread_gb_s: float | None, threads: int = 2) -> BandwidthMeasurement:
    read = KernelResult("read", (read_gb_s * 1e9, read_gb_s * 0.98e9, read_gb_s * 0.97e9))
    one = KernelResult("read", (one_thread_gb_s * 1e9,)) if one_thread_gb_s else None
    return BandwidthMeasurement(
        read=read,
        copy=read,
        triad=read,
        threads=threads,
        array_bytes=256 << 20,
        repetitions=3,
        elapsed_s=1.0,
        read_one_thread=one,
    )


def test_a_figure_above_what_its_workers_or_the_modules_can_read_is_implausible() -> None:
    """The 2-vCPU EPYC VM's figure: 851 GB/s on 2 threads whose one worker reads 40 GB/s."""
    why = measurement(851, 40).implausible()
    assert why is not None and "851 GB/s on 2 threads" in why and "one (40 GB/s)" in why
    assert measurement(75, 40).implausible() is None  # 1.9x one worker: memory shared, honest
    assert measurement(119, 40).implausible() is None  # under 1.5 x 2 x 40 = 120
    assert measurement(121, 40).implausible() is not None
    assert measurement(121, None).implausible() is None  # no one-worker figure: nothing to hold it to
    # DDR5-5600 dual channel: 89.6 GB/s theoretical
    assert measurement(95, 60).implausible(89.6e9) is None  # within 10%
    why = measurement(100, 60).implausible(89.6e9)
    assert why is not None and "above the installed memory's theoretical peak (89.6 GB/s)" in why


def test_a_figure_that_cannot_be_true_is_measured_again_then_refused(
    ext: Extensions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernels are replaced by one that reports the EPYC VM's figures twice (the fault the
    timing fix removed; no honest machine gives it any more): the host has no measured figure,
    says why in one line, caches nothing, and the CPU device names the refusal."""
    from ggprof.machine import cache, stream
    from ggprof.machine.host import describe_host

    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def inflated(threads: int, llc: int | None, available: int, quick: bool = False) -> BandwidthMeasurement:
        calls.append(threads)
        return measurement(851, 40, threads=max(threads, 2))

    monkeypatch.setattr(stream, "measure_bandwidth", inflated)
    report = describe_host(ext.backends.values(), ext.profiles, measure=True, quick=True, refresh=True)
    assert len(calls) == 2
    assert report.context.bandwidth is None and report.context.refused_bandwidth is not None
    (line,) = [w for w in report.warnings if "refused" in w]
    assert "measured twice, read 851 GB/s" in line and "\n" not in line
    assert cache.load(report.facts) is None
    cpu = report.cpu
    assert cpu is not None and (cpu.bandwidth is None or cpu.bandwidth.source != "measured")
    assert any("measured bandwidth refused" in n for n in cpu.notes)

    honest_second = iter([measurement(851, 40), measurement(70, 40)])
    monkeypatch.setattr(stream, "measure_bandwidth", lambda *a, **k: next(honest_second))
    report = describe_host(ext.backends.values(), ext.profiles, measure=True, quick=True, refresh=True)
    assert report.context.bandwidth is not None and report.context.bandwidth.read.best_bytes_per_s == 70e9
    assert any("cannot be right" in w and "measured again" in w for w in report.warnings)


def test_a_cached_figure_that_cannot_be_true_is_not_used(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    from ggprof.machine import cache
    from ggprof.machine.facts import gather_facts
    from ggprof.machine.measurements import SgemmMeasurement

    cache.save(gather_facts(), measurement(851, 40), SgemmMeasurement(1e11, 256, (1e11,)))
    r = run_cli("host", "--json", "--no-measure")
    assert r.exit_code == 0
    assert json.loads(r.stdout)["measured_read_bandwidth_bytes_per_s"] is None
    assert "the cached bandwidth measurement cannot be right (read 851 GB/s on 2 threads" in r.stderr


# -- a busy machine ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity sets on this OS")
def test_a_busy_machine_is_said_before_the_run_and_the_run_kept_short(run_cli: RunCli, tmp_path: Path) -> None:
    """A busy loop on each CPU the run may use (the test's own affinity set: up to 2 CPUs, so
    the loops load them whatever the machine's size): one line says so before anything is
    measured, each test stops by 3 repetitions, and the verdict names the load."""
    from ggprof.model.synth import SHAPES, write_model
    from ggprof.pipelines.profile import BUSY_MAX_REPS

    model = write_model(SHAPES["tiny"], "q4_0", tmp_path / "tiny.gguf")
    mine = os.sched_getaffinity(0)
    cpus = sorted(mine)[:2]
    loops = [
        subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
        for cpu in cpus
    ]
    try:
        os.sched_setaffinity(0, cpus)
        time.sleep(0.3)
        r = run_cli("profile", str(model), "-p", "16", "-n", "32", "--json")
    finally:
        os.sched_setaffinity(0, mine)
        for loop in loops:
            loop.kill()
            loop.wait()
    d = json.loads(r.stdout)
    (busy,) = [line for line in r.stderr.splitlines() if "the machine is busy" in line]
    assert f"of the {len(cpus)} CPUs this process may use busy" in busy
    assert f"at most {BUSY_MAX_REPS} repetitions a test" in busy
    assert all(1 <= len(row["samples_ns"]) <= BUSY_MAX_REPS for row in d["bench"]), d["bench"]
    assert "CPU_OTHER_LOAD" in {f["code"] for f in d["findings"]} and d["verdict"] != "impossible"


# -- one number, one verdict ---------------------------------------------------------------------


@pytest.mark.slow
def test_one_number_gets_one_verdict_whichever_command_gives_it(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`profile` keeps its thread probe; `check`, `predict` and `fit` on the same host then use
    the compute roof it gives: the same expected range as the profile, and the same decode
    verdict for the number it measured. A model never profiled here says its band rests on
    bandwidth alone."""
    from ggprof.model.synth import SHAPES, write_model

    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    model = str(write_model(SHAPES["tiny"], "q4_0", tmp_path / "tiny.gguf"))
    other = str(write_model(SHAPES["tiny"], "q8_0", tmp_path / "other.gguf"))
    prof = json.loads(run_cli("profile", model, "-p", "16", "-n", "16", "-r", "2", "-t", "2", "--json").stdout)
    assert prof["depths"][0]["probe_threads"] == 1
    low, high, tg = prof["expected_tok_s_low"], prof["expected_tok_s_high"], prof["measured_tg_tok_s"]

    chk = json.loads(run_cli("check", model, "--tg", repr(tg), "--json").stdout)
    assert (chk["expected_tok_s_low"], chk["expected_tok_s_high"]) == (pytest.approx(low), pytest.approx(high))
    (found,) = [f for f in chk["findings"] if f["code"].startswith("DECODE_")]
    assert any("compute roof from the thread probe measured by `ggprof profile`" in e for e in found["evidence"])
    # The same band, so the same verdict for a number inside it and for one far below it. (For the
    # measured number itself the two may differ near the band's edge, and rightly: the profile
    # widens its tolerance by its repetitions' spread, which a number given to `check` has not,
    # and how noisy the run was depends on what else the machine was doing.)
    for tok_s, verdict in (((low + high) / 2, "plausible"), (low / 2, "suspicious")):
        d = json.loads(run_cli("check", model, "--tg", repr(tok_s), "--json").stdout)
        severity = {f["severity"] for f in d["findings"] if f["code"].startswith("DECODE_")}
        assert severity == {verdict}, (tok_s, low, high, d["findings"])

    pred = json.loads(run_cli("predict", model, "--json").stdout)
    assert (pred["expected_tok_s_low"], pred["expected_tok_s_high"]) == (pytest.approx(low), pytest.approx(high))
    assert "thread probe measured by `ggprof profile`" in pred["compute_roof_note"]
    (fit,) = json.loads(run_cli("fit", model, "--json").stdout)["models"]
    assert "thread probe measured by `ggprof profile`" in fit["compute_roof_note"]

    never = json.loads(run_cli("predict", other, "--json").stdout)
    assert never["compute_roof_tok_s"] is None and "rests on bandwidth alone" in never["compute_roof_note"]
    chk = json.loads(run_cli("check", other, "--tg", "1", "--json").stdout)
    (found,) = [f for f in chk["findings"] if f["code"].startswith("DECODE_")]
    assert any("no compute roof measured on this host for this model" in e for e in found["evidence"])
    assert "no compute roof measured" not in json.dumps(
        json.loads(run_cli("check", model, "--tg", "1", "--device", "ddr5-5600-dual", "--json").stdout)
    )


def test_a_plausible_decode_below_the_band_names_its_tolerance(tmp_path: Path) -> None:
    """96.1 against a band from 100: 3.9% below its low end, plausible within the 7% tolerance
    (5% + 2 x the repetitions' CV of 1%); 92 (8% below) is not."""
    from dataclasses import replace

    from ggprof.figures import Figure
    from ggprof.machine.device import Device, EfficiencyBand
    from ggprof.model.spec import load_model
    from ggprof.model.synth import SHAPES, write_model
    from ggprof.physics.roofline import PredictInputs, predict
    from ggprof.plugins import extensions
    from ggprof.verdict.finding import JudgeCase
    from ggprof.verdict.judge import judge

    spec = load_model(write_model(SHAPES["tiny"], "q4_0", tmp_path / "tiny.gguf"))
    device = Device(id="cpu", name="cpu", backend="cpu", bandwidth=Figure(spec.decode_bytes_per_token * 200.0, "user"))
    band = EfficiencyBand(low=0.5, high=0.9, source="a band for the test")
    p = predict(spec, device, PredictInputs(), band)
    assert p.decode_ceiling_tok_s == pytest.approx(200, rel=1e-3)
    low = 0.5 * p.decode_ceiling_tok_s
    ext = extensions()
    case = JudgeCase(model=spec, backend="cpu", prediction=p, measured_tg_tok_s=low * 0.961, tg_cv=0.01)
    (f,) = [f for f in judge(case, ext.backends, ext.extra_findings).findings if f.code.startswith("DECODE_")]
    assert f.code == "DECODE_PLAUSIBLE"
    assert any(
        e.startswith("3.9% below the band's low end")
        and "within the 7% tolerance (5% measurement tolerance + 2 x the repetitions' CV 1.0%)" in e
        for e in f.evidence
    ), f.evidence
    slow = replace(case, measured_tg_tok_s=low * 0.92)
    codes = {f.code for f in judge(slow, ext.backends, ext.extra_findings).findings}
    assert "DECODE_BELOW_BAND" in codes


def test_a_damaged_roofs_file_means_no_roof(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Garbage, another version, wrong types or absurd figures: no roof, never an error; a
    save over it starts the file again."""
    from ggprof.bench import roofs
    from ggprof.bench.results import ThreadProbe
    from ggprof.model.spec import load_model
    from ggprof.model.synth import SHAPES, write_model

    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    spec = load_model(write_model(SHAPES["tiny"], "q4_0", tmp_path / "tiny.gguf"))
    path = roofs.roofs_path("fp")
    path.parent.mkdir(parents=True)
    good = {"model": roofs.shape_key(spec), "depth": 0, "run_threads": 2, "probe_threads": 1, "n_gen": 16}
    for text in (
        "not json",
        json.dumps({"version": 99, "roofs": []}),
        json.dumps({"version": 1, "roofs": [{**good, "samples_ns": "x", "measured_at": 1.0}]}),
        json.dumps({"version": 1, "roofs": [{**good, "samples_ns": [-1], "measured_at": 1.0}]}),
        json.dumps({"version": 1, "roofs": [{**good, "run_threads": 1, "samples_ns": [10**9], "measured_at": 1.0}]}),
        json.dumps({"version": 1, "roofs": [{**good, "samples_ns": [10**9], "measured_at": float("inf")}]}),
        "[" * 100_000,
        " " * (roofs.MAX_ROOFS_BYTES + 1),
    ):
        path.write_text(text)
        assert roofs.load("fp", spec, 0) is None, text[:80]
    roofs.save("fp", spec, 0, 2, ThreadProbe(n_threads=1, n_gen=16, samples_ns=(10**9,)))
    kept = roofs.load("fp", spec, 0)
    assert kept is not None and kept.probe.tok_s == pytest.approx(16.0) and kept.run_threads == 2
    assert roofs.load("fp", spec, 64) is None and roofs.load("fp", spec, 64, exact=False) == kept


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity sets on this OS")
def test_a_roof_measured_on_a_busy_machine_is_kept_with_its_load_and_said_to_be(  # type: ignore[no-untyped-def]
    run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`profile` on a machine a busy loop shares (one loop pinned to one of the run's CPUs) keeps
    its thread probe with the share of the CPU the loop took; `predict` on the quiet machine
    afterwards says the roof it uses was measured on a busy machine, where it reads low."""
    from ggprof.bench import roofs
    from ggprof.machine.cache import fingerprint
    from ggprof.machine.facts import gather_facts
    from ggprof.model.spec import load_model
    from ggprof.model.synth import SHAPES, write_model

    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    model = write_model(SHAPES["tiny"], "q4_0", tmp_path / "tiny.gguf")
    assert run_cli("host", "--json").exit_code == 0  # the bandwidth, measured first
    mine = os.sched_getaffinity(0)
    cpus = sorted(mine)[:2]
    args = ("profile", str(model), "-p", "16", "-n", "16", "-r", "2", "-t", str(len(cpus)), "--json")
    loop = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpus[0]}}})\nwhile True: pass"]
    )
    try:
        os.sched_setaffinity(0, cpus)
        time.sleep(0.3)
        busy = json.loads(run_cli(*args).stdout)
    finally:
        os.sched_setaffinity(0, mine)
        loop.kill()
        loop.wait()
    others = busy["context"]["cpu_load_during_percent"]
    assert others is not None and others > 25, others  # the loop's share, read back by the run
    kept = roofs.load(fingerprint(gather_facts()), load_model(model), 0)
    assert kept is not None and kept.others_cpu_percent == pytest.approx(others)
    note = json.loads(run_cli("predict", str(model), "--json").stdout)["compute_roof_note"]
    assert f"other processes taking {others:.0f}% of the CPU): measured on a busy machine, it may read low" in note

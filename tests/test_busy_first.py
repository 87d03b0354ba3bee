"""A machine busy during the run is said first: the share of the CPU other processes took, as
the likely cause of a slow or noisy verdict, with what to do; and a verdict gives one tolerance
figure, the same in its text and its JSON. On the real CLI: with busy loops the test starts
(pinned with `taskset`, their share measured by the test), and with llama-bench's rows and the
load counters replayed (quiet and busy, whatever this machine is doing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from support import FAKE_BENCH, in_process

import ggprof.report.verdict
from ggprof.machine.load import Contention, Load
from ggprof.verdict.busy import EXPLAINED

BENCH_ROW = Path(__file__).parent / "data" / "llama-bench-gemma3-270m.json"  # a real row, replayed
BUSY = "the machine was busy: other processes used"
# support.FAKE_BENCH reports 300 tok/s of prefill and a decode (1 tok/s) far below its own one-thread
# probe (100 tok/s), so below its band whatever this machine's figures.


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of the test's own (a roof measured beside busy loops, or a fake's, reaches no
    other test), with the session's host measurement where there is one."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for f in Path(os.environ["GGPROF_CACHE_DIR"]).glob("host-*.json"):
        shutil.copy(f, cache)
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def rendered(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The JSON of each profile the CLI renders as text (the same report, both ways)."""
    seen: list[dict[str, Any]] = []
    original = ggprof.report.verdict.profile_dict

    def keep(report: Any) -> dict[str, Any]:
        seen.append(original(report))
        return seen[-1]

    monkeypatch.setattr(ggprof.report.verdict, "profile_dict", keep)
    return seen


def contention(d: dict[str, Any]) -> Contention:
    """What the run's context says of others' load, as ggprof judges it."""
    ctx = d["context"]
    cores = ctx["usable_cores"] or ctx["physical_cores"]
    return Contention(others_percent=ctx["cpu_load_during_percent"], cores=cores, threads=ctx["n_threads"])


def depth_text(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("depth 0: verdict"))
    return lines[start:]


def assert_one_tolerance(text: str, depth: dict[str, Any]) -> None:
    """The verdict's one +- figure: its JSON's tolerance, said with what it is made of."""
    lines = depth_text(text)
    (line,) = [x for x in lines if x.startswith("  tolerance +- ")]
    assert line.startswith(f"  tolerance +- {depth['tolerance']:.0%} (")
    assert depth["tolerance_basis"].startswith("5% measurement tolerance")
    assert text.count("+-") == 1, text  # not the repetitions' interval, nor their stddev


def assert_busy_first(text: str, d: dict[str, Any], busy: Contention) -> None:
    """Others' share said first, in the text's second line and first in each finding it explains."""
    (depth,) = d["depths"]
    share = f"{BUSY} {busy.others_percent:.0f}% of the run's {busy.cores} cores"
    assert depth["likely_cause"].startswith(share), depth["likely_cause"]
    assert depth["likely_next_step"] == busy.next_step()
    explained = [f for f in depth["findings"] if f["code"] in EXPLAINED]
    assert explained, depth["findings"]
    for f in explained:
        assert f["causes"][0] == depth["likely_cause"], f
        assert not [c for c in f["causes"][1:] if "another program" in c or "noisy repetitions" in c], f
    lines = depth_text(text)
    assert " ".join(x.strip() for x in lines[1:4]).startswith(f"likely cause: {share}"), lines[:4]
    assert "run again when the machine is quiet" in "".join(lines[1:6])


# -- the real machine, made busy by the test ----------------------------------------------------------
class LoopShare:
    """The CPU time of the test's busy loops, sampled with psutil while the run goes on."""

    def __init__(self, loops: list[subprocess.Popen[bytes]]) -> None:
        self.procs = [psutil.Process(p.pid) for p in loops]
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _cpu_s(self) -> float:
        return float(sum(t.user + t.system for t in (p.cpu_times() for p in self.procs)))

    def _sample(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), self._cpu_s()))
            self.stop.wait(0.25)

    def percent(self, start: float, end: float, cores: int) -> float:
        """Their share of `cores` between two moments, as ggprof's percent."""
        inside = [(t, c) for t, c in self.samples if start <= t <= end]
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        return 100 * (c1 - c0) / ((t1 - t0) * cores)


@pytest.fixture
def busy_loops() -> Iterator[tuple[LoopShare, list[int]]]:
    """One busy loop pinned with `taskset` to each of up to 2 of this process's CPUs, which the
    test's run is held to; every loop stops in the end."""
    mine = os.sched_getaffinity(0)
    cpus = sorted(mine)[:2]
    loops = [subprocess.Popen(["taskset", "-c", str(cpu), "sh", "-c", "while :; do :; done"]) for cpu in cpus]
    share = LoopShare(loops)
    try:
        os.sched_setaffinity(0, cpus)
        share.thread.start()
        yield share, cpus
    finally:
        share.stop.set()
        os.sched_setaffinity(0, mine)
        for loop in loops:
            loop.kill()
            loop.wait()
        if share.thread.is_alive():
            share.thread.join(timeout=5)


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("taskset") or not hasattr(os, "sched_setaffinity"), reason="no taskset")
def test_a_busy_machine_is_the_first_cause_with_the_share_its_loops_took(
    gemma_path: Path, own_cache: Path, rendered: list[dict[str, Any]], busy_loops: tuple[LoopShare, list[int]]
) -> None:
    """Gemma 3 270M beside a busy loop on each of the run's CPUs: the share of the CPU the run
    reads back holds at least the loops' share the test measured (within 10 points: the two are
    sampled a little apart; others' load only adds to it), and where it slowed the run (as it
    does: the loops take about half of it) the busy machine is the likely cause, first among the
    causes of every finding it explains, with what to do. The verdict itself is not asserted."""
    share, cpus = busy_loops
    time.sleep(0.5)
    r = in_process("profile", str(gemma_path), "-p", "32", "-n", "16", "-t", str(len(cpus)), "--no-save")
    end = time.monotonic()
    (d,) = rendered
    # the status is the verdict's, whichever the load made it (docs/commands.md's exit statuses)
    assert r.exit_code == {"plausible": 0, "unknown": 0, "suspicious": 3}[d["verdict"]], r.stderr
    loops = share.percent(end - d["context"]["elapsed_s"], end, len(cpus))
    busy = contention(d)
    assert busy.cores == len(cpus) and busy.threads == len(cpus)
    assert loops - 10 <= busy.others_percent <= 100, (loops, busy.others_percent)
    assert busy.material, (loops, busy)  # half or more of the run's cores: more than the 20% allowed
    (depth,) = d["depths"]
    if d["verdict"] == "suspicious" or depth["findings"][0]["code"] in EXPLAINED:
        assert_busy_first(r.stdout, d, busy)
    assert "CPU_OTHER_LOAD" in {f["code"] for f in depth["findings"]}
    assert_one_tolerance(r.stdout, depth)
    assert d["tolerance"] == depth["tolerance"]


# -- replayed: llama-bench's rows and the load counters ------------------------------------------------
@pytest.mark.parametrize("others_percent", [5.0, 56.0])
def test_the_busy_cause_is_named_only_where_others_took_a_material_share(
    gemma_path: Path,
    tmp_path: Path,
    own_cache: Path,
    rendered: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    others_percent: float,
) -> None:
    """The same decode far below its band, with others' share of the run's CPUs replayed: 5% (a
    quiet machine) names no busy machine and keeps the backend's causes; 56% (the issue's
    machine) names it first, the likely cause, with `--threads` the cores it left free."""
    import ggprof.engines.llama_bench as engine

    fake = tmp_path / "llama-bench"
    row = json.dumps(json.loads(BENCH_ROW.read_text())[-1])
    fake.write_text(FAKE_BENCH.format(python=sys.executable, row=row, pp=300.0, tg_probe=100.0, tg=1.0))
    fake.chmod(0o755)
    recorded = Load(busy_cpus=others_percent / 100 * 2, cpus=2, sample_s=4.0)
    monkeypatch.setattr(engine, "others_load", lambda *args: recorded)
    args = ("profile", str(gemma_path), "--engine", f"llama-bench={fake}", "-p", "64", "-n", "16", "-r", "3")
    r = in_process(*args, "--bandwidth", "50", "--flops", "1", "--no-save")  # llama.cpp's threads: every core
    assert r.exit_code == 3, r.stderr
    (d,) = rendered
    busy = contention(d)
    assert busy.others_percent == pytest.approx(others_percent)
    (depth,) = d["depths"]
    (below,) = [f for f in depth["findings"] if f["code"] == "DECODE_BELOW_BAND"]
    if busy.material:
        assert others_percent == 56.0
        assert_busy_first(r.stdout, d, busy)
        if busy.cores == 2:  # 1.12 of 2 cores busy: 1 left free
            assert depth["likely_next_step"].endswith("or with --threads 1 (the cores the others left free)")
        assert below["causes"] == [depth["likely_cause"]]  # nothing the machine did not show
    else:
        assert depth["likely_cause"] is None and "likely cause" not in r.stdout
        assert not [c for f in depth["findings"] for c in f["causes"] if c.startswith(BUSY)]
        assert "CPU_OTHER_LOAD" not in {f["code"] for f in depth["findings"]}
        assert below["causes"]
    assert_one_tolerance(r.stdout, depth)
    assert depth["tolerance"] == pytest.approx(0.05)  # the repetitions agree: the 5% alone

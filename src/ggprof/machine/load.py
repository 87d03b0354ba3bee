"""How busy the CPUs this process may use are, from the OS's per-CPU time counters, before a
run: other processes' share, this process's own time left out; and during it, against the cores
the run's threads left free (`Contention`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")  # guest time is in user already


# Above this share of the CPUs taken by other processes a machine is busy: a run on it is kept
# short and said to be busy before anything is measured, and a compute roof measured on it is
# not reused (it reads low: llama.cpp's threads waited for theirs).
BUSY_SHARE = 0.25
# Other processes' CPU time during a run beyond the cores its threads left free, as a share of the
# cores it may use, above which they slowed it: the first cause named of a slow or noisy run. On a
# core the threads left free another program takes nothing from them; past those, each CPU-second
# it takes is one llama.cpp's threads wait for (they meet at every step). 20% is a fifth of the
# run's CPU time, four times the 5% a verdict allows a measurement (BASE_TOLERANCE); quiet hosts
# measured 0.04-0.21% (docs/calibration-xeon16-cpu-2026-11-29.jsonl).
CONTENDED_SHARE = 0.20


@dataclass(frozen=True)
class Load:
    """Other processes' CPU time over a short sample, on the CPUs this process may run on."""

    busy_cpus: float  # CPUs' worth of time others used (0.98: about one CPU busy)
    cpus: int  # the CPUs sampled (the affinity set)
    sample_s: float

    @property
    def share(self) -> float:
        return self.busy_cpus / self.cpus if self.cpus else 0.0

    def describe(self) -> str:
        return (
            f"other processes kept {self.busy_cpus:.1f} of the {self.cpus} CPUs this process may use busy "
            f"({self.share:.0%}) over {self.sample_s:.1f} s"
        )


@dataclass(frozen=True)
class Contention:
    """Other processes' CPU time while a run measured, against the cores its threads left free."""

    others_percent: float  # of the cores the run may use (cpu_load_during_percent)
    cores: int  # the cores the run may use (its affinity set, cgroup quota)
    threads: int  # llama.cpp's threads

    @property
    def others_cpus(self) -> float:
        return self.others_percent / 100 * self.cores

    @property
    def left_free(self) -> int:
        """The cores the run's threads left free."""
        return max(self.cores - self.threads, 0)

    @property
    def limit_percent(self) -> float:
        """The most others may use before the run is slowed: the free cores' share + CONTENDED_SHARE."""
        return 100 * (self.left_free / self.cores + CONTENDED_SHARE)

    @property
    def material(self) -> bool:
        return self.others_percent > self.limit_percent

    @property
    def free_cores(self) -> int:
        """The cores others left free during the run, rounded (at least 1): the threads that would not wait."""
        return max(1, round(self.cores - self.others_cpus))

    def cause(self) -> str:
        return (
            f"the machine was busy: other processes used {self.others_percent:.0f}% of the run's "
            f"{self.cores} cores ({self.others_cpus:.1f} cores' worth) while it measured, and llama.cpp's "
            f"{self.threads} threads waited for them"
        )

    def next_step(self) -> str:
        quiet = "run again when the machine is quiet"
        if self.free_cores >= self.threads:
            return quiet
        return f"{quiet}, or with --threads {self.free_cores} (the cores the others left free)"


def cpu_times() -> list[object] | None:
    """The OS's per-CPU time counters now (None where it gives none)."""
    try:
        return list(psutil.cpu_times(percpu=True))
    except (OSError, RuntimeError, NotImplementedError, AttributeError):
        return None


def others_load(
    before: list[object] | None,
    after: list[object] | None,
    affinity: tuple[int, ...] | None,
    own_s: float,
    wall_s: float,
) -> Load | None:
    """Other processes' CPU time between two readings of `cpu_times()`, on the CPUs of
    `affinity` (all where None), less `own_s` (the CPU seconds of ggprof and its children in
    between). Steal time counts as busy: on a VM it is another guest on this CPU."""
    if before is None or after is None or wall_s <= 0:
        return None
    n = min(len(before), len(after))
    cpus = [i for i in (affinity if affinity is not None else range(n)) if i < n]
    if not cpus:
        return None
    busy = sum(_busy(after[i]) - _busy(before[i]) for i in cpus) - own_s
    return Load(busy_cpus=max(0.0, min(float(len(cpus)), busy / wall_s)), cpus=len(cpus), sample_s=wall_s)


def sample_load(affinity: tuple[int, ...] | None, interval_s: float = 0.5) -> Load | None:
    """Others' load over `interval_s` from now; None where the OS gives no per-CPU counters."""
    before, own_before, t0 = cpu_times(), own_cpu_s(children=False), time.monotonic()
    time.sleep(interval_s)
    after, own_after = cpu_times(), own_cpu_s(children=False)
    return others_load(before, after, affinity, own_after - own_before, time.monotonic() - t0)


def _busy(t: object) -> float:
    return float(sum(getattr(t, f, 0.0) for f in BUSY_FIELDS))


def own_cpu_s(pid: int | None = None, children: bool = True) -> float:
    """CPU seconds of a process (this one by default), with its waited-for children's."""
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system + ((t.children_user + t.children_system) if children else 0.0))

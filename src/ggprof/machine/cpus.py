"""The CPUs this process may really use: the machine's cores, the affinity set it was started
with (`taskset`, `numactl`, a CI runner's cpuset) and the cgroup CPU quota it runs under
(`docker run --cpus=N`, Kubernetes CPU limits, systemd's CPUQuota): the smallest of the three.

The quota is read as the kernel enforces it: cgroup v2 `cpu.max` ("QUOTA PERIOD" or "max
PERIOD") and cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none), in this process's
cgroup and every cgroup above it up to the mount (a parent's limit binds its children too).
Paths come from /proc/self/cgroup and /proc/self/mountinfo. Everything is read below `root`
(the file system's root; a test gives another), and every reader returns None where the OS
does not tell: nothing here guesses.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MAX_CGROUP_FILE_BYTES = 1 << 16  # /proc/self/mountinfo of a busy container host is a few kB
MAX_CGROUP_DEPTH = 64  # levels walked up from this process's cgroup to the mount
QuotaReader = Callable[[Path], "tuple[float, str] | None"]


@dataclass(frozen=True, kw_only=True)
class CpuBudget:
    """The machine's physical cores, the affinity set and the cgroup quota; `usable` is the
    smallest, the threads ggprof runs (one per physical core, as llama.cpp advises)."""

    physical_cores: int
    logical_cores: int
    affinity: tuple[int, ...] | None = None  # logical CPUs this process may run on
    affinity_cores: int | None = None  # physical cores among them (topology), None where unknown
    quota_cpus: float | None = None  # CPU time per wall second the cgroup allows, None: no quota
    quota_source: str | None = None  # which file said so, with its text

    @property
    def affinity_limit(self) -> int | None:
        """Physical cores of the affinity set (its CPUs where the topology is unknown); None when
        the affinity set holds every CPU of the machine (it limits nothing)."""
        if self.affinity is None or len(self.affinity) >= self.logical_cores:
            return None
        if self.affinity_cores is not None:
            return self.affinity_cores
        return min(len(self.affinity), self.physical_cores)

    @property
    def quota_limit(self) -> int | None:
        """Whole CPUs of the quota (at least 1): threads beyond it are throttled in turn, which
        stalls llama.cpp's spinning threads and stretches a bandwidth pass."""
        if self.quota_cpus is None:
            return None
        return max(1, math.floor(self.quota_cpus + 1e-9))

    @property
    def usable(self) -> int:
        limits = [self.physical_cores] + [x for x in (self.affinity_limit, self.quota_limit) if x is not None]
        return max(1, min(limits))

    @property
    def limited_by(self) -> str:
        """What sets `usable`: "physical cores", "CPU affinity", "cgroup quota" (or both)."""
        usable = self.usable
        if usable >= self.physical_cores:
            return "physical cores"
        limits = (("CPU affinity", self.affinity_limit), ("cgroup quota", self.quota_limit))
        named = [name for name, limit in limits if limit == usable]
        return " and ".join(named) or "physical cores"

    def describe(self) -> str:
        """`2 of 16 physical cores usable (limited by the cgroup quota: 2 CPUs, cpu.max ...)`."""
        parts = [f"affinity {cpu_list(self.affinity)}" if self.affinity is not None else "affinity unknown"]
        parts.append(f"quota {self.quota_cpus:g} CPUs ({self.quota_source})" if self.quota_cpus else "no CPU quota")
        return (
            f"{self.usable} of {self.physical_cores} physical cores usable, limited by {self.limited_by} "
            f"({'; '.join(parts)})"
        )


def read_budget(physical_cores: int, logical_cores: int, root: Path | None = None) -> CpuBudget:
    """This process's CPU budget; `root` replaces / for every file read (tests)."""
    base = root if root is not None else Path("/")
    affinity = _affinity() if root is None else _fake_affinity(base)
    quota = cgroup_quota(base)
    return CpuBudget(
        physical_cores=max(physical_cores, 1),
        logical_cores=max(logical_cores, 1),
        affinity=affinity,
        affinity_cores=_cores_of(affinity, base) if affinity is not None else None,
        quota_cpus=quota[0] if quota else None,
        quota_source=quota[1] if quota else None,
    )


def _affinity() -> tuple[int, ...] | None:
    """The CPUs the OS lets this process run on (Linux: sched_getaffinity; Windows and FreeBSD
    through psutil); None where the OS does not tell (macOS has no affinity sets)."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return tuple(sorted(os.sched_getaffinity(0)))
        except OSError:
            return None
    try:
        import psutil

        cpus = psutil.Process().cpu_affinity()
    except (AttributeError, OSError, NotImplementedError):
        return None
    return tuple(sorted(cpus)) if cpus else None


def _fake_affinity(root: Path) -> tuple[int, ...] | None:
    """A test root's affinity set: `affinity` beside its proc/ and sys/, as a CPU list."""
    text = _read(root / "affinity")
    return tuple(sorted(parse_cpu_list(text))) if text else None


def parse_cpu_list(text: str) -> set[int]:
    """`0-3,8,10-11` (the kernel's CPU list format) -> {0, 1, 2, 3, 8, 10, 11}; bounded."""
    cpus: set[int] = set()
    for part in text.strip().split(",")[:4096]:
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            continue
        first, last = int(lo), int(hi) if sep else int(lo)
        if last - first > 65536 or last >= 1 << 20:
            continue
        cpus.update(range(first, last + 1))
    return cpus


def _cores_of(cpus: tuple[int, ...], root: Path) -> int | None:
    """Distinct physical cores (package, core id) among `cpus`, from sysfs; None if unreadable."""
    cores = set()
    for cpu in cpus:
        topo = root / "sys/devices/system/cpu" / f"cpu{cpu}" / "topology"
        package, core = _read(topo / "physical_package_id"), _read(topo / "core_id")
        if package is None or core is None:
            return None
        cores.add((package, core))
    return len(cores) or None


def cgroup_quota(root: Path) -> tuple[float, str] | None:
    """The tightest CPU quota over this process's cgroup and its parents: (CPUs, where it was
    read). cgroup v2 first, then v1's cpu controller; None where no quota is set or readable."""
    cgroups = _read(root / "proc/self/cgroup")
    if cgroups is None:
        return None
    mounts = _mounts(root)
    found: list[tuple[float, str]] = []
    for line in cgroups.splitlines()[:64]:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            mount = mounts.get("cgroup2")
            if mount is not None:
                found += _walk(root, mount, path, _v2_quota)
        elif "cpu" in controllers.split(","):
            mount = mounts.get("cpu")
            if mount is not None:
                found += _walk(root, mount, path, _v1_quota)
    return min(found) if found else None


def _mounts(root: Path) -> dict[str, Path]:
    """Where the cgroup2 hierarchy and v1's cpu controller are mounted (/proc/self/mountinfo)."""
    out: dict[str, Path] = {}
    text = _read(root / "proc/self/mountinfo") or ""
    for line in text.splitlines()[:4096]:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if len(after) < 3:
            continue
        fstype, options = after[0], after[2].split(",")
        point = Path(fields[4].replace("\\040", " "))
        if fstype == "cgroup2":
            out.setdefault("cgroup2", point)
        elif fstype == "cgroup" and "cpu" in options:
            out.setdefault("cpu", point)
    return out


def _walk(root: Path, mount: Path, path: str, reader: QuotaReader) -> list[tuple[float, str]]:
    """The quota at this process's cgroup and each parent up to the mount. Inside a container
    that shows its host's path (no cgroup namespace), the mount itself is the container's."""
    here = root / mount.relative_to("/") if mount.is_absolute() else root / mount
    rel = Path(path.strip().lstrip("/")) if path.strip() not in ("", "/") else Path()
    start = here / rel if (here / rel).is_dir() else here
    found = []
    level = start
    for _ in range(MAX_CGROUP_DEPTH):
        quota = reader(level)
        if quota is not None:
            found.append((quota[0], f"{quota[1]} in {_shown(level, root)}"))
        if level == here or here not in level.parents:
            break
        level = level.parent
    return found


def _v2_quota(level: Path) -> tuple[float, str] | None:
    text = _read(level / "cpu.max")
    if not text:
        return None
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max" or not (parts[0].isdigit() and parts[1].isdigit()) or parts[1] == "0":
        return None
    return int(parts[0]) / int(parts[1]), f"cpu.max {text.strip()}"


def _v1_quota(level: Path) -> tuple[float, str] | None:
    quota, period = _read(level / "cpu.cfs_quota_us"), _read(level / "cpu.cfs_period_us")
    if not quota or not period or not quota.isdigit() or not period.isdigit() or period == "0":
        return None  # "-1": no quota
    return int(quota) / int(period), f"cpu.cfs_quota_us {quota} / cpu.cfs_period_us {period}"


def _shown(level: Path, root: Path) -> str:
    try:
        return "/" + str(level.relative_to(root))
    except ValueError:
        return str(level)


def cpu_list(cpus: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> `0-2,5` (the kernel's format)."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def _read(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(MAX_CGROUP_FILE_BYTES).strip()
    except OSError:
        return None

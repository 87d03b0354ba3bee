"""What the OS says about this machine: CPU, cores, caches, SIMD, NUMA, RAM, swap.

Each reader returns None (or an empty value) when the OS does not tell; nothing here
measures or guesses.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ggprof.machine.cpus import CpuBudget, read_budget
from ggprof.machine.tools import run_tool

# Where the OS's files are read from (/proc, /sys): None is the real root; a test gives a
# folder that stands in for it (a container's cgroup quota, an affinity set).
SYSTEM_ROOT: Path | None = None

# SIMD features that matter to llama.cpp's CPU kernels, by the names the OS uses.
SIMD_FLAGS = {
    "sse3": "SSE3", "ssse3": "SSSE3", "sse4_2": "SSE4.2", "avx": "AVX", "avx2": "AVX2",
    "fma": "FMA", "f16c": "F16C", "avx512f": "AVX512F", "avx512bw": "AVX512BW",
    "avx512vl": "AVX512VL", "avx512_vnni": "AVX512_VNNI", "avx_vnni": "AVX_VNNI",
    "avx512_bf16": "AVX512_BF16", "amx_int8": "AMX_INT8", "amx_bf16": "AMX_BF16",
    "asimd": "NEON", "neon": "NEON", "asimddp": "DOTPROD", "i8mm": "I8MM", "sve": "SVE",
    "sve2": "SVE2", "fphp": "FP16", "asimdhp": "FP16",
    "FEAT_DotProd": "DOTPROD", "FEAT_I8MM": "I8MM", "FEAT_FP16": "FP16", "FEAT_BF16": "BF16",
    "AdvSIMD": "NEON",
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class HostFacts:
    """OS-reported facts about this host (source: os)."""

    cpu_model: str
    cpu_vendor: str | None
    machine: str
    os: str
    physical_cores: int
    logical_cores: int
    performance_cores: int | None
    efficiency_cores: int | None
    freq_max_mhz: float | None
    freq_current_mhz: float | None
    l2_bytes: int | None
    l3_bytes: int | None
    simd: tuple[str, ...]
    numa_nodes: int | None
    ram_total_bytes: int
    ram_available_bytes: int
    swap_total_bytes: int
    swap_used_bytes: int
    governor: str | None
    notes: tuple[str, ...] = field(default=())
    cpus: CpuBudget | None = None  # the affinity set and cgroup quota (None: all the cores)

    @property
    def llc_bytes(self) -> int | None:
        return self.l3_bytes or self.l2_bytes

    @property
    def usable_cores(self) -> int:
        """The physical cores this process may really use: the machine's, its affinity set's
        and its cgroup quota's, whichever is smallest (ggprof.machine.cpus)."""
        return min(self.cpus.usable, self.physical_cores) if self.cpus else self.physical_cores

    @property
    def default_threads(self) -> int:
        """The threads llama.cpp and the bandwidth kernels get: one per usable physical core,
        performance cores only where the machine has efficiency cores (what llama-bench uses)."""
        return max(min(self.usable_cores, self.physical_cores - (self.efficiency_cores or 0)), 1)


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text(errors="replace").strip()
    except OSError:
        return None


def _sysctl(name: str) -> str | None:
    out = run_tool(["sysctl", "-n", name])
    return out.strip() if out else None


def gather_facts() -> HostFacts:
    system = platform.system()
    cpuinfo = _read("/proc/cpuinfo") or ""
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    logical = psutil.cpu_count(logical=True) or 1
    physical = psutil.cpu_count(logical=False) or logical
    p_cores, e_cores = _hybrid_cores(system)
    clock = cpu_clock()
    l2, l3 = _caches(system)
    return HostFacts(
        cpu_model=_cpu_model(system, cpuinfo),
        cpu_vendor=_cpuinfo_field(cpuinfo, "vendor_id")
        or ("Apple" if system == "Darwin" and platform.machine() == "arm64" else None),
        machine=platform.machine(),
        os=platform.platform(),
        physical_cores=physical,
        logical_cores=logical,
        performance_cores=p_cores,
        efficiency_cores=e_cores,
        freq_max_mhz=clock.max_mhz,
        freq_current_mhz=clock.current_mhz,
        l2_bytes=l2,
        l3_bytes=l3,
        simd=_simd(system, cpuinfo),
        numa_nodes=_numa_nodes(),
        ram_total_bytes=int(vm.total),
        ram_available_bytes=int(vm.available),
        swap_total_bytes=int(swap.total),
        swap_used_bytes=int(swap.used),
        governor=_read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        cpus=read_budget(physical, logical, root=SYSTEM_ROOT),
    )


def _cpuinfo_field(cpuinfo: str, name: str) -> str | None:
    m = re.search(rf"^{re.escape(name)}\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    return m[1].strip() if m else None


def _cpu_model(system: str, cpuinfo: str) -> str:
    if system == "Darwin":
        return _sysctl("machdep.cpu.brand_string") or platform.processor() or "unknown CPU"
    for name in ("model name", "Model", "Hardware", "Processor", "cpu model"):
        value = _cpuinfo_field(cpuinfo, name)
        if value:
            return value
    return platform.processor() or "unknown CPU"


@dataclass(frozen=True)
class CpuClock:
    """The CPU clock the OS reports, MHz (None where it does not tell)."""

    current_mhz: float | None
    max_mhz: float | None


def cpu_clock() -> CpuClock:
    try:
        f = psutil.cpu_freq()
    except (OSError, NotImplementedError, RuntimeError):
        return CpuClock(None, None)
    if f is None:
        return CpuClock(None, None)
    return CpuClock(f.current or None, f.max or None)


def _hybrid_cores(system: str) -> tuple[int | None, int | None]:
    """Performance / efficiency core counts where the OS tells (Intel hybrid, Apple)."""
    if system == "Darwin":
        p, e = _sysctl("hw.perflevel0.physicalcpu"), _sysctl("hw.perflevel1.physicalcpu")
        return (int(p) if p and p.isdigit() else None), (int(e) if e and e.isdigit() else None)
    core, atom = _read("/sys/devices/cpu_core/cpus"), _read("/sys/devices/cpu_atom/cpus")
    if core is None or atom is None:
        return None, None
    return _count_cpu_list(core), _count_cpu_list(atom)


def _count_cpu_list(text: str) -> int:
    n = 0
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            n += int(hi) - int(lo) + 1
        elif part.strip():
            n += 1
    return n


def _parse_size(text: str) -> int | None:
    m = re.match(r"^\s*(\d+)\s*([KMG]?)", text)
    if not m:
        return None
    return int(m[1]) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m[2]]


def _caches(system: str) -> tuple[int | None, int | None]:
    """Total L2 and L3 bytes across distinct cache instances."""
    if system == "Darwin":
        l2 = _sysctl("hw.perflevel0.l2cachesize") or _sysctl("hw.l2cachesize")
        l3 = _sysctl("hw.l3cachesize")
        return (int(l2) if l2 and l2.isdigit() else None), (int(l3) if l3 and l3.isdigit() and l3 != "0" else None)
    totals: dict[int, int] = {}
    seen: set[tuple[int, str]] = set()
    for index in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cache/index[0-9]*"):
        level, ctype = _read(index / "level"), _read(index / "type")
        size, shared = _read(index / "size"), _read(index / "shared_cpu_list")
        if not (level and size and level.isdigit()) or ctype == "Instruction":
            continue
        key = (int(level), shared or str(index))
        if key in seen:
            continue
        seen.add(key)
        totals[int(level)] = totals.get(int(level), 0) + (_parse_size(size) or 0)
    return totals.get(2), totals.get(3)


def _simd(system: str, cpuinfo: str) -> tuple[str, ...]:
    words: set[str] = set()
    for name in ("flags", "Features"):
        value = _cpuinfo_field(cpuinfo, name)
        if value:
            words.update(value.split())
    if system == "Darwin":
        out = run_tool(["sysctl", "hw.optional"]) or ""
        for line in out.splitlines():
            key, _, val = line.partition(":")
            if val.strip() == "1":
                words.add(key.strip().rsplit(".", 1)[-1])
        if platform.machine() == "arm64":
            words.add("neon")
    return tuple(sorted({SIMD_FLAGS[w] for w in words if w in SIMD_FLAGS}))


def _numa_nodes() -> int | None:
    nodes = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    return len(nodes) or None


def page_cache_resident_fraction(path: str | os.PathLike[str]) -> float | None:
    """The fraction of a file's pages already in the page cache (mincore), or None if unknown."""
    import ctypes
    import mmap

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        size = os.path.getsize(path)
        if size == 0 or not hasattr(libc, "mincore"):
            return None
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        n_pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * n_pages)()
        with open(path, "rb") as f:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                rc = libc.mincore(addr, size, vec)
            finally:
                libc.munmap(addr, size)
        if rc != 0:
            return None
        return sum(b & 1 for b in vec) / n_pages
    except (OSError, ValueError, AttributeError, TypeError):  # no libc mmap/mincore (Windows)
        return None

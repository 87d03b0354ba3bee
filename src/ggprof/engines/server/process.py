"""A server on this machine, seen through its process: which GPU libraries it mapped, its
-ngl and -t (psutil: the process listening on the port, its command line and memory maps)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from ggprof.engines.server.client import Endpoint
from ggprof.runfacts import DRAFTING, facts_from_argv
from ggprof.units import clean_name

if TYPE_CHECKING:
    from ggprof.machine.facts import HostFacts

# shared libraries a process maps when a backend is live in it (/proc/PID/maps)
GPU_LIBRARIES = (
    ("libggml-cuda", "cuda"),
    ("libcuda.so", "cuda"),
    ("libggml-hip", "rocm"),
    ("libamdhip64", "rocm"),
    ("libggml-vulkan", "vulkan"),
    ("libvulkan", "vulkan"),
    ("libggml-metal", "metal"),
    ("libggml-sycl", "sycl"),
)


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a server runs its model, as far as can be seen from here."""

    backends_used: tuple[str, ...]  # "gpu" where only "a GPU" is known (filled in by the engine)
    gpu_fraction: float | None = None  # share of the model on the GPU (Ollama's size_vram / size)
    n_gpu_layers: int | None = None  # -ngl, when the command line says
    n_threads: int | None = None
    slots: int | None = None
    evidence: str = ""
    drafting: tuple[tuple[str, Any], ...] = ()  # how its command line says it drafts (ggprof.runfacts.DRAFTING)


def listening_process(endpoint: Endpoint) -> psutil.Process | None:
    """The local process listening on the endpoint's port (None: none this user may see)."""
    try:
        pid = next(
            c.pid
            for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == endpoint.port and c.pid
        )
        return psutil.Process(pid)
    except (StopIteration, psutil.Error, OSError):
        return None


def command_line_of(endpoint: Endpoint) -> tuple[list[str], Path | None] | None:
    """The command line of the local server on the endpoint's port and its program's file (None
    where the process cannot be seen: another user's, a container's, a remote server)."""
    proc = listening_process(endpoint)
    if proc is None:
        return None
    try:
        cmdline = proc.cmdline()
    except (psutil.Error, OSError):
        return None
    exe = None
    with contextlib.suppress(psutil.Error, OSError):
        exe = Path(proc.exe()) if proc.exe() else None
    return cmdline, exe


def local_process(endpoint: Endpoint) -> Placement | None:
    """The local process listening on the port: the GPU libraries it mapped, its -ngl and -t."""
    proc = listening_process(endpoint)
    if proc is None:
        return None
    try:
        pid, cmdline = proc.pid, proc.cmdline()
    except (psutil.Error, OSError):
        return None
    libs: set[str] = set()
    with contextlib.suppress(psutil.Error, OSError):
        for m in proc.memory_maps(grouped=True):
            name = Path(m.path).name
            libs.update(b for key, b in GPU_LIBRARIES if name.startswith(key))
    ngl = dict(facts_from_argv(cmdline, ("n_gpu_layers",))).get("n_gpu_layers")
    threads = threads_of(cmdline)
    drafting = facts_from_argv(cmdline, DRAFTING)
    program = clean_name(Path(cmdline[0]).name if cmdline else "?", 60)
    if not libs or ngl == 0:
        why = "no GPU library mapped" if not libs else "-ngl 0"
        return Placement(
            backends_used=("cpu",),
            n_gpu_layers=0,
            n_threads=threads,
            evidence=f"process {pid} ({program}): {why}",
            drafting=drafting,
        )
    used = tuple(sorted(libs))
    return Placement(
        backends_used=used,
        n_gpu_layers=ngl,
        n_threads=threads,
        evidence=f"process {pid} ({program}) mapped {', '.join(used).upper()} libraries; "
        f"-ngl {ngl if ngl is not None else 'default'}",
        drafting=drafting,
    )


def threads_of(cmdline: list[str]) -> int | None:
    """The -t a llama.cpp server was started with; None where it gave none, or one llama.cpp
    itself would not run (above GGML_MAX_N_THREADS; -1 is its default, the physical cores)."""
    return dict(facts_from_argv(cmdline, ("n_threads",))).get("n_threads")  # the table's bounds: 1..GGML_MAX_N_THREADS


def llama_cpp_default_threads(facts: HostFacts) -> int:
    """The threads a llama.cpp server started without -t runs: the machine's physical
    (performance) cores, whatever its affinity set or cgroup quota (llama.cpp's
    cpu_get_num_math reads the topology, not the process's limits)."""
    return max(facts.physical_cores - (facts.efficiency_cores or 0), 1)

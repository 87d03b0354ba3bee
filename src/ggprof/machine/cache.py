"""Host measurements cached per host fingerprint, so later commands reuse them."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ggprof.errors import BadInputError
from ggprof.files import read_text
from ggprof.machine.facts import HostFacts
from ggprof.machine.measurements import READ_KERNELS, BandwidthMeasurement, KernelResult, SgemmMeasurement
from ggprof.paths import cache_dir

# 2: worker-timed passes on private huge-page arrays, a one-thread read beside each figure, the
# usable cores in the fingerprint; figures of version 1 (timed by the main thread) are never reused
# 3: read by the fastest of the read kernels (measurements.READ_KERNELS); version 2's figures were
# read by the bitwise-or alone, 0.7x of memory on some CPUs, and are measured again
CACHE_VERSION = 3
MAX_CACHE_BYTES = 1 << 20


def fingerprint(facts: HostFacts) -> str:
    """Same hardware, same OS image -> same key; a RAM or CPU change -> a new one."""
    key = "|".join(
        [
            platform.node(),
            facts.cpu_model,
            facts.machine,
            str(facts.physical_cores),
            str(facts.logical_cores),
            str(facts.usable_cores),  # a container's quota or an affinity set: its own figure
            str(round(facts.ram_total_bytes / 2**30)),
        ]
    )
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def cache_path(facts: HostFacts) -> Path:
    return cache_dir() / f"host-{fingerprint(facts)}.json"


def save(facts: HostFacts, bandwidth: BandwidthMeasurement, sgemm: SgemmMeasurement) -> Path:
    path = cache_path(facts)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "version": CACHE_VERSION,
        "measured_at": time.time(),
        "fingerprint": fingerprint(facts),
        "bandwidth": asdict(bandwidth),
        "sgemm": asdict(sgemm),
    }
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(payload, indent=1))
    tmp.replace(path)
    return path


def load(facts: HostFacts) -> tuple[BandwidthMeasurement, SgemmMeasurement, float] | None:
    """The cached measurement and when it was taken; None when absent, unreadable or invalid
    (a file that is not a regular one, not JSON, from another version, or with figures no
    measurement gives): the caller then measures again."""
    try:
        data = json.loads(read_text(cache_path(facts), MAX_CACHE_BYTES))
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return None
        measured_at = float(data["measured_at"])
        if not (math.isfinite(measured_at) and 0 < measured_at <= time.time() + 86400):
            return None
        return _bandwidth(data["bandwidth"]), _sgemm(data["sgemm"]), measured_at
    except (BadInputError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def _samples(values: object) -> tuple[float, ...]:
    """Measured rates: a non-empty list of finite positive numbers (ValueError otherwise)."""
    if not isinstance(values, list) or not values or len(values) > 1000:
        raise ValueError("samples")
    out = tuple(float(x) for x in values if not isinstance(x, bool))
    if len(out) != len(values) or not all(math.isfinite(x) and x > 0 for x in out):
        raise ValueError("samples")
    return out


def _positive_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError("count")
    return value


def _kernel(d: dict[str, Any]) -> KernelResult:
    return KernelResult(str(d["name"]), _samples(d["samples_bytes_per_s"]))


def _read_kernel(name: object) -> str:
    if not isinstance(name, str) or name not in READ_KERNELS:
        raise ValueError("read_kernel")
    return name


def _bandwidth(d: dict[str, Any]) -> BandwidthMeasurement:
    bw = BandwidthMeasurement(
        read=_kernel(d["read"]),
        copy=_kernel(d["copy"]),
        triad=_kernel(d["triad"]),
        threads=_positive_int(d["threads"]),
        array_bytes=_positive_int(d["array_bytes"]),
        repetitions=_positive_int(d["repetitions"]),
        elapsed_s=float(d["elapsed_s"]),
        notes=tuple(str(n) for n in d.get("notes", ())),
        sessions=_positive_int(d.get("sessions", 1)),
        read_one_thread=_kernel(d["read_one_thread"]) if d.get("read_one_thread") is not None else None,
        read_kernel=_read_kernel(d["read_kernel"]),
    )
    if not bw.first_run_reads:  # more refining rounds than its reads can hold
        raise ValueError("sessions")
    return bw


def _sgemm(d: dict[str, Any]) -> SgemmMeasurement:
    flops = float(d["flops_per_s"])
    if not (math.isfinite(flops) and flops > 0):
        raise ValueError("flops")
    return SgemmMeasurement(flops, _positive_int(d["n"]), _samples(d["samples_flops_per_s"]))

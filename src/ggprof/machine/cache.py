"""Host measurements cached per host fingerprint, so later commands reuse them."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ggprof.machine.facts import HostFacts
from ggprof.machine.stream import BandwidthMeasurement, KernelResult, SgemmMeasurement
from ggprof.paths import cache_dir

CACHE_VERSION = 1


def fingerprint(facts: HostFacts) -> str:
    """Same hardware, same OS image -> same key; a RAM or CPU change -> a new one."""
    key = "|".join(
        [
            platform.node(),
            facts.cpu_model,
            facts.machine,
            str(facts.physical_cores),
            str(facts.logical_cores),
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
    """The cached measurement and when it was taken; None when absent or unreadable."""
    try:
        data = json.loads(cache_path(facts).read_text())
        if data.get("version") != CACHE_VERSION:
            return None
        return _bandwidth(data["bandwidth"]), _sgemm(data["sgemm"]), float(data["measured_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _kernel(d: dict[str, Any]) -> KernelResult:
    return KernelResult(str(d["name"]), tuple(float(x) for x in d["samples_bytes_per_s"]))


def _bandwidth(d: dict[str, Any]) -> BandwidthMeasurement:
    return BandwidthMeasurement(
        read=_kernel(d["read"]),
        copy=_kernel(d["copy"]),
        triad=_kernel(d["triad"]),
        threads=int(d["threads"]),
        array_bytes=int(d["array_bytes"]),
        repetitions=int(d["repetitions"]),
        elapsed_s=float(d["elapsed_s"]),
        notes=tuple(d.get("notes", ())),
    )


def _sgemm(d: dict[str, Any]) -> SgemmMeasurement:
    return SgemmMeasurement(float(d["flops_per_s"]), int(d["n"]), tuple(float(x) for x in d["samples_flops_per_s"]))

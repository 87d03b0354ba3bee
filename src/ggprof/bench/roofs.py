"""Compute roofs measured on this host: the thread probe of each `ggprof profile` run (the same
decode at fewer threads), kept per host and model shape, so that `check`, `predict` and `fit`
judge and predict a CPU decode with the roof `profile` measured, not with bandwidth alone.

One file per host fingerprint in the cache folder; a model is keyed by its shape (architecture,
parameters, tensor bytes, bytes a token reads): the same GGUF under another name, or a copy,
finds its roof. Every entry is checked when read; a damaged file means no roof (the commands
then say they judged on bandwidth alone).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ggprof.bench.results import ThreadProbe
from ggprof.errors import BadInputError
from ggprof.files import read_text
from ggprof.model.spec import ModelSpec
from ggprof.paths import cache_dir

ROOFS_VERSION = 1
MAX_ROOFS_BYTES = 1 << 20
MAX_ROOFS = 512  # entries kept per host, the newest
MAX_THREADS = 4096


@dataclass(frozen=True, kw_only=True)
class StoredRoof:
    """A thread probe measured by `ggprof profile` here, and the run it was measured beside."""

    probe: ThreadProbe
    run_threads: int  # the threads of the decode the probe was measured for
    depth: int
    measured_at: float
    model_name: str
    others_cpu_percent: float | None = None  # other processes' CPU use while it was measured (None: not known)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.measured_at))
        busy = (
            f", other processes taking {self.others_cpu_percent:.0f}% of the CPU"
            if self.others_cpu_percent is not None
            else ""
        )
        return (
            f"measured by `ggprof profile` on {when} (depth {self.depth:,}, a run on {self.run_threads} threads{busy})"
        )


def shape_key(spec: ModelSpec) -> str:
    """The model's shape: what its decode costs a CPU, whatever the file is called."""
    key = "|".join(
        str(x)
        for x in (spec.architecture, spec.n_params, spec.tensor_bytes, spec.decode_bytes_per_token, spec.n_experts)
    )
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def roofs_path(fingerprint: str) -> Path:
    return cache_dir() / f"roofs-{fingerprint}.json"


def save(
    fingerprint: str,
    spec: ModelSpec,
    depth: int,
    run_threads: int,
    probe: ThreadProbe,
    others_cpu_percent: float | None = None,
) -> None:
    """Keep a probe (the newest for its model, depth and threads replaces the older), with the
    share of the CPU other processes took while it ran; OSError when the cache folder cannot be
    written."""
    entries = [e for e in _entries(fingerprint) if not _same(e, spec, depth, run_threads)]
    entries.append(
        {
            "model": shape_key(spec),
            "model_name": spec.path.name[:200],
            "depth": depth,
            "run_threads": run_threads,
            "probe_threads": probe.n_threads,
            "n_gen": probe.n_gen,
            "samples_ns": list(probe.samples_ns),
            "measured_at": time.time(),
            "others_cpu_percent": others_cpu_percent,
        }
    )
    path = roofs_path(fingerprint)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"version": ROOFS_VERSION, "roofs": entries[-MAX_ROOFS:]}))
    tmp.replace(path)


def load(
    fingerprint: str, spec: ModelSpec, depth: int, exact: bool = True, max_others_percent: float | None = None
) -> StoredRoof | None:
    """The newest roof kept for this model at `depth` (or, not `exact`, at the deepest depth
    not beyond it: attention only adds work with depth, so a shallower roof is a ceiling);
    with `max_others_percent`, only one measured while other processes took at most that
    share of the CPU (a roof measured on a busy machine reads low)."""
    key = shape_key(spec)
    found = []
    for e in _entries(fingerprint):
        roof = _roof(e) if e.get("model") == key else None
        if roof is None or not (roof.depth == depth if exact else roof.depth <= depth):
            continue
        busy = roof.others_cpu_percent
        if max_others_percent is not None and busy is not None and busy > max_others_percent:
            continue
        found.append(roof)
    return max(found, key=lambda r: (r.depth, r.measured_at), default=None)


def _same(e: dict[str, Any], spec: ModelSpec, depth: int, run_threads: int) -> bool:
    return e.get("model") == shape_key(spec) and e.get("depth") == depth and e.get("run_threads") == run_threads


def _entries(fingerprint: str) -> list[dict[str, Any]]:
    """The file's entries that are objects; none when it is absent, damaged or of another version."""
    with contextlib.suppress(BadInputError, OSError, ValueError, RecursionError):
        data = json.loads(read_text(roofs_path(fingerprint), MAX_ROOFS_BYTES))
        if isinstance(data, dict) and data.get("version") == ROOFS_VERSION and isinstance(data.get("roofs"), list):
            return [e for e in data["roofs"][:MAX_ROOFS] if isinstance(e, dict)]
    return []


def _roof(e: dict[str, Any]) -> StoredRoof | None:
    """An entry as a roof, or None when any field is not what `save` writes."""
    ints = [e.get(k) for k in ("depth", "run_threads", "probe_threads", "n_gen")]
    samples, at = e.get("samples_ns"), e.get("measured_at")
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ints):
        return None
    depth, run_threads, probe_threads, n_gen = (int(x) for x in ints)  # type: ignore[arg-type]
    if not (0 < probe_threads < run_threads <= MAX_THREADS and n_gen > 0):
        return None
    if not isinstance(samples, list) or not 0 < len(samples) <= 100:
        return None
    if not all(isinstance(s, int) and not isinstance(s, bool) and 0 < s < 10**13 for s in samples):
        return None
    if not isinstance(at, (int, float)) or not math.isfinite(at) or not 0 < at <= time.time() + 86400:
        return None
    busy = e.get("others_cpu_percent")
    if busy is not None and not (isinstance(busy, (int, float)) and not isinstance(busy, bool) and 0 <= busy <= 100):
        return None
    return StoredRoof(
        others_cpu_percent=float(busy) if busy is not None else None,
        probe=ThreadProbe(n_threads=probe_threads, n_gen=n_gen, samples_ns=tuple(samples)),
        run_threads=run_threads,
        depth=depth,
        measured_at=float(at),
        model_name=str(e.get("model_name", ""))[:200],
    )

"""Fit the fixed time a MoE layer adds to a token on a GPU (ggprof.physics.moe) on public rows of
mixtures of experts run wholly on one device, leaving one device out.

Each row gives `c`: its measured time less the time its dense band's midpoint allows (the backend's
speed fit for that device, with no MoE term), over its MoE layers; `c` may be below zero (a row
faster than the dense midpoint). The centre is the median over devices (a device's rows averaged
first, so a device measured ten times weighs as one); the band, the centre plus the smallest and
largest error of a device's rows predicted by the centre fitted without that device, its low end at
least 0. A row more than OUTLIER_S from the rows' median is left out and named."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from ggprof.physics.moe import MoeLayerFit

MIN_DEVICES = 3
OUTLIER_S = 2e-3  # 2 ms a layer: a row that far off is not a kernel's cost (a paging or busy machine)


@dataclass(frozen=True, kw_only=True)
class LayerRow:
    """One public row: its device, which row, the time a MoE layer added (s)."""

    device: str
    label: str
    layer_s: float


def _centre(rows: list[LayerRow]) -> float:
    by: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by[r.device].append(r.layer_s)
    return statistics.median(statistics.fmean(v) for v in by.values())


def fit_layer_cost(rows: list[LayerRow], what: str) -> MoeLayerFit | None:
    """The centre and its leave-one-device-out band (None: rows of fewer than MIN_DEVICES devices)."""
    middle = statistics.median(r.layer_s for r in rows) if rows else 0.0
    kept = [r for r in rows if abs(r.layer_s - middle) <= OUTLIER_S]
    left_out = tuple(
        f"{r.label}: {r.layer_s * 1e6:.0f} us a layer, {abs(r.layer_s - middle) * 1e3:.1f} ms off the rows' median"
        for r in rows
        if r not in kept
    )
    devices = sorted({r.device for r in kept})
    if len(devices) < MIN_DEVICES:
        return None
    errors = []
    for d in devices:
        fitted = _centre([r for r in kept if r.device != d])
        errors += [r.layer_s - fitted for r in kept if r.device == d]
    centre = _centre(kept)
    return MoeLayerFit(
        centre_s=centre,
        low_s=max(centre + min(errors), 0.0),
        high_s=max(centre + max(errors), 0.0),
        rows=len(kept),
        devices=len(devices),
        held_out_error_s=statistics.median(abs(e) for e in errors),
        what=what,
        left_out=left_out,
    )


def held_out(rows: list[LayerRow], devices: set[str], what: str) -> MoeLayerFit | None:
    """The fit made without the rows of `devices`: what a verdict on them is judged by."""
    return fit_layer_cost([r for r in rows if r.device not in devices], what)

"""Fit a placement's shares (ggprof.physics.shares) on public rows, leaving one machine out.

Each row that states the facts a part needs gives that part's share: its measured time less the
other parts at their bands' midpoints, over the part's time at full rate (`implied_share`). The
share is the geometric mean over machines (a machine's rows averaged first, so a machine measured
five times weighs as one); its band, the share times the smallest and largest error of a
machine's rows predicted by the fit made without that machine (docs/calibration.md, as the speed
fits' leave-one-device-out bands). A row more than OUTLIER_FACTOR off the rows' median share is
left out and named: a machine paging from disk would stretch the band over the runs it exists to flag."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from ggprof.physics.expected import OUTLIER_FACTOR
from ggprof.physics.shares import ShareFit, TokenParts

MIN_MACHINES = 2  # one machine's share describes that machine; a fit needs another to judge it by
# A row tells a part's share only where that part, at full rate, is at least this much of the time
# predicted (the others at their bands' midpoints): below it the other parts' bands (+-25% and
# more) swamp it, and a prompt's few copies beside its compute would imply any share at all
# (docs/calibration.md)
MIN_PART = 0.25


@dataclass(frozen=True, kw_only=True)
class ShareRow:
    """One public row's share of a part: which machine, which row, the share its time implies."""

    machine: str
    label: str
    share: float


def midpoint(low: float, high: float) -> float:
    return math.sqrt(low * high)


def told(part_s: float, other_s: float) -> bool:
    """Whether a part of `part_s` at full rate, beside the others' `other_s` at their bands'
    midpoints, is large enough for a row's time to tell its share (MIN_PART of the time predicted)."""
    return part_s > 0 and part_s >= MIN_PART * (part_s + other_s)


def implied_ram_share(parts: TokenParts, measured_s: float) -> float | None:
    """The RAM's share a decode's time implies: the RAM part over what is left of the time once
    the GPU's part is taken at its band's midpoint (None: no RAM part, one too small beside the
    GPU's to tell (MIN_PART), or nothing left)."""
    if parts.link_s > 0 or parts.gpu_band is None:
        return None
    gpu = parts.gpu_s / midpoint(parts.gpu_band.low, parts.gpu_band.high)
    rest = measured_s - gpu
    return parts.ram_s / rest if told(parts.ram_s, gpu) and rest > 0 else None


def implied_link_share(parts: TokenParts, measured_s: float, prompt: bool = False) -> float | None:
    """The link's share a spilled decode's time, or a prompt's reads over it, implies (None: no
    link part, or one too small beside the rest to tell); a spilled prompt's is the spill's share,
    another's the copies' (`parts.link_s`)."""
    if prompt:
        band = parts.prompt_band
        if band is None:
            return None
        compute = parts.prompt_compute_s / midpoint(band.low, band.high)
        rest = measured_s - compute
        return parts.prompt_link_s / rest if told(parts.prompt_link_s, compute) and rest > 0 else None
    if parts.gpu_band is None:
        return None
    gpu = parts.gpu_s / midpoint(parts.gpu_band.low, parts.gpu_band.high)
    rest = measured_s - gpu
    return parts.link_s / rest if told(parts.link_s, gpu) and rest > 0 else None


def implied_trip_s(parts: TokenParts, measured_s: float, resident_s: float, ram_share: float) -> float | None:
    """The time of one -nkvo round trip a decode's time implies beside the same run's with its cache
    on the GPU (`resident_s`, the source's pair: the GPU's own time, no band needed): the difference,
    less the cache in RAM at `ram_share` (the RAM share's midpoint), over the layers that make one
    (None: no -nkvo, a pair whose difference is within its noise, or a cache in RAM not small beside
    the trips (MIN_PART): at a depth the CPU's attention over the cache, whose share no fit holds,
    would pass for round trips)."""
    if not parts.trips or parts.link_s > 0 or ram_share <= 0:
        return None
    cache = parts.ram_s / ram_share
    rest = measured_s - resident_s - cache
    if rest <= 0 or cache > MIN_PART * rest:
        return None
    return rest / parts.trips


def _centre(rows: list[ShareRow]) -> float:
    by: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by[r.machine].append(math.log(r.share))
    return math.exp(statistics.fmean(statistics.fmean(v) for v in by.values()))


def fit_share(rows: list[ShareRow], what: str, *, as_time: bool = False) -> ShareFit | None:
    """The share and its leave-one-machine-out band (None: rows of fewer than MIN_MACHINES machines);
    `as_time`: the rows hold a time (s), not a share, none left out: a round trip's time differs by
    an order of magnitude between builds and systems (a 2026 Linux build's tens of microseconds, a
    2024 or a Windows one's hundreds), and the band must span them."""
    middle = statistics.median(r.share for r in rows) if rows else 0.0
    left_out, kept = [], []
    for r in rows:
        off = r.share / middle
        if not as_time and (off > OUTLIER_FACTOR or off < 1 / OUTLIER_FACTOR):
            left_out.append(f"{r.label}: share {r.share:.1%}, {max(off, 1 / off):.1f}x off the rows' median")
        else:
            kept.append(r)
    machines = sorted({r.machine for r in kept})
    if len(machines) < MIN_MACHINES:
        return None
    errors = []
    for m in machines:
        fitted = _centre([r for r in kept if r.machine != m])
        errors += [math.log(r.share / fitted) for r in kept if r.machine == m]
    share = _centre(kept)
    return ShareFit(
        share=share,
        low=min(share * math.exp(min(*errors, 0.0)), 1.0),
        high=min(share * math.exp(max(*errors, 0.0)), 1.0),
        rows=len(kept),
        machines=len(machines),
        held_out_error=statistics.median(abs(e) for e in errors),
        what=what,
        left_out=tuple(left_out),
    )


def held_out(rows: list[ShareRow], machine: str, what: str, *, as_time: bool = False) -> ShareFit | None:
    """The fit made without `machine`'s rows: what a verdict on that machine is judged by."""
    return fit_share([r for r in rows if r.machine != machine], what, as_time=as_time)

"""Least squares on published results: the fits of ggprof.physics.expected's speed models.

Each published result is a Point (its group, ideal time, units, GB read and measured time);
`regress_backends` fits one LinearFit per backend (benchmarks/calibrate.py writes them to
speed-fits.json beside this package's loader)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ggprof.physics.expected import ALL, OUTLIER_FACTOR, QUANTILES, LinearFit
from ggprof.stats import percentile

MIN_OWN_SPREAD_ROWS = 12  # fewer rows: a backend takes the mean spread of the backends with more
MIN_FIT_DEVICES = 3  # a fit on one or two devices describes those devices, not the backend: none


@dataclass(frozen=True, kw_only=True)
class Point:
    """One published result: its group, ideal time, units (layers or 1), GB read, measured time."""

    group: str
    ideal_s: float
    units: float
    measured_s: float
    device: str
    gb: float = 0.0
    arch: str | None = None
    label: str = ""  # which result (named when it is left out of a fit)


def _bounded_lstsq(a: Any, bounds: list[float]) -> list[float]:
    """Least squares of a @ x = 1 with x_i >= bounds_i: a coefficient past its bound is pinned
    there and the rest refitted."""
    import numpy as np

    y = np.ones(a.shape[0])
    fixed: dict[int, float] = {}
    for _ in range(len(bounds)):
        free = [i for i in range(len(bounds)) if i not in fixed]
        rest = y - sum((a[:, i] * v for i, v in fixed.items()), np.zeros(a.shape[0]))
        coef = np.linalg.lstsq(a[:, free], rest, rcond=None)[0] if free else []
        bad = [(i, float(c)) for i, c in zip(free, coef, strict=True) if c < bounds[i]]
        if not bad:
            values = {**{i: float(c) for i, c in zip(free, coef, strict=True)}, **fixed}
            return [values[i] for i in range(len(bounds))]
        i, _ = min(bad, key=lambda ic: ic[1] - bounds[ic[0]])
        fixed[i] = bounds[i]
    return [fixed[i] for i in range(len(bounds))]


def regress(backend: str, kind: str, points: list[Point], by_arch: bool = False, constants: bool = True) -> LinearFit:
    """Least squares on relative error (each row divided by its measured time, so every result
    weighs the same whatever its speed), read factors >= 1 (at most the ceiling), constants
    >= 0 (none without `constants`). With `by_arch`, read factor = family factor x
    architecture factor, fitted by alternating the two (each step is linear); the best
    architecture's factor is 1."""
    import numpy as np

    if not points:
        raise ValueError(f"no {kind} points for {backend}")
    groups = sorted({p.group for p in points})
    archs = sorted({p.arch or ALL for p in points}) if by_arch else []
    per_gb = kind == "decode"
    n_const = (2 if per_gb else 1) if constants else 0
    fam = {g: 1.0 for g in groups}
    arch = {a: 1.0 for a in archs}
    c = k = 0.0

    def consts(p: Point) -> list[float]:
        return ([p.units / p.measured_s] + ([p.gb / p.measured_s] if per_gb else []))[:n_const]

    def split(x: list[float], n: int) -> tuple[float, float]:
        rest = [*x[n:], 0.0, 0.0]
        return rest[0], rest[1] if per_gb else 0.0

    for _ in range(30 if by_arch else 1):
        m = np.array(
            [
                [(p.ideal_s * arch.get(p.arch or ALL, 1.0) if p.group == g else 0.0) / p.measured_s for g in groups]
                + consts(p)
                for p in points
            ]
        )
        x = _bounded_lstsq(m, [1.0 / min(arch.values(), default=1.0)] * len(groups) + [0.0] * n_const)
        fam = dict(zip(groups, x[: len(groups)], strict=True))
        c, k = split(x, len(groups))
        if not by_arch:
            break
        m = np.array(
            [
                [(p.ideal_s * fam[p.group] if (p.arch or ALL) == a else 0.0) / p.measured_s for a in archs] + consts(p)
                for p in points
            ]
        )
        x = _bounded_lstsq(m, [1.0 / min(fam.values())] * len(archs) + [0.0] * n_const)
        arch = dict(zip(archs, x[: len(archs)], strict=True))
        c, k = split(x, len(archs))
        s = min(arch.values())
        arch = {a: v / s for a, v in arch.items()}
        fam = {g: v * s for g, v in fam.items()}
    fit = LinearFit(
        backend=backend,
        kind=kind,
        read_factor=fam,
        per_unit_s=c,
        per_gb_s=k,
        arch_factor=arch,
        residual_low=0.0,
        residual_high=0.0,
        spread_source="own",
        n=len(points),
        devices=len({p.device for p in points}),
        median_error=0.0,
        level_devices=_level_devices(points, kind, by_arch),
    )
    res = residuals(fit, points)
    return replace(
        fit,
        residual_low=percentile(res, QUANTILES[0]),
        residual_high=percentile(res, QUANTILES[1]),
        median_error=percentile([abs(math.exp(r) - 1) for r in res], 0.5),
    )


def _level_devices(points: list[Point], kind: str, by_arch: bool) -> dict[str, int]:
    """How many devices each architecture (or vendor) factor rests on: decode's architectures
    when fitted by them, prefill's groups (architectures or vendors) always."""
    if kind == "decode" and not by_arch:
        return {}
    out: dict[str, set[str]] = {}
    for p in points:
        out.setdefault((p.arch or ALL) if kind == "decode" else p.group, set()).add(p.device)
    return {k: len(v) for k, v in sorted(out.items())}


def residuals(fit: LinearFit, points: list[Point]) -> list[float]:
    """ln(measured speed / predicted speed) of each point."""
    return [
        math.log(fit.predicted_s(p.group, p.ideal_s, p.units, p.gb, p.arch or ALL)[0] / p.measured_s) for p in points
    ]


def inliers(fit: LinearFit, points: list[Point]) -> list[Point]:
    """The points within OUTLIER_FACTOR of the fit's median residual."""
    res = residuals(fit, points)
    mid = percentile(res, 0.5)
    return [p for p, r in zip(points, res, strict=True) if abs(r - mid) <= math.log(OUTLIER_FACTOR)]


def regress_backends(kind: str, points: dict[str, list[Point]], by_arch: bool = False) -> dict[str, LinearFit]:
    """One fit per backend with rows from at least MIN_FIT_DEVICES devices (else none: the
    backend keeps its own band). A backend with few rows gets one factor per group and no
    constant (more parameters would only replay its rows), no fit by architecture, and the
    mean residual spread of the backends with rows enough for their own. A row more than
    OUTLIER_FACTOR off the first fit is left out of the refit and its spread, and named in
    `left_out`."""
    points = {b: pts for b, pts in points.items() if len({p.device for p in pts}) >= MIN_FIT_DEVICES}
    if by_arch:
        points = {b: pts for b, pts in points.items() if len(pts) >= MIN_OWN_SPREAD_ROWS}
    fits: dict[str, LinearFit] = {}
    for b, pts in sorted(points.items()):
        fit = regress(b, kind, pts, by_arch, constants=len(pts) >= MIN_OWN_SPREAD_ROWS)
        kept = inliers(fit, pts)
        if len(kept) < len(pts):
            fit = replace(
                regress(b, kind, kept, by_arch, constants=len(pts) >= MIN_OWN_SPREAD_ROWS),
                left_out=tuple(p.label for p in pts if p not in kept),
            )
        points[b], fits[b] = kept, fit
    # A typical backend's spread: the mean of the 2nd and 98th percentiles of the backends with
    # rows enough for their own (row by row, the most heterogeneous backend would set it).
    own = [f for f in fits.values() if f.n >= MIN_OWN_SPREAD_ROWS] or list(fits.values())
    lo = sum(f.residual_low for f in own) / len(own) if own else 0.0
    hi = sum(f.residual_high for f in own) / len(own) if own else 0.0
    for b, fit in fits.items():
        if fit.n < MIN_OWN_SPREAD_ROWS:
            fits[b] = replace(
                fit,
                residual_low=min(lo, fit.residual_low),
                residual_high=max(hi, fit.residual_high),
                spread_source=f"the mean of the other backends' fits ({fit.n} rows here)",
            )
    return fits

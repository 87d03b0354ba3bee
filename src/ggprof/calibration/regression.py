"""Least squares on published results: the fits of ggprof.physics.expected's speed models.

Each published result is a Point (its group, ideal time, units, GB read and measured time);
`regress_backends` fits one LinearFit per backend (benchmarks/calibrate.py writes them to
speed-fits.json beside this package's loader); ggprof.calibration.levels fits what is known of
the device on top."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from ggprof.physics.expected import OUTLIER_FACTOR, QUANTILES, LinearFit
from ggprof.stats import percentile

MIN_OWN_SPREAD_ROWS = 12  # fewer rows: a backend takes the mean spread of the backends with more
MIN_CONSTANT_ROWS = 10  # fewer rows: no constants (two more parameters would only replay them)
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
    architecture: str | None = None
    device_class: str | None = None  # vendor and integrated/discrete/datacenter (Profile.device_class)
    codes: dict[str, float] = field(default_factory=dict)  # its build terms (expected.build_codes)
    label: str = ""  # which result (named when it is left out of a fit)
    ceiling_known: bool = True  # prefill: whether its build's matrix-core use is known (levels fit these only)


def _bounded_lstsq(a: Any, bounds: list[float], weights: Any) -> list[float]:
    """Weighted least squares of a @ x = 1 with x_i >= bounds_i: a coefficient past its bound
    is pinned there and the rest refitted."""
    import numpy as np

    root = np.sqrt(weights)
    a = a * root[:, None]
    y = root
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


def regress(backend: str, kind: str, points: list[Point], constants: bool = True) -> LinearFit:
    """Least squares on relative error (each row divided by its measured time, so every result
    weighs the same whatever its speed), read factors >= 1 (at most the ceiling), constants
    >= 0 (none without `constants`)."""
    import numpy as np

    if not points:
        raise ValueError(f"no {kind} points for {backend}")
    groups = sorted({p.group for p in points})
    per_gb = kind == "decode"
    n_const = (2 if per_gb else 1) if constants else 0
    m = np.array(
        [
            [(p.ideal_s if p.group == g else 0.0) / p.measured_s for g in groups]
            + ([p.units / p.measured_s] + ([p.gb / p.measured_s] if per_gb else []))[:n_const]
            for p in points
        ]
    )
    # every device weighs the same (its results share one unit): a chip measured a hundred
    # times teaches the fit about that chip, not about the backend
    per_device: dict[str, int] = {}
    for p in points:
        per_device[p.device] = per_device.get(p.device, 0) + 1
    weights = np.array([1.0 / per_device[p.device] for p in points])
    x = _bounded_lstsq(m, [1.0] * len(groups) + [0.0] * n_const, weights)
    rest = [*x[len(groups) :], 0.0, 0.0]
    fit = LinearFit(
        backend=backend,
        kind=kind,
        read_factor=dict(zip(groups, x[: len(groups)], strict=True)),
        per_unit_s=rest[0],
        per_gb_s=rest[1] if per_gb else 0.0,
        residual_low=0.0,
        residual_high=0.0,
        spread_source="own",
        n=len(points),
        devices=len({p.device for p in points}),
        median_error=0.0,
    )
    res = residuals(fit, points)
    return replace(
        fit,
        residual_low=percentile(res, QUANTILES[0]),
        residual_high=percentile(res, QUANTILES[1]),
        median_error=percentile([abs(math.exp(r) - 1) for r in res], 0.5),
    )


def residuals(fit: LinearFit, points: list[Point]) -> list[float]:
    """ln(measured speed / predicted speed) of each point."""
    return [math.log(fit.predicted_s(p.group, p.ideal_s, p.units, p.gb)[0] / p.measured_s) for p in points]


def inliers(fit: LinearFit, points: list[Point]) -> list[Point]:
    """The points within OUTLIER_FACTOR of the fit's median residual."""
    res = residuals(fit, points)
    mid = percentile(res, 0.5)
    return [p for p, r in zip(points, res, strict=True) if abs(r - mid) <= math.log(OUTLIER_FACTOR)]


def regress_backends(kind: str, points: dict[str, list[Point]]) -> tuple[dict[str, LinearFit], dict[str, list[Point]]]:
    """One fit per backend with rows from at least MIN_FIT_DEVICES devices (else none: the
    backend keeps its own band), and the points each rests on. A backend with few rows gets
    one factor per group and no constant (more parameters would only replay its rows) and the
    mean residual spread of the backends with rows enough for their own. A row more than
    OUTLIER_FACTOR off the first fit is left out of the refit and its spread, and named in
    `left_out`."""
    points = {b: pts for b, pts in points.items() if len({p.device for p in pts}) >= MIN_FIT_DEVICES}
    fits: dict[str, LinearFit] = {}
    for b, pts in sorted(points.items()):
        fit = regress(b, kind, pts, constants=len(pts) >= MIN_CONSTANT_ROWS)
        kept = inliers(fit, pts)
        if len(kept) < len(pts):
            fit = replace(
                regress(b, kind, kept, constants=len(pts) >= MIN_CONSTANT_ROWS),
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
    return fits, points

"""The statistics several layers share (ITL and TTFT percentiles, a fit's residual band)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in 0..1 (0.5: the median)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("no values")
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def t_quantile(q: float, df: float) -> float:
    """The q-th quantile of Student's t with `df` degrees of freedom: the normal quantile
    corrected by Fisher's expansion in 1/df (Abramowitz & Stegun 26.7.5, four terms; within
    0.02 of the exact value at df = 3, 0.001 from df = 5)."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(q)
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(t / df ** (i + 1) for i, t in enumerate(terms))


# Two-sided 5% critical values of Student's t (97.5th percentile) by degrees of freedom.
T_975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
    20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
T_975_INF = 1.960


def t_critical(df: float) -> float:
    """The 97.5th percentile of t with `df` degrees of freedom (the table's next lower df)."""
    if df >= 1000:
        return T_975_INF
    usable = [d for d in T_975 if d <= max(df, 1)]
    return T_975[max(usable)]


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% confidence interval (t-distribution; infinite
    for fewer than two values)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n < 2:
        return mean, math.inf
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t_critical(n - 1) * sd / math.sqrt(n)

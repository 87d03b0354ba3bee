"""What is known of a device, fitted on top of a backend's fit: physics.expected.Levels.

Each published result's error under its backend's fit, r = ln(measured speed / predicted), is
split over the levels of what is known of its device and the build terms of its run:

    r = vendor + class[integrated, discrete or datacenter] + generation + architecture + device
        + sum(term x code) + e

(the generation crosses the class: Xe2 is the integrated Arc 140V and the discrete B580; an
architecture without siblings is a generation of its own, machine.profiles.GENERATIONS)

a ridge regression (penalised least squares) where every device weighs the same (its results
share one unit of weight) and each level's effects are pulled toward the level above with the
weight of `shrink` devices (each device's own effect too): a new device of an architecture
seen on n devices is moved by about n/(n+1) of what they showed, before that architecture's
share of its class (partial pooling:
Gelman & Hill, "Data Analysis Using Regression and Multilevel/Hierarchical Models", ch. 12).
The build terms are not pulled (a fixed effect), and are fitted only where results with and
without the term come from MIN_TERM_DEVICES devices each.

How wide a band is comes from results the fit did not see. For a device new to the data:
each device is left out in turn, predicted from the others at the level it would get, and
the errors give a t interval (the band's QUANTILES, as for a fit's residuals) where each
device weighs the same, wide where the devices are few. `shrink` is chosen from
SHRINK_GRID by those errors (the narrowest). For a device the data holds: each result of a
device with two or more is left out in turn and predicted from the rest (its device's
other results included), the same interval over those errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ggprof.calibration.regression import Point
from ggprof.physics.expected import BUILD_TERMS, LEVELS, QUANTILES, Levels, level_keys, level_offset
from ggprof.stats import t_quantile

SHRINK_GRID = (0.25, 0.5, 1.0, 2.0, 4.0)  # devices' weight pulling a level toward the one above
MIN_LEVEL_DEVICES = 5  # fewer devices: the backend's fit alone (no level would rest on anything)
MIN_TERM_DEVICES = 2  # a build term needs results with and without it from this many devices each
MIN_WITHIN_DEVICES = 5  # fewer devices seen twice or more: a known device's band is a new one's


@dataclass(frozen=True, kw_only=True)
class Observed:
    """One result under its backend's fit: its error and what is known of its device."""

    residual: float  # ln(measured speed / the fit's predicted speed)
    device: str
    keys: dict[str, str]  # level -> key ("architecture" -> "ampere")
    codes: dict[str, float]


def observed(point: Point, residual: float) -> Observed:
    keys = level_keys(point.device, point.architecture, point.device_class)
    return Observed(
        residual=residual,
        device=point.device,
        keys={lv: k for lv, k in keys.items() if k},
        codes=point.codes,
    )


def _terms(kind: str, obs: list[Observed]) -> list[str]:
    """The build terms this data can fit: results with the term set and without it from
    MIN_TERM_DEVICES devices each."""
    out = []
    for term in BUILD_TERMS["decode" if kind == "decode" else "prefill"]:
        on = {o.device for o in obs if o.codes.get(term, 0.0) > 0}
        off = {o.device for o in obs if o.codes.get(term, 0.0) == 0}
        if len(on) >= MIN_TERM_DEVICES and len(off) >= MIN_TERM_DEVICES:
            out.append(term)
    return out


def _solve(
    obs: list[Observed], terms: list[str], shrink: float
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """The ridge fit: effects by level and key, and the build terms."""
    import numpy as np

    columns = [(lv, k) for lv in LEVELS for k in sorted({o.keys[lv] for o in obs if lv in o.keys})]
    columns += [("term", t) for t in terms]
    index = {c: i for i, c in enumerate(columns)}
    per_device: dict[str, int] = {}
    for o in obs:
        per_device[o.device] = per_device.get(o.device, 0) + 1
    x = np.zeros((len(obs), len(columns)))
    y = np.array([o.residual for o in obs])
    w = np.array([1.0 / per_device[o.device] for o in obs])
    for row, o in enumerate(obs):
        for lv, k in o.keys.items():
            x[row, index[(lv, k)]] = 1.0
        for t in terms:
            x[row, index[("term", t)]] = o.codes.get(t, 0.0)
    penalty = np.array([shrink if lv != "term" else 1e-9 for lv, _ in columns])
    beta = np.linalg.solve(x.T @ (x * w[:, None]) + np.diag(penalty), x.T @ (w * y))
    effects: dict[str, dict[str, float]] = {lv: {} for lv in LEVELS}
    values: dict[str, float] = {}
    for (lv, k), b in zip(columns, beta, strict=True):
        if lv == "term":
            values[k] = float(b)
        else:
            effects[lv][k] = float(b)
    return effects, values


def _predicted(effects: dict[str, dict[str, float]], values: dict[str, float], o: Observed) -> float:
    """A result's predicted error at the most specific level the effects know of its device."""
    _, total = level_offset(effects, dict(o.keys))
    return total + sum(v * o.codes.get(t, 0.0) for t, v in values.items())


def _left_out_errors(obs: list[Observed], terms: list[str], shrink: float) -> list[tuple[str, float]]:
    """Each device's results predicted by a fit on the other devices: (device, error)."""
    errors = []
    for device in sorted({o.device for o in obs}):
        rest = [o for o in obs if o.device != device]
        effects, values = _solve(rest, terms, shrink)
        errors += [(device, o.residual - _predicted(effects, values, o)) for o in obs if o.device == device]
    return errors


def _interval(errors: list[tuple[str, float]]) -> tuple[float, float]:
    """The QUANTILES t interval of the next error: the mean and spread of the errors, each
    device weighing the same (a chip measured ten times is one device, not ten), with as many
    degrees of freedom as devices, widened by sqrt(1 + 1/n) for the mean's own uncertainty."""
    per_device: dict[str, int] = {}
    for device, _ in errors:
        per_device[device] = per_device.get(device, 0) + 1
    n = len(per_device)
    weights = [1.0 / per_device[d] for d, _ in errors]
    mean = sum(w * e for w, (_, e) in zip(weights, errors, strict=True)) / n
    var = sum(w * (e - mean) ** 2 for w, (_, e) in zip(weights, errors, strict=True)) / (n - 1)
    half = t_quantile(QUANTILES[1], n - 1) * math.sqrt(var) * math.sqrt(1 + 1 / n)
    return mean - half, mean + half


def fit_levels(backend: str, kind: str, obs: list[Observed]) -> Levels | None:
    """The levels of one backend and test, or None with fewer than MIN_LEVEL_DEVICES devices."""
    n_devices = len({o.device for o in obs})
    if n_devices < MIN_LEVEL_DEVICES:
        return None
    terms = _terms(kind, obs)
    spreads = {s: _left_out_errors(obs, terms, s) for s in SHRINK_GRID}
    shrink = min(SHRINK_GRID, key=lambda s: (_interval(spreads[s])[1] - _interval(spreads[s])[0], s))
    low, high = _interval(spreads[shrink])
    effects, values = _solve(obs, terms, shrink)
    # A device the data holds: each of its results predicted from the others (its own included)
    counts = {d: sum(o.device == d for o in obs) for d in {o.device for o in obs}}
    within = []
    for i, o in enumerate(obs):
        if counts[o.device] >= 2:
            rest_effects, rest_values = _solve(obs[:i] + obs[i + 1 :], terms, shrink)
            within.append((o.device, o.residual - _predicted(rest_effects, rest_values, o)))
    known = len({d for d, _ in within}) >= MIN_WITHIN_DEVICES
    device_low, device_high = _interval(within) if known else (low, high)
    devices: dict[str, dict[str, int]] = {}
    for lv in LEVELS:
        members: dict[str, set[str]] = {}
        for i, o in enumerate(obs):
            if lv in o.keys:  # the device level counts its results, the others their devices
                members.setdefault(o.keys[lv], set()).add(str(i) if lv == "device" else o.device)
        devices[lv] = {k: len(v) for k, v in sorted(members.items())}
    return Levels(
        backend=backend,
        kind=kind,
        effects={lv: dict(sorted(e.items())) for lv, e in effects.items()},
        devices=devices,
        terms=values,
        spread_low=low,
        spread_high=high,
        device_spread_low=device_low,
        device_spread_high=device_high,
        shrink_devices=shrink,
        n=len(obs),
        n_devices=n_devices,
    )

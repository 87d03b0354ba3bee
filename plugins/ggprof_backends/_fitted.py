"""The speed models fitted on published llama.cpp results (speed-fits.json beside this file,
written by `benchmarks/calibrate.py --write` from benchmarks/data/llama-cpp-results.jsonl)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from ggprof import SpeedFits

if TYPE_CHECKING:  # annotations only: importing the plugin stays cheap
    from ggprof import Device, EfficiencyBand, ModelSpec

FITS_PATH = Path(__file__).with_name("speed-fits.json")


_override: list[SpeedFits] = []  # set by `using` (calibration: fits that left a device out)


def fits() -> SpeedFits:
    return _override[-1] if _override else _committed()


@cache
def _committed() -> SpeedFits:
    return SpeedFits.load(FITS_PATH) if FITS_PATH.is_file() else SpeedFits()


@contextmanager
def using(other: SpeedFits) -> Iterator[None]:
    """Judge with `other` instead of the committed fits inside the block (benchmarks/calibrate.py
    judges each device with fits that never saw it)."""
    _override.append(other)
    try:
        yield
    finally:
        _override.pop()


def decode_band(backend: str, model: ModelSpec | None, device: Device | None) -> EfficiencyBand | None:
    """The fitted decode band for `model` on `device`, or None (no fit, no model, no bandwidth)."""
    bandwidth = device.bandwidth_bytes_per_s if device is not None else None
    if model is None or not bandwidth:
        return None
    return fits().decode_band(backend, model, bandwidth, device.architecture if device else None)


def prefill_band(backend: str, model: ModelSpec | None, device: Device | None) -> EfficiencyBand | None:
    """The fitted prefill band (fractions of the compute ceiling), or None (no fit, no peak)."""
    peak = device.peak_flops.value if device is not None and device.peak_flops else None
    if model is None or not peak:
        return None
    return fits().prefill_band(backend, model, peak, device.architecture if device else None)

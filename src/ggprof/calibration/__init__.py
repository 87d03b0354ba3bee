"""Calibration: the expected-speed models fitted on published llama.cpp results.

`speed-fits.json` beside this file holds the fitted parameters (written by
`benchmarks/calibrate.py --write` from benchmarks/data/llama-cpp-results.jsonl);
`speed_fits()` is what backends judge with, `using()` swaps in other fits for a block (the
leave-one-device-out measurement), and `fitting` holds the least squares.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from ggprof.physics.expected import SpeedFits

FITS_PATH = Path(__file__).with_name("speed-fits.json")
_override: list[SpeedFits] = []


def speed_fits() -> SpeedFits:
    """The fits verdicts use: the committed ones, or those `using` put in place."""
    return _override[-1] if _override else committed_fits()


@cache
def committed_fits() -> SpeedFits:
    return SpeedFits.load(FITS_PATH) if FITS_PATH.is_file() else SpeedFits()


@contextmanager
def using(other: SpeedFits) -> Iterator[None]:
    """Judge with `other` instead of the committed fits inside the block."""
    _override.append(other)
    try:
        yield
    finally:
        _override.pop()

"""Calibration: the expected-speed models fitted on published llama.cpp results.

`speed-fits.json` beside this file holds the fitted parameters (written by
`benchmarks/calibrate.py --write` from benchmarks/data/llama-cpp-results.jsonl);
`speed_fits()` is what backends judge with, `using()` swaps in other fits for a block (the
leave-one-device-out measurement), and `fitting` holds the least squares. `placement-fits.json`
holds the shares a placement's parts reach (RAM, host link; ggprof.calibration.placements fits
them), `placement_fits()` reads them and `using_placements()` swaps them (leave one machine out).
`speculative-fits.json` holds the share of the modelled speed-up published speculative runs reach
(benchmarks/bench_speculative.py fits it), `speculative_reach()` reads it and `using_reach()` swaps
it (leave one device out). `moe-fits.json` holds the fixed time a MoE layer adds on a GPU
(benchmarks/bench_moe.py fits it), `moe_layer_fit()` reads it and `using_moe()` swaps it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from ggprof.machine.device import EfficiencyBand
from ggprof.physics.expected import SpeedFits
from ggprof.physics.moe import MoeLayerFit
from ggprof.physics.shares import PlacementFits, ShareFit

FITS_PATH = Path(__file__).with_name("speed-fits.json")
PLACEMENT_FITS_PATH = Path(__file__).with_name("placement-fits.json")
_override: list[SpeedFits] = []
_placements: list[PlacementFits] = []
SPECULATIVE_FITS_PATH = Path(__file__).with_name("speculative-fits.json")
_reach: list[ShareFit | None] = []
MOE_FITS_PATH = Path(__file__).with_name("moe-fits.json")
_moe: list[MoeLayerFit | None] = []


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


def placement_fits() -> PlacementFits:
    """The placement shares verdicts use: the committed ones, or those `using_placements` put in place."""
    return _placements[-1] if _placements else committed_placement_fits()


@cache
def committed_placement_fits() -> PlacementFits:
    return PlacementFits.load(PLACEMENT_FITS_PATH) if PLACEMENT_FITS_PATH.is_file() else PlacementFits()


@contextmanager
def using_placements(other: PlacementFits) -> Iterator[None]:
    """Judge with `other` placement shares inside the block."""
    _placements.append(other)
    try:
        yield
    finally:
        _placements.pop()


def speculative_reach() -> ShareFit | None:
    """The share of the modelled speed-up published speculative runs reach: the committed fit, or
    the one `using_reach` put in place (None: none fitted, the model's speed-up as it is)."""
    return _reach[-1] if _reach else committed_reach()


def reach_band() -> EfficiencyBand | None:
    fit = speculative_reach()
    return fit.band() if fit is not None else None


@cache
def committed_reach() -> ShareFit | None:
    return ShareFit.load(SPECULATIVE_FITS_PATH) if SPECULATIVE_FITS_PATH.is_file() else None


@contextmanager
def using_reach(other: ShareFit | None) -> Iterator[None]:
    """Judge speculative runs with `other` (None: no fitted reach) inside the block."""
    _reach.append(other)
    try:
        yield
    finally:
        _reach.pop()


def moe_layer_fit() -> MoeLayerFit | None:
    """The fixed time a MoE layer adds to a token on a GPU: the committed fit, or the one
    `using_moe` put in place (None: none fitted, a MoE layer costs its bytes alone)."""
    return _moe[-1] if _moe else committed_moe()


@cache
def committed_moe() -> MoeLayerFit | None:
    return MoeLayerFit.load(MOE_FITS_PATH) if MOE_FITS_PATH.is_file() else None


@contextmanager
def using_moe(other: MoeLayerFit | None) -> Iterator[None]:
    """Judge mixtures of experts with `other` (None: no MoE term) inside the block."""
    _moe.append(other)
    try:
        yield
    finally:
        _moe.pop()

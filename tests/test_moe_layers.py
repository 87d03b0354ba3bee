"""A MoE layer's fixed time on a GPU (ggprof.physics.moe, ggprof.calibration.moe): which layers
count, the band with it by hand, and its fit leaving one device out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from ggufs import F16, Shape, write_model

from ggprof.calibration.moe import LayerRow, fit_layer_cost
from ggprof.machine.device import EfficiencyBand
from ggprof.model.spec import load_model
from ggprof.physics.moe import MoeLayerFit, moe_band, moe_layers

MOE = Shape(n_layers=5, n_embd=64, n_heads=4, n_ff=128, vocab=100, n_experts=8, n_experts_used=2, qtype=F16)


def test_the_layers_whose_experts_a_gpu_runs(tmp_path: Path) -> None:
    spec = load_model(write_model(tmp_path / "moe.gguf", MOE)[0])
    assert moe_layers(spec) == 5
    assert moe_layers(spec, n_cpu_moe=2) == 3  # -ncmoe 2: the experts of layers 0 and 1 in RAM
    assert moe_layers(spec, layers={0, 1, 4}) == 3 and moe_layers(spec, layers={0, 1, 4}, n_cpu_moe=2) == 1
    dense = load_model(write_model(tmp_path / "dense.gguf", Shape(n_layers=5, n_embd=64, n_heads=4, n_ff=128))[0])
    assert moe_layers(dense) == 0


def test_a_moe_layers_time_lowers_the_band_by_hand() -> None:
    """A part of 10 ms at full rate at 50%-80% of the bandwidth, 10 MoE layers at 0-100 us each:
    the slow end 1 / (1/0.5 + 10 x 100 us / 10 ms) = 1 / 2.1 = 47.6%; the fast end unchanged
    (the fit's low end 0)."""
    fit = MoeLayerFit(centre_s=50e-6, low_s=0.0, high_s=100e-6, rows=9, devices=4, held_out_error_s=30e-6, what="c")
    band = moe_band(EfficiencyBand(low=0.5, high=0.8, source="dense"), 10e-3, 10, fit)
    assert band.low == pytest.approx(1 / 2.1) and band.high == pytest.approx(0.8)
    assert band.source == (
        "dense; plus 10 MoE layers' kernels at c: 0-100 us a MoE layer (fitted on 9 public rows of 4 devices, each "
        "left out in turn: median error 30 us)"
    )
    assert moe_band(EfficiencyBand(low=0.5, high=0.8, source="dense"), 10e-3, 0, fit).low == 0.5  # a dense model


def test_the_fit_and_its_band_leave_one_device_out_by_hand() -> None:
    """Device A's rows 100 and 140 us (120 as one), B 60, C 200: the centre is their median, 120.
    Without A the median of 60 and 200 is 130 (A's errors -30, +10); without B, 160 (B's -100);
    without C, 90 (C's +110). Band: 120 - 100 = 20 to 120 + 110 = 230 us; median |error| 65 us."""
    rows = [
        LayerRow(device="a", label="a1", layer_s=100e-6),
        LayerRow(device="a", label="a2", layer_s=140e-6),
        LayerRow(device="b", label="b", layer_s=60e-6),
        LayerRow(device="c", label="c", layer_s=200e-6),
    ]
    fit = fit_layer_cost(rows, "c")
    assert fit is not None
    assert fit.centre_s == pytest.approx(120e-6) and fit.low_s == pytest.approx(20e-6)
    assert fit.high_s == pytest.approx(230e-6) and fit.held_out_error_s == pytest.approx(65e-6)
    assert (fit.rows, fit.devices) == (4, 3)
    assert fit_layer_cost(rows[:3], "c") is None  # two devices: no fit

"""The bands the built-in backends take from the speed models fitted on published llama.cpp
results (`ggprof.speed_fits()`: calibrated in ggprof.calibration)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: importing the plugin stays cheap
    from ggprof import Device, EfficiencyBand, ModelSpec


def decode_band(backend: str, model: ModelSpec | None, device: Device | None) -> EfficiencyBand | None:
    """The fitted decode band for `model` on `device`, or None (no fit, no model, no bandwidth)."""
    bandwidth = device.bandwidth_bytes_per_s if device is not None else None
    if model is None or not bandwidth:
        return None
    from ggprof import speed_fits  # the fitted models load when a band is asked for, not at import

    return speed_fits().decode_band(backend, model, bandwidth, device)


def prefill_band(backend: str, model: ModelSpec | None, device: Device | None) -> EfficiencyBand | None:
    """The fitted prefill band (fractions of the compute ceiling), or None (no fit, no peak)."""
    peak = device.peak_flops.value if device is not None and device.peak_flops else None
    if model is None or not peak:
        return None
    from ggprof import speed_fits

    return speed_fits().prefill_band(backend, model, peak, device)

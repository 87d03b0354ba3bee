"""A mixture of experts' layers cost a GPU more than their bytes: each routes its token (the
router's matrix, a softmax, the top-k selection, gathering the chosen experts' rows) and runs
its experts through llama.cpp's `mul_mat_id` kernels, several more kernels a layer than a dense
feed-forward (ggml's `build_moe_ffn`, src/llama-graph.cpp). On a fast GPU reading a small active
set, those fixed costs are a large part of a token.

So a token's time on a device is its bytes at the backend's share of the bandwidth plus a fixed
time per MoE layer it runs:

    t = bytes / (bandwidth x share) + layers x c

with `c` fitted on public results of mixtures of experts run wholly on one device: each row's time
less the dense band's midpoint over its MoE layers (ggprof.calibration.moe; benchmarks/bench_moe.py).
The band's slow end takes `c`'s high end, its fast end `c`'s low end (at least 0)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ggprof.machine.device import EfficiencyBand
from ggprof.model.spec import ModelSpec
from ggprof.physics.placement import EXPERT_TENSORS


@dataclass(frozen=True, kw_only=True)
class MoeLayerFit:
    """The fixed time a MoE layer adds to a token on a GPU (s): its centre and its band (the centre
    plus the smallest and largest error of a device's rows predicted by the fit made without it)."""

    centre_s: float
    low_s: float
    high_s: float
    rows: int
    devices: int
    held_out_error_s: float  # median |a row's c - the c fitted without its device|
    what: str
    left_out: tuple[str, ...] = ()

    def describe(self) -> str:
        return (
            f"{self.what}: {self.low_s * 1e6:.0f}-{self.high_s * 1e6:.0f} us a MoE layer (fitted on {self.rows} "
            f"public rows of {self.devices} devices, each left out in turn: median error "
            f"{self.held_out_error_s * 1e6:.0f} us)"
        )

    def to_json(self) -> str:
        d: dict[str, Any] = asdict(self)
        d["left_out"] = list(self.left_out)
        return json.dumps({k: (round(v, 9) if isinstance(v, float) else v) for k, v in d.items()}, indent=1) + "\n"

    @staticmethod
    def load(path: Path) -> MoeLayerFit:
        d = json.loads(path.read_text())
        return MoeLayerFit(**{**d, "left_out": tuple(d.get("left_out", ()))})


def moe_layers(spec: ModelSpec, layers: set[int] | None = None, n_cpu_moe: int = 0) -> int:
    """The layers whose routed experts a GPU runs: those with `_exps` tensors, of `layers` where
    given (the device's), past the first `n_cpu_moe` (their experts in RAM)."""
    found = {t.layer for t in spec.tensors if t.layer is not None and EXPERT_TENSORS.search(t.name)}
    if layers is not None:
        found &= layers
    return sum(1 for il in found if il >= n_cpu_moe)


def moe_band(band: EfficiencyBand, full_s: float, layers: int, fit: MoeLayerFit | None) -> EfficiencyBand:
    """`band` (shares of the bandwidth over a part that takes `full_s` at full rate) with `layers`
    MoE layers' fixed time added: a share s becomes 1 / (1/s + layers x c / full_s), the slow end
    at c's high end, the fast end at its low end."""
    if fit is None or layers <= 0 or full_s <= 0:
        return band
    low = 1 / (1 / band.low + layers * fit.high_s / full_s)
    high = 1 / (1 / band.high + layers * max(fit.low_s, 0.0) / full_s)
    return replace(
        band, low=low, high=high, source=f"{band.source}; plus {layers} MoE layers' kernels at {fit.describe()}"
    )

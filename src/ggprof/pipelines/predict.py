"""`ggprof predict`: the ceilings of a model on the device the user chose (or this host)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ggprof.errors import NoBandwidthError
from ggprof.machine.device import EfficiencyBand
from ggprof.machine.host import describe_host
from ggprof.machine.target import DeviceChoice, Target, resolve_target
from ggprof.model.spec import ModelSpec
from ggprof.physics.roofline import PredictInputs, Prediction, is_partial_offload, predict
from ggprof.pipelines.extensions import Extensions

if TYPE_CHECKING:
    from ggprof.pipelines.rpc import RpcChoice


def predict_on(
    spec: ModelSpec, inputs: PredictInputs, choice: DeviceChoice, ext: Extensions, rpc: RpcChoice | None = None
) -> tuple[Prediction, Target]:
    """Resolve the device (this host's facts gathered once, only when needed) and predict; with
    `rpc`, over the split: the chosen device is the main host's, the rest are remote."""
    if rpc is not None and rpc.active:
        return _predict_split(spec, inputs, choice, ext, rpc)
    partial = is_partial_offload(inputs.n_gpu_layers, spec.n_layers)
    host = describe_host(ext.backends.values(), ext.profiles, measure=False) if choice.needs_host or partial else None
    target = resolve_target(choice, profiles=ext.profiles, host=host)
    if partial and target.device.is_discrete_gpu and (target.cpu is None or target.cpu.bandwidth is None):
        raise NoBandwidthError(
            "--n-gpu-layers splits the model, but this host's CPU bandwidth is unknown: run `ggprof host` first"
        )
    return predict_with(spec, target, inputs, ext), target


def predict_with(spec: ModelSpec, target: Target, inputs: PredictInputs, ext: Extensions) -> Prediction:
    """The prediction on a resolved target, with its backend's bands (None: unknown backend). A
    backend plugin that raises leaves its band out, and the prediction's warnings name it: the
    ceilings stand, and `predict` and `fit`, which judge nothing, still say what went wrong."""
    backend = ext.backends.get(target.device.backend)
    warnings: list[str] = []

    def band_of(method: str, what: str) -> EfficiencyBand | None:
        if backend is None:
            return None
        try:
            band: EfficiencyBand | None = getattr(backend, method)(spec, target.device)
            return band
        except Exception as e:  # a backend plugin's bug
            warnings.append(f"the {backend.name} backend plugin failed computing its {what}: {type(e).__name__}: {e}")
            return None

    band = band_of("efficiency_band", "expected band")
    prefill_band = band_of("prefill_band", "prefill band")
    p = predict(spec, target.device, inputs, band, target.cpu, prefill_band)
    return replace(p, warnings=tuple(warnings)) if warnings else p


def _predict_split(
    spec: ModelSpec, inputs: PredictInputs, choice: DeviceChoice, ext: Extensions, rpc: RpcChoice
) -> tuple[Prediction, Target]:
    from ggprof.pipelines.rpc import predict_split, split_setup

    setup = split_setup(choice, ext, rpc)
    p = predict_split(
        spec, setup.host_cpu, setup.remote, inputs, ext, local_gpu=setup.local_gpu, tensor_split=rpc.tensor_split
    )
    return p, Target(device=p.device, cpu=setup.host_cpu, description=setup.description)

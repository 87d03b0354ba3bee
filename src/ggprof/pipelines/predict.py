"""`ggprof predict`: the ceilings of a model on the device the user chose (or this host)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ggprof.bench import roofs
from ggprof.bench.roofs import StoredRoof
from ggprof.calibration import moe_layer_fit, placement_fits
from ggprof.errors import BadInputError, NoBandwidthError
from ggprof.machine.device import Device, EfficiencyBand
from ggprof.machine.host import describe_host
from ggprof.machine.load import BUSY_SHARE
from ggprof.machine.target import DeviceChoice, Target, resolve_target, with_spill
from ggprof.model.spec import ModelSpec
from ggprof.physics.placement import LINK_BAND, class_band
from ggprof.physics.roofline import PredictInputs, Prediction, predict, splits_to_cpu
from ggprof.pipelines.extensions import Extensions
from ggprof.verdict.backend import Backend
from ggprof.verdict.finding import JudgeCase

if TYPE_CHECKING:
    from ggprof.pipelines.placements import FitAsked
    from ggprof.pipelines.rpc import RpcChoice


def predict_on(
    spec: ModelSpec,
    inputs: PredictInputs,
    choice: DeviceChoice,
    ext: Extensions,
    rpc: RpcChoice | None = None,
    ram: Device | None = None,
    fit: FitAsked | None = None,
    spill: str | None = None,
) -> tuple[Prediction, Target]:
    """Resolve the device (this host's facts gathered once, only when needed) and predict; with
    `rpc`, over the split: the chosen device is the main host's, the rest are remote. `ram`: the
    RAM beside a GPU as the user gave it (--ram-bandwidth, or --cpu's platform), not this host's;
    `fit`: no placement was given and llama.cpp's --fit chose it (derived, and named so); `spill`:
    how the GPU's driver serves what is over its memory (physics.placement.SPILLS)."""
    if rpc is not None and rpc.active:
        return _predict_split(spec, inputs, choice, ext, rpc)
    partial = splits_to_cpu(inputs, spec.n_layers) or fit is not None  # --fit may keep weights in RAM
    needs_host = choice.needs_host or (partial and ram is None)
    host = describe_host(ext.backends.values(), ext.profiles, measure=False) if needs_host else None
    target = with_spill(resolve_target(choice, profiles=ext.profiles, host=host, devices=inputs.devices), spill)
    if ram is not None:
        if not target.device.is_discrete_gpu:
            raise BadInputError("--ram-bandwidth and --cpu name the RAM beside a GPU; a CPU alone is --bandwidth BW")
        target = replace(target, cpu=ram)
    from ggprof.pipelines.placements import derived  # it predicts with this module's predict_with

    fitted, note = derived(spec, target, inputs, fit) if fit is not None else (None, None)
    if fitted is not None:
        inputs = replace(inputs, n_gpu_layers=fitted.n_gpu_layers, n_cpu_moe=fitted.n_cpu_moe, ctx=fitted.ctx)
    partial = splits_to_cpu(inputs, spec.n_layers)
    if partial and target.device.is_discrete_gpu and (target.cpu is None or target.cpu.bandwidth is None):
        raise NoBandwidthError(
            "the placement puts weights in the CPU's memory, but this host's CPU bandwidth is unknown: "
            "give --ram-bandwidth BW or --cpu NAME, or run `ggprof host` first"
        )
    made = predict_with(spec, target, inputs, ext)
    if note is not None:
        made = replace(made, rules=(note, *made.rules))
    return with_host_roof(spec, made, target, ext), target


NO_ROOF = (
    "no compute roof measured on this host for this model: the band rests on bandwidth alone "
    "(`ggprof profile` measures one with its thread probe)"
)


def kept_roof(spec: ModelSpec, target: Target, depth: int, exact: bool = True) -> StoredRoof | None:
    """The thread probe `ggprof profile` kept for this model on this host's CPU, or None (another
    device, or never profiled here). `exact`: at this depth only; else the deepest not beyond it."""
    if target.host_fingerprint is None or target.device.backend != "cpu":
        return None
    quiet = roofs.load(target.host_fingerprint, spec, depth, exact=exact, max_others_percent=BUSY_SHARE * 100)
    return quiet or roofs.load(target.host_fingerprint, spec, depth, exact=exact)  # a busy one: said so


def roof_note(roof: StoredRoof | None, target: Target) -> str | None:
    """Which basis a CPU band on this host used: the kept probe (and whether it was measured on a
    busy machine, where it reads low), or bandwidth alone."""
    if target.host_fingerprint is None or target.device.backend != "cpu":
        return None
    if roof is None:
        return NO_ROOF
    note = f"compute roof from the thread probe {roof.describe()}"
    if roof.others_cpu_percent is not None and roof.others_cpu_percent > BUSY_SHARE * 100:
        note += (
            ": measured on a busy machine, it may read low (no quiet measurement is kept; "
            "`ggprof profile` on a quiet machine measures it again)"
        )
    return note


def with_host_roof(spec: ModelSpec, p: Prediction, target: Target, ext: Extensions) -> Prediction:
    """A prediction for this host's CPU capped by the compute roof its kept thread probe gives
    (the CPU backend's compute_roof, as a verdict computes it), or noting that none is kept. A
    roof measured at a shallower depth serves a deeper one: attention only adds work."""
    roof = kept_roof(spec, target, p.inputs.depth, exact=False)
    note = roof_note(roof, target)
    backend = ext.backends.get("cpu")
    if roof is None or backend is None:
        return replace(p, roof_note=note) if note else p
    case = JudgeCase(
        model=spec, backend="cpu", prediction=p, depth=p.inputs.depth, probe=roof.probe, n_threads=roof.run_threads
    )
    try:
        expected = backend.compute_roof(case)
    except Exception as e:  # a backend plugin's bug: the band stands alone, and says why
        return replace(p, roof_note=f"{NO_ROOF}; the cpu plugin failed: {type(e).__name__}: {e}")
    return replace(p, roof=expected, roof_note=note)


def predict_with(spec: ModelSpec, target: Target, inputs: PredictInputs, ext: Extensions) -> Prediction:
    """The prediction on a resolved target, with its backend's bands (None: unknown backend). A
    backend plugin that raises leaves its band out, and the prediction's warnings name it: the
    ceilings stand, and `predict` and `fit`, which judge nothing, still say what went wrong."""
    backend = ext.backends.get(target.device.backend)
    warnings: list[str] = []

    def band_of(
        method: str, what: str, b: Backend | None = backend, device: Device = target.device
    ) -> EfficiencyBand | None:
        if b is None:
            return None
        try:
            band: EfficiencyBand | None = getattr(b, method)(spec, device)
            return band
        except Exception as e:  # a backend plugin's bug
            warnings.append(f"the {b.name} backend plugin failed computing its {what}: {type(e).__name__}: {e}")
            return None

    gpus = target.gpus
    if gpus and inputs.split_mode == "none":  # -sm none: the model on -mg's device alone
        if not 0 <= inputs.main_gpu < len(gpus):
            raise BadInputError(f"-mg {inputs.main_gpu}: the run has {len(gpus)} devices (0 to {len(gpus) - 1})")
        return predict_with(spec, replace(target, device=gpus[inputs.main_gpu][1], gpus=()), inputs, ext)
    if gpus:
        return _predict_devices(spec, target, inputs, ext)
    band = band_of("efficiency_band", "expected band")
    prefill_band = band_of("prefill_band", "prefill band")
    cpu = target.cpu
    # the part of a token read from RAM goes at the CPU's share of its bandwidth, not the GPU's
    in_ram = cpu is not None and target.device.is_discrete_gpu and splits_to_cpu(inputs, spec.n_layers)
    cpu_band = band_of("efficiency_band", "expected band", ext.backends.get("cpu"), cpu) if in_ram and cpu else None
    cpu_band = ram_band(cpu_band, cpu) if cpu_band is not None and cpu is not None else cpu_band
    fits = placement_fits()
    spill, copies = (f.band() if f is not None else LINK_BAND for f in (fits.spill, fits.copies))
    p = predict(
        spec, target.device, inputs, band, cpu, prefill_band, cpu_band, spill, copies, moe_layer_fit(), fits.trip
    )
    return replace(p, warnings=tuple(warnings)) if warnings else p


def ram_band(cpu_band: EfficiencyBand, cpu: Device) -> EfficiencyBand:
    """The share of its bandwidth a RAM beside a GPU reaches on a token's part in it: the share
    fitted on public placements (ggprof.calibration.placement_fits), else the CPU backend's band;
    a RAM known only by its class reaching down to its slowest member (class_band)."""
    fitted = placement_fits().ram
    return class_band(fitted.band() if fitted is not None else cpu_band, cpu)


def _predict_devices(spec: ModelSpec, target: Target, inputs: PredictInputs, ext: Extensions) -> Prediction:
    """Several GPUs sharing the model (ggprof.physics.devices), each at its backend's band."""
    from ggprof.physics.split import predict_devices
    from ggprof.pipelines.rpc import band_for

    if inputs.tensor_split and len(inputs.tensor_split) > len(target.gpus):
        raise BadInputError(
            f"-ts {','.join(f'{v:g}' for v in inputs.tensor_split)}: {len(inputs.tensor_split)} shares for "
            f"{len(target.gpus)} devices ({', '.join(label for label, _ in target.gpus)})"
        )
    warnings: list[str] = []
    devices = [d for _, d in target.gpus] + ([target.cpu] if target.cpu is not None else [])
    bands = [band_for(ext, d, spec, warnings) for d in devices]
    if target.cpu is not None and bands[-1] is not None:  # the RAM's part at the RAM's fitted share
        bands[-1] = ram_band(bands[-1], target.cpu)
    p = predict_devices(spec, target.gpus, target.cpu, bands, inputs, moe_layer_fit())
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

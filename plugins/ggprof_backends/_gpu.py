"""Shared by the GPU plugins: turn a detected name into a Device, filled from its profile,
and what a run context says about a slow GPU result."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from ggprof import N_UBATCH, Backend, BuildFacts, Causes, Device, Diagnosis, Figure
from ggprof_backends import _fitted
from ggprof_backends._diagnosis import (
    NOISY_REPETITIONS_CV,
    OTHER_LOAD_GPU_HOST_PERCENT,
    UBATCH_DEVICES,
    UBATCH_PREFILL_SHARE,
)

if TYPE_CHECKING:  # annotations only: importing the plugin stays cheap
    from ggprof import EfficiencyBand, JudgeCase, ModelSpec, ProfileDB, RunContext

# a slow prompt's cause to check where the run's physical batch is not known
UBATCH_TO_CHECK = "a tiny physical batch (-ub) or batch (-b): the weights are read again every few tokens"
# ... and where the device's own cause (device_prefill_causes) does not replace it
MATRIX_KERNELS_TO_CHECK = "a build without the GPU's fast matrix kernels (tensor/matrix cores unused, an old llama.cpp)"

GPU_CAUSES = Causes(
    impossible=(
        "another model or quant than the one named: a smaller or more quantized file",
        "the device is not the one assumed (another GPU, or a profile with too little bandwidth)",
        "it ran remotely (an API or another machine)",
        "several GPUs split the model (their bandwidths add up; pass the combined --bandwidth)",
    ),
    slow=(
        "partial offload: some layers ran on the CPU (-ngl lower than the layer count)",
        "the KV cache or the output layer stayed in host memory",
        "power or thermal limits, or another program on the GPU",
        "a backend not tuned for this GPU (Vulkan vs CUDA/ROCm/Metal)",
    ),
)


def gpu_device(
    profiles: ProfileDB,
    backend: str,
    index: int,
    name: str,
    memory_bytes: int | None,
    *,
    bandwidth: Figure | None = None,
    gpu_cores: int | None = None,
    unified_memory: bool = False,
    memory_available_bytes: int | None = None,
    notes: tuple[str, ...] = (),
) -> Device:
    """A device with its own figures first, profile figures (labelled) where it has none."""
    profile, ambiguity = profiles.match(name, gpu_cores, kinds=("gpu", "soc"))
    all_notes = notes + ((ambiguity,) if ambiguity else ())
    if bandwidth is None and profile is not None:
        bandwidth = Figure(profile.bandwidth_bytes_per_s, "profile", profile.id)
    peak, vector, int_dot = profile.flops_figures() if profile is not None else (None, None, None)
    memory_source = "os" if memory_bytes else None
    if memory_bytes is None and profile is not None and profile.memory_gb:
        memory_bytes, memory_source = profile.memory_bytes, f"profile {profile.id}"
    return Device(
        id=f"{backend}:{index}",
        name=name,
        backend=backend,
        memory_bytes=memory_bytes,
        memory_source=memory_source,
        bandwidth=bandwidth,
        peak_flops=peak,
        vector_flops=vector,
        int_dot_ops=int_dot,
        profile_id=profile.id if profile else None,
        architecture=profile.architecture if profile else None,
        device_class=profile.device_class if profile else None,
        unified_memory=unified_memory,
        memory_available_bytes=memory_available_bytes,
        notes=all_notes,
    )


class GPUBackend(Backend):
    """What the GPU backends share: their causes, and the offload checks of a slow run."""

    causes = GPU_CAUSES
    prefill_causes: tuple[str, ...] = (
        "layers not offloaded (-ngl lower than the layer count): the CPU did part of the prompt",
        MATRIX_KERNELS_TO_CHECK,
        UBATCH_TO_CHECK,
        "a debug build, or power and thermal limits",
    )

    def efficiency_band(self, model: ModelSpec | None, device: Device | None) -> EfficiencyBand:
        """Fitted on published results for this backend (`_fitted`), else the flat band."""
        return _fitted.decode_band(self.name, model, device) or self.band

    def prefill_band(self, model: ModelSpec | None, device: Device | None) -> EfficiencyBand | None:
        return _fitted.prefill_band(self.name, model, device)

    def diagnose(self, case: JudgeCase) -> Diagnosis:
        ctx = case.context
        if ctx is None:
            return Diagnosis()
        causes, checks = _offload(ctx, "at host-memory bandwidth")
        if case.tg_cv is not None:
            checks.append(f"repetitions vary by {case.tg_cv:.1%}")
            if case.tg_cv > NOISY_REPETITIONS_CV:
                causes.append(f"noisy repetitions (CV {case.tg_cv:.0%}): another program used the GPU")
        if ctx.cpu_load_during_percent is not None and ctx.cpu_load_during_percent > OTHER_LOAD_GPU_HOST_PERCENT:
            causes.append(
                f"the host CPU was busy ({ctx.cpu_load_during_percent:.0f}% by other processes): "
                "kernel launches wait for it"
            )
        return Diagnosis(causes=tuple(causes), checks=tuple(checks))

    def diagnose_prefill(self, case: JudgeCase) -> Diagnosis:
        """Partial offload and what the build's facts point to (build_causes); where neither
        names a cause, the causes to check that the build does not rule out; first, what the
        device itself points to (device_prefill_causes)."""
        own = self.device_prefill_causes(case.prediction.device) if case.prediction is not None else ()
        found = self._diagnose_prefill(case)
        rest = tuple(c for c in found.causes if c != MATRIX_KERNELS_TO_CHECK)
        return Diagnosis(causes=(*own, *rest), checks=found.checks) if own else found

    def device_prefill_causes(self, device: Device) -> tuple[str, ...]:
        """A slow prompt's causes in what the device is: a backend's own."""
        return ()

    def _diagnose_prefill(self, case: JudgeCase) -> Diagnosis:
        causes, checks = _offload(case.context, "at the CPU's FLOP/s") if case.context else ([], [])
        known = case.prediction.device.build if case.prediction is not None else None
        build = known or BuildFacts()
        found, build_checks = self.build_causes(build)
        to_check = self.prefill_causes_to_check(build)
        if build.n_ubatch is not None:  # the run's physical batch is known: the cause is found or ruled out
            to_check = tuple(c for c in to_check if c != UBATCH_TO_CHECK)
            small, explains = ubatch_cause(build.n_ubatch, case)
            ruled_out = f", llama.cpp's default {N_UBATCH} or more: not the cause" if small is None else ""
            build_checks = (*build_checks, f"physical batch {build.n_ubatch} tokens (-ub){ruled_out}")
            if small is not None:
                # where it does not explain the whole slowdown, the causes to check follow it
                rest = () if explains or causes or found else to_check
                return Diagnosis(causes=(*causes, *found, small, *rest), checks=(*checks, *build_checks))
        return Diagnosis(causes=(*causes, *found) or to_check, checks=(*checks, *build_checks))

    def build_causes(self, build: BuildFacts) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(causes, checks) of a slow prompt in what is known of the build: a backend's own."""
        return (), ()

    def prefill_causes_to_check(self, build: BuildFacts) -> tuple[str, ...]:
        """The causes a slow prompt names when no fact points to one: prefill_causes, less
        those the build's facts rule out (a backend's own)."""
        return self.prefill_causes


def ubatch_share(n_ubatch: int) -> tuple[float, float, str] | None:
    """The share of its prompt speed at N_UBATCH a run keeps at a physical batch of `n_ubatch`
    tokens (lowest, highest, and which public runs say so: UBATCH_PREFILL_SHARE, between two
    sizes on a log scale; below the smallest, that size's); None at N_UBATCH or more."""
    if n_ubatch >= N_UBATCH:
        return None
    table = sorted({**UBATCH_PREFILL_SHARE, N_UBATCH: (1.0, 1.0)}.items())
    if n_ubatch <= table[0][0]:
        return (*table[0][1], f"at -ub {table[0][0]}" + ("" if n_ubatch == table[0][0] else ", less is slower still"))
    for (u0, (lo0, hi0)), (u1, (lo1, hi1)) in itertools.pairwise(table):
        if n_ubatch == u0:
            return lo0, hi0, f"at -ub {u0}"
        if u0 < n_ubatch < u1:
            t = math.log(n_ubatch / u0) / math.log(u1 / u0)
            return lo0 + (lo1 - lo0) * t, hi0 + (hi1 - hi0) * t, f"between -ub {u0} and {u1}"
    return None


def ubatch_cause(n_ubatch: int, case: JudgeCase) -> tuple[str | None, bool]:
    """(the run's small physical batch as a cause of its slow prompt, whether it explains it:
    the prompt is at or above what the band's bottom keeps at that batch); (None, False) at
    N_UBATCH or more (ruled out)."""
    share = ubatch_share(n_ubatch)
    if share is None:
        return None, False
    low, high, where = share
    cause = (
        f"a physical batch of {n_ubatch} tokens (-ub {n_ubatch}; llama.cpp's default is {N_UBATCH}): "
        f"public llama-bench runs kept {low:.0%}-{high:.0%} of their -ub {N_UBATCH} prompt speed {where} "
        f"({UBATCH_DEVICES})"
    )
    p, pp = case.prediction, case.measured_pp_tok_s
    band = p.prefill_band if p is not None else None
    ceiling = p.prefill_ceiling_tok_s if p is not None else None
    if pp is None or band is None or ceiling is None:
        return cause, True
    return cause, pp >= band.low * ceiling * low * (1 - case.tolerance)


def _offload(ctx: RunContext, pace: str) -> tuple[list[str], list[str]]:
    """A run's offload as (causes, checks): a partial one is a cause."""
    if ctx.n_gpu_layers_offloaded is None or ctx.n_layers is None:
        return [], []
    total = ctx.n_layers + 1
    checks = [f"llama.cpp offloaded {ctx.n_gpu_layers_offloaded}/{total} layers"]
    if ctx.n_gpu_layers_offloaded >= total:
        return [], checks
    return [f"partial offload: {total - ctx.n_gpu_layers_offloaded} of {total} layers ran on the CPU {pace}"], checks

"""Backend: what a plugin says about one llama.cpp backend (cpu, cuda, metal, vulkan, rocm, sycl).

The hook `register_backends(register)` says "here I am"; this class says what it knows:
how to detect its devices, whether a run used it, and its expected-speed model (the
fraction of the bandwidth ceiling llama.cpp reaches, and for a measured run what the
run context tells about a slow result). The words it uses for causes are data.
The shared rules in ggprof.verdict.rules do the judging.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ggprof.machine.device import EfficiencyBand

if TYPE_CHECKING:  # annotations only: importing a plugin (and `ggprof --help`) stays cheap
    from ggprof.bench.context import RunContext
    from ggprof.machine.device import Detection, Device, ExpectedSpeed
    from ggprof.machine.host import HostContext
    from ggprof.model.spec import ModelSpec
    from ggprof.verdict.finding import JudgeCase

# Why a decode speed lands above the bandwidth ceiling: the work happened elsewhere, on a
# smaller model, or the bandwidth figure is wrong.
IMPOSSIBLE_CAUSES = (
    "the GPU did the work: layers were offloaded to a GPU the claim does not mention",
    "another model or quant than the one named: a smaller or more quantized file (check its size and quantization)",
    "it ran remotely (an API or another machine), not on this device",
    "the bandwidth figure is wrong for this machine (more memory channels, another device)",
    "-ngl / --n-gpu-layers put more layers on the accelerator than assumed",
)
# Why a speed lands above a ceiling whichever it breaks (bandwidth or compute), named as carefully
# as what makes one slow: the work was not what the claim names, or not one stream's decode.
NOT_ONE_STREAM_CAUSES = (
    "speculative decoding: a draft model or n-grams gave several tokens per pass of the model (give "
    "--spec-type or -md)",
    "batched requests summed: the aggregate tok/s of several users or sequences, not one stream's",
    "a cached prompt counted as processed: tokens the KV cache already held counted as new ones",
    "tokens counted as characters or words: a rate per character is about 4x one per token",
)
# a prompt: no drafting, a cached prompt first (llama-server's prompt cache, a KV already filled)
PREFILL_TOO_FAST_CAUSES = (NOT_ONE_STREAM_CAUSES[2], NOT_ONE_STREAM_CAUSES[1], NOT_ONE_STREAM_CAUSES[3])
TOO_FAST_CAUSES = (
    "another model or quant than the one named: a smaller or more quantized file does less work a token",
    "a GPU the claim does not mention did the work (layers offloaded, or the run on another machine)",
    *NOT_ONE_STREAM_CAUSES,
)
# How the causes that need layers left on the CPU begin (prefill_causes below, the GPU plugins'
# slow causes): a log whose own facts put every layer on the GPU rules them out (check --log)
NEEDS_LAYERS_ON_CPU = ("layers not offloaded", "partial offload")
SLOW_CAUSES = (
    "another program was using the device or its memory",
    "power or thermal limits lowered the clock",
    "part of the model ran elsewhere (partial offload, paging from disk)",
)
SLOW_NEXT_STEP = "run `ggprof profile` on the machine: it records the run's context and checks these causes"


@dataclass(frozen=True, kw_only=True)
class Causes:
    """What a backend says when the run context cannot explain a result, most likely first."""

    impossible: tuple[str, ...] = IMPOSSIBLE_CAUSES
    slow: tuple[str, ...] = SLOW_CAUSES
    slow_next_step: str = SLOW_NEXT_STEP


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """What the run context says about a slow result: causes found (most likely first) and
    the checks made (shown as evidence either way)."""

    causes: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()


class Backend(ABC):
    """One llama.cpp backend as a plugin sees it."""

    name: str = ""
    band: EfficiencyBand = EfficiencyBand(low=0.5, high=0.9, source="assumption")
    causes: Causes = Causes()
    prefill_causes: tuple[str, ...] = (
        "the build lacks the fast matrix path (no BLAS on a CPU, no tensor/matrix cores used on a GPU)",
        "a debug build, or one without the CPU's SIMD extensions",
        "a tiny physical batch (-ub) re-reads the weights for every few tokens",
        "layers not offloaded: part of the prompt ran on the CPU",
    )

    @abstractmethod
    def detect(self, host: HostContext) -> Detection:
        """Devices of this backend on this host; a missing or broken tool means none, never a crash."""

    def used_by(self, run: RunContext) -> bool:
        """Whether a measured run used this backend for its layers."""
        return self.name in run.backends_used

    def efficiency_band(self, model: ModelSpec | None, device: Device | None) -> EfficiencyBand:
        """The fraction of the decode bandwidth ceiling llama.cpp reaches here."""
        return self.band

    def prefill_band(self, model: ModelSpec | None, device: Device | None) -> EfficiencyBand | None:
        """The fraction of the prefill compute ceiling llama.cpp reaches here (None: judge
        against the ceiling only)."""
        return None

    def compute_roof(self, case: JudgeCase) -> ExpectedSpeed | None:
        """A measured limit below the bandwidth band (e.g. too few cores), if the run shows one."""
        return None

    def diagnose(self, case: JudgeCase) -> Diagnosis:
        """Causes of a slow result the run context points to, with the checks made."""
        return Diagnosis()

    def diagnose_prefill(self, case: JudgeCase) -> Diagnosis:
        """Causes of a slow prompt the run context and the build's facts point to, with the
        checks made; where it finds none, the result names `prefill_causes`."""
        return Diagnosis()

"""The SYCL backend: Intel GPUs through oneAPI's Level Zero runtime, by device name (`sycl-ls`);
bandwidth comes from the matching profile."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ggprof import Backend, Detection, EfficiencyBand, hookimpl, run_tool

if TYPE_CHECKING:  # annotations only: importing the plugin stays cheap
    from ggprof import Device, HostContext, JudgeCase, ModelSpec, ProfileDB
from ggprof import BuildFacts, Diagnosis
from ggprof_backends._diagnosis import SYCL_NO_REORDER_UNTIL_BUILD, SYCL_REORDER_DECODE_TOK_S
from ggprof_backends._gpu import GPUBackend, gpu_device

# `[level_zero:gpu][level_zero:0] PLATFORM, DEVICE VERSION [DRIVER]` (oneAPI 2024.1 on), or an
# older runtime's `[ext_oneapi_level_zero:gpu:0] PLATFORM, DEVICE VERSION [DRIVER]`
_SYCL_LS = re.compile(
    r"^\[(?:ext_oneapi_)?level_zero:gpu(?:\]\[level_zero)?:(\d{1,4})\]\s+[^,]{1,200},\s+(.{1,200}?)\s+[\d.]+\s+\[[^\]]{0,80}\]\s*$"
)


_NO_REORDER_DAY = BuildFacts(number=SYCL_NO_REORDER_UNTIL_BUILD).built_on
_GAINS = [after / before - 1 for before, after in SYCL_REORDER_DECODE_TOK_S.values()]
_A770 = SYCL_REORDER_DECODE_TOK_S["Arc A770"]
_REORDER_EVIDENCE = (
    f"with them llama.cpp's SYCL notes measured Llama 2 7B Q4_0 decode {min(_GAINS):.0%}-{max(_GAINS):.0%} faster "
    f"(Arc A770 {_A770[0]} -> {_A770[1]} tok/s)"
)
# the variable's default changed: builds of spring 2025 had them off unless asked (llama.cpp
# PR #12560), so the cause says what ran, not that the user turned them off
REORDER_OFF = (
    "the SYCL reorder optimizations off (the log's GGML_SYCL_ENABLE_OPT: 0, or GGML_SYCL_DISABLE_OPT: 1 on builds "
    f"of 2025, some of which had them off by default): {_REORDER_EVIDENCE}; run with GGML_SYCL_ENABLE_OPT=1 "
    "(GGML_SYCL_DISABLE_OPT=0 on those builds)"
)
REORDER_ABSENT = (
    f"a build before SYCL's reorder optimizations (llama.cpp PR #12035, February 2025; b{SYCL_NO_REORDER_UNTIL_BUILD} "
    f"and older): {_REORDER_EVIDENCE}"
)


def reorder_facts(build: BuildFacts | None, model: ModelSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(causes, checks) of a slow decode in the run's reorder optimizations: off by its variable,
    or a build before them (known by its number or date) on Q4_0 weights, the first they covered."""
    if build is None:
        return (), ()
    if build.sycl_reorder is not None:
        check = f"SYCL reorder optimizations: {'on' if build.sycl_reorder else 'off'}"
        return (() if build.sycl_reorder else (REORDER_OFF,)), (check,)
    number, day = build.known_number, build.built_on
    if number is not None:
        before = number <= SYCL_NO_REORDER_UNTIL_BUILD
    else:
        before = day is not None and _NO_REORDER_DAY is not None and day <= _NO_REORDER_DAY
    if before and next(iter(model.bytes_by_type()), None) == "Q4_0":
        return (REORDER_ABSENT,), ()
    return (), ()


class SYCLBackend(GPUBackend):
    name = "sycl"
    band = EfficiencyBand(low=0.3, high=0.7, source="assumption: llama.cpp SYCL decode reaches 30-70% of peak")

    def build_causes(self, build: BuildFacts) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The build's GGML_SYCL_F16, where the run's log says it: a check, not a cause (the band
        already rests on the units it sets, the XMX units with it, the vector units without)."""
        if build.sycl_f16 is None:
            return (), ()
        units = "the XMX units" if build.sycl_f16 else "the vector units (a build with it multiplies on XMX)"
        return (), (f"GGML_SYCL_F16: {'yes' if build.sycl_f16 else 'no'}: the prompt band is on {units}",)

    def diagnose(self, case: JudgeCase) -> Diagnosis:
        """A slow decode: the GPU backends' causes, and the run's reorder optimizations."""
        base = super().diagnose(case)
        build = case.prediction.device.build if case.prediction is not None else None
        causes, checks = reorder_facts(build, case.model)
        return Diagnosis(causes=(*base.causes, *causes), checks=(*base.checks, *checks))

    def detect(self, host: HostContext) -> Detection:
        out = run_tool(["sycl-ls"])
        if out is None:
            return Detection(backend=self.name, reason="sycl-ls (oneAPI) is not installed or failed")
        devices = parse_sycl_ls(out, host.profiles)
        reason = None if devices else "sycl-ls listed no Level Zero GPU"
        return Detection(backend=self.name, devices=devices, reason=reason)


def parse_sycl_ls(text: str, profiles: ProfileDB) -> list[Device]:
    """The Level Zero GPUs `sycl-ls` lists (llama.cpp's SYCL backend runs on them; the same GPUs'
    OpenCL entries and the CPU are skipped), named without the runtime's version and driver."""
    devices = []
    for line in text.splitlines()[:256]:
        m = _SYCL_LS.match(line.strip())
        if m is not None:
            devices.append(gpu_device(profiles, "sycl", int(m[1]), m[2].strip(), None))
    return devices


BACKEND = SYCLBackend()


@hookimpl
def register_backends(register: Callable[[Backend], None]) -> None:
    register(BACKEND)

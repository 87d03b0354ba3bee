"""The SYCL backend: Intel GPUs through oneAPI's Level Zero runtime, by device name (`sycl-ls`);
bandwidth comes from the matching profile."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ggprof import Backend, Detection, EfficiencyBand, hookimpl, run_tool

if TYPE_CHECKING:  # annotations only: importing the plugin stays cheap
    from ggprof import BuildFacts, Device, HostContext, ProfileDB
from ggprof_backends._gpu import GPUBackend, gpu_device

# `[level_zero:gpu][level_zero:0] PLATFORM, DEVICE VERSION [DRIVER]` (oneAPI 2024.1 on), or an
# older runtime's `[ext_oneapi_level_zero:gpu:0] PLATFORM, DEVICE VERSION [DRIVER]`
_SYCL_LS = re.compile(
    r"^\[(?:ext_oneapi_)?level_zero:gpu(?:\]\[level_zero)?:(\d{1,4})\]\s+[^,]{1,200},\s+(.{1,200}?)\s+[\d.]+\s+\[[^\]]{0,80}\]\s*$"
)


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

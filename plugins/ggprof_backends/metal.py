"""The Metal backend: Apple silicon GPUs (unified memory). Chip name from sysctl, GPU
core count from system_profiler (it tells the M3 Max 30/40-core bins apart)."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from typing import TYPE_CHECKING

from ggprof import Backend, Detection, EfficiencyBand, hookimpl, run_tool

if TYPE_CHECKING:  # annotations only: importing the plugin stays cheap
    from ggprof import HostContext
from ggprof_backends._gpu import GPUBackend, gpu_device


class MetalBackend(GPUBackend):
    name = "metal"
    band = EfficiencyBand(
        low=0.55, high=0.85, source="assumption: llama.cpp Metal decode reaches 55-85% of unified-memory peak"
    )

    def detect(self, host: HostContext) -> Detection:
        if platform.system() != "Darwin" or platform.machine() != "arm64":
            return Detection(backend=self.name, reason="not an Apple silicon Mac")
        chip = (run_tool(["sysctl", "-n", "machdep.cpu.brand_string"]) or "").strip()
        if not chip.startswith("Apple"):
            return Detection(backend=self.name, reason=f"sysctl did not report an Apple chip ({chip!r})")
        cores = parse_gpu_cores(run_tool(["system_profiler", "SPDisplaysDataType", "-json"], timeout_s=15) or "")
        device = gpu_device(
            host.profiles,
            "metal",
            0,
            chip,
            host.facts.ram_total_bytes,
            gpu_cores=cores,
            unified_memory=True,
            memory_available_bytes=host.facts.ram_available_bytes,
        )
        return Detection(backend=self.name, devices=[device])


def parse_gpu_cores(text: str) -> int | None:
    """`sppci_cores` of the first Apple GPU in `system_profiler SPDisplaysDataType -json`."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    for item in data.get("SPDisplaysDataType", []) if isinstance(data, dict) else []:
        cores = item.get("sppci_cores") if isinstance(item, dict) else None
        if cores is not None and str(cores).isdigit():
            return int(cores)
    return None


BACKEND = MetalBackend()


@hookimpl
def register_backends(register: Callable[[Backend], None]) -> None:
    register(BACKEND)

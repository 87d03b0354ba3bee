"""The Vulkan backend: any GPU with a Vulkan driver, by device name (`vulkaninfo --summary`);
bandwidth comes from the matching profile."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ggprof import Backend, Detection, EfficiencyBand, hookimpl, run_tool

if TYPE_CHECKING:  # annotations only: importing the plugin stays cheap
    from ggprof import BuildFacts, Device, HostContext, ProfileDB
from ggprof_backends._diagnosis import AMDVLK_AHEAD_UNTIL_BUILD, AMDVLK_PREFILL_VS_RADV, HONEYKRISP_PREFILL_VS_METAL
from ggprof_backends._gpu import GPUBackend, gpu_device

AMDVLK = "AMD open-source driver"  # the name AMDVLK gives itself in ggml_vulkan's banner
AMDVLK_SLOW = (
    f"the AMDVLK driver: on a Radeon 8060S with llama.cpp b9187 its prompts ran at {AMDVLK_PREFILL_VS_RADV:.2f}x "
    f"of Mesa's RADV (up to b{AMDVLK_AHEAD_UNTIL_BUILD} it was ahead); try RADV"
)

HONEYKRISP = "Honeykrisp"  # Asahi Linux's Vulkan driver for Apple GPUs, as the banner names it
HONEYKRISP_SLOW = (
    f"Asahi's Honeykrisp driver: on llama.cpp's scoreboards an M1, M2 and M2 Pro ran prompts under it at "
    f"{HONEYKRISP_PREFILL_VS_METAL[0]:.2f}-{HONEYKRISP_PREFILL_VS_METAL[1]:.2f}x of the same chip's Metal result "
    "(macOS)"
)

_CPU_DEVICE_TYPES = ("PHYSICAL_DEVICE_TYPE_CPU",)


class VulkanBackend(GPUBackend):
    name = "vulkan"
    band = EfficiencyBand(low=0.45, high=0.8, source="assumption: llama.cpp Vulkan decode reaches 45-80% of peak")

    def build_causes(self, build: BuildFacts) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The driver the banner names: AMDVLK fell behind RADV at prompts on newer builds;
        Asahi's Honeykrisp runs them well short of Metal on the same chip."""
        driver = build.vulkan_driver
        if driver is None:
            return (), ()
        check = f"Vulkan driver: {driver}"
        number = build.known_number
        if is_driver(driver, AMDVLK, "AMDVLK") and (number is None or number > AMDVLK_AHEAD_UNTIL_BUILD):
            return (AMDVLK_SLOW,), (check,)
        if is_driver(driver, HONEYKRISP):
            return (HONEYKRISP_SLOW,), (check,)
        return (), (check,)

    def detect(self, host: HostContext) -> Detection:
        out = run_tool(["vulkaninfo", "--summary"])
        if out is None:
            return Detection(backend=self.name, reason="vulkaninfo is not installed or failed")
        devices = parse_vulkaninfo(out, host.profiles)
        return Detection(backend=self.name, devices=devices, reason=None if devices else "no Vulkan GPU listed")


def is_driver(driver: str, *names: str) -> bool:
    """Whether the banner's driver name (or a report's, any case) is one of `names`."""
    return driver.strip().casefold() in {n.casefold() for n in names}


def parse_vulkaninfo(text: str, profiles: ProfileDB) -> list[Device]:
    """GPU<n>: blocks of `vulkaninfo --summary`; software (CPU) devices such as llvmpipe skipped."""
    devices = []
    for block in re.split(r"^GPU(\d+):\s*$", text, flags=re.MULTILINE)[1:]:
        if block.strip().isdigit():
            index = int(block)
            continue
        name = re.search(r"deviceName\s*=\s*(.+)", block)
        dtype = re.search(r"deviceType\s*=\s*(\S+)", block)
        if not name or (dtype and dtype[1] in _CPU_DEVICE_TYPES):
            continue
        devices.append(gpu_device(profiles, "vulkan", index, name[1].strip(), None))
    return devices


BACKEND = VulkanBackend()


@hookimpl
def register_backends(register: Callable[[Backend], None]) -> None:
    register(BACKEND)

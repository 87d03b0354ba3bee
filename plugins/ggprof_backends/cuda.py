"""The CUDA backend: NVIDIA GPUs via NVML (ctypes), else `nvidia-smi`.

Bandwidth from NVML = 2 (double data rate) x max memory clock x bus width; nvidia-smi
does not report the bus width, so then the matching profile's figure is used (labelled).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING

from ggprof import Backend, Detection, EfficiencyBand, Figure, hookimpl, physical, run_tool

if TYPE_CHECKING:  # annotations only: importing the plugin stays cheap
    from ggprof import Device, HostContext, ProfileDB
from ggprof_backends._diagnosis import EMULATED_MMA_ARCHITECTURES, EMULATED_MMA_PREFILL_GAIN, MATRIX_UNITS_OVER_VECTOR
from ggprof_backends._gpu import GPUBackend, gpu_device

NVIDIA_SMI_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,name,memory.total,memory.free,clocks.max.memory",
    "--format=csv,noheader,nounits",
]
_NVML_CLOCK_MEM = 2


class CUDABackend(GPUBackend):
    name = "cuda"
    band = EfficiencyBand(low=0.6, high=0.9, source="assumption: llama.cpp CUDA decode reaches 60-90% of HBM/GDDR peak")

    def device_prefill_causes(self, device: Device) -> tuple[str, ...]:
        """A GPU of a tensor-core architecture without tensor cores (a GTX 16xx): llama.cpp picks its
        MMA kernels by compute capability and runs them emulated (_diagnosis.EMULATED_MMA_*)."""
        peak, vector = device.peak_flops, device.vector_flops
        if device.architecture not in EMULATED_MMA_ARCHITECTURES or peak is None or vector is None:
            return ()
        if peak.value > MATRIX_UNITS_OVER_VECTOR * vector.value:
            return ()
        low, high = EMULATED_MMA_PREFILL_GAIN
        return (
            f"tensor-core kernels emulated: llama.cpp picks its MMA kernels by compute capability, and this "
            f"{device.architecture} GPU has no tensor cores (a GTX 16xx reports 7.5 like an RTX 20xx); a build "
            f"that picks the plain kernels read a GTX 1660 Ti's prompts {low:g}x-{high:g}x faster",
        )

    def detect(self, host: HostContext) -> Detection:
        devices = detect_nvml(host.profiles)
        if devices is None:
            out = run_tool(NVIDIA_SMI_QUERY)
            if out is None:
                return Detection(backend=self.name, reason="no NVML library and no working nvidia-smi")
            devices = parse_nvidia_smi(out, host.profiles)
        if not devices:
            return Detection(backend=self.name, reason="NVIDIA tools found no GPU")
        return Detection(backend=self.name, devices=devices)


def parse_nvidia_smi(text: str, profiles: ProfileDB) -> list[Device]:
    """Rows of `index, name, memory.total [MiB], memory.free [MiB], clocks.max.memory [MHz]`."""
    devices = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5 or not parts[0].isdigit():
            continue
        total, free = _mib(parts[2]), _mib(parts[3])
        devices.append(gpu_device(profiles, "cuda", int(parts[0]), parts[1], total, memory_available_bytes=free))
    return devices


def _mib(text: str) -> int | None:
    """MiB as nvidia-smi prints them, as bytes: a figure no GPU has (1e300, negative, inf) is
    dropped with a note naming nvidia-smi."""
    try:
        value = float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]": not given
    given = physical("memory_bytes", value * (1 << 20), "nvidia-smi")
    return int(given) if given is not None else None


def detect_nvml(profiles: ProfileDB) -> list[Device] | None:
    """Devices from libnvidia-ml via ctypes; None when NVML is absent or fails to start."""
    lib = _load_nvml()
    if lib is None or lib.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint(0)
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        return [d for i in range(count.value) if (d := _nvml_device(lib, i, profiles)) is not None]
    finally:
        lib.nvmlShutdown()


def _load_nvml() -> ctypes.CDLL | None:
    import ctypes.util  # ~20 ms (it brings subprocess): only when NVML is looked for

    for name in ("libnvidia-ml.so.1", ctypes.util.find_library("nvidia-ml"), "nvml.dll"):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def _nvml_device(lib: ctypes.CDLL, index: int, profiles: ProfileDB) -> Device | None:
    handle = ctypes.c_void_p()
    if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
        return None
    name = ctypes.create_string_buffer(96)
    mem, clock, bus = _Memory(), ctypes.c_uint(0), ctypes.c_uint(0)
    lib.nvmlDeviceGetName(handle, name, 96)
    has_mem = lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) == 0
    has_clock = lib.nvmlDeviceGetMaxClockInfo(handle, _NVML_CLOCK_MEM, ctypes.byref(clock)) == 0
    has_bus = lib.nvmlDeviceGetMemoryBusWidth(handle, ctypes.byref(bus)) == 0
    bandwidth = None
    if has_clock and has_bus and clock.value and bus.value:
        bandwidth = nvml_bandwidth(clock.value, bus.value)
    return gpu_device(
        profiles,
        "cuda",
        index,
        name.value.decode(errors="replace"),
        mem.total if has_mem else None,
        bandwidth=bandwidth,
        memory_available_bytes=mem.free if has_mem else None,
    )


def nvml_bandwidth(max_memory_clock_mhz: int, bus_width_bits: int) -> Figure:
    value = 2 * max_memory_clock_mhz * 1e6 * bus_width_bits / 8
    return Figure(value, "os", f"NVML: 2 x {max_memory_clock_mhz} MHz x {bus_width_bits}-bit bus")


BACKEND = CUDABackend()


@hookimpl
def register_backends(register: Callable[[Backend], None]) -> None:
    register(BACKEND)

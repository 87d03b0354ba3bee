"""Devices: plain data about a memory pool and the compute next to it, with each figure's source.

What a backend's detection returns, what `--device ID` resolves to, and what the roofline
math in ggprof.physics.roofline takes. No behaviour beyond small derived properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ggprof.figures import Figure

MATRIX_CORES = ("none", "KHR_coopmat", "NV_coopmat2")  # what ggml_vulkan's banner says of them


@dataclass(frozen=True, kw_only=True)
class BuildFacts:
    """What is known of the llama.cpp build a result was measured with (a report's build line,
    llama-bench's build_number, a Vulkan device banner): the speed fits' build terms use them."""

    number: int | None = None  # llama.cpp's build number (b5315)
    date: str | None = None  # ISO date of the build (or of the result, when only that is known)
    matrix_cores: str | None = None  # Vulkan's banner: none, KHR_coopmat, NV_coopmat2

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.number, self.date, self.matrix_cores))


@dataclass(frozen=True, kw_only=True)
class Device:
    """A memory pool and the compute next to it: a CPU with its RAM, a GPU with its VRAM."""

    id: str
    name: str
    backend: str
    memory_bytes: int | None = None
    memory_source: str | None = None
    bandwidth: Figure | None = None  # bytes/s
    peak_flops: Figure | None = None  # FLOP/s
    profile_id: str | None = None
    unified_memory: bool = False
    llc_bytes: int | None = None
    memory_available_bytes: int | None = None
    notes: tuple[str, ...] = ()
    architecture: str | None = None  # from its profile: the chip generation the speed fits group by
    device_class: str | None = None  # from its profile: vendor and integrated/discrete (nvidia discrete)
    build: BuildFacts | None = None  # the build a reported result ran on, where the report says

    @property
    def bandwidth_bytes_per_s(self) -> float | None:
        return self.bandwidth.value if self.bandwidth else None

    @property
    def is_discrete_gpu(self) -> bool:
        """An accelerator with its own memory (layers not offloaded stay in host RAM)."""
        return self.backend != "cpu" and not self.unified_memory


@dataclass(frozen=True, kw_only=True)
class Detection:
    """What one backend found: devices, or the reason it found none."""

    backend: str
    devices: list[Device] = field(default_factory=list)
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class EfficiencyBand:
    """The fraction of the decode bandwidth ceiling llama.cpp reaches on a backend, and why."""

    low: float
    high: float
    source: str


@dataclass(frozen=True, kw_only=True)
class ExpectedSpeed:
    """The decode speed a backend's model expects, and what that rests on."""

    low_tok_s: float
    high_tok_s: float
    basis: str


def with_memory(device: Device, memory_bytes: int | None, source: str) -> Device:
    """The device with a user-given memory size (it also counts as free: nothing else is known)."""
    if memory_bytes is None:
        return device
    return replace(device, memory_bytes=memory_bytes, memory_available_bytes=memory_bytes, memory_source=source)

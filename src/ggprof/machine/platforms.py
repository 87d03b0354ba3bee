"""The RAM a named CPU's platform gives it (platforms.toml: each platform's memory kind, channels
and transfer rates, from its vendor's specifications). A report that names the CPU but not its
RAM (llama-bench's `cpu_info`, `check --cpu`) is judged with that platform's range of bandwidths
instead of every RAM a GPU's host might have."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from ggprof.figures import Figure
from ggprof.machine.device import Device
from ggprof.machine.target import Target

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TABLE = Path(__file__).with_name("platforms.toml")
MAX_CPU_NAME_CHARS = 200  # a CPU's name from a report: longer is not a CPU's name


@dataclass(frozen=True, kw_only=True)
class Platform:
    name: str
    match: tuple[str, ...]
    kind: str
    channels: int
    channels_low: int
    mt_s_low: int
    mt_s_high: int
    source: str

    @property
    def low_bytes_per_s(self) -> float:
        return self.channels_low * 8 * self.mt_s_low * 1e6

    @property
    def high_bytes_per_s(self) -> float:
        return self.channels * 8 * self.mt_s_high * 1e6

    def describe(self) -> str:
        chans = str(self.channels) if self.channels == self.channels_low else f"{self.channels_low}-{self.channels}"
        return (
            f"{self.name}: {chans} channels of {self.kind} at {self.mt_s_low}-{self.mt_s_high} MT/s, "
            f"{self.low_bytes_per_s / 1e9:.3g}-{self.high_bytes_per_s / 1e9:.3g} GB/s JEDEC peaks ({self.source})"
        )


@cache
def platforms() -> tuple[Platform, ...]:
    rows = tomllib.loads(TABLE.read_text())["platform"]
    return tuple(Platform(**{**r, "match": tuple(r["match"])}) for r in rows)


def platform_of(cpu: str) -> Platform | None:
    """The platform of a CPU named as its vendor or llama-bench writes it ("AMD Ryzen 9 7950X
    16-Core Processor", "Intel(R) Core(TM) i9-10900X CPU @ 3.70GHz"); None: not in the table."""
    name = re.sub(r"\s+", " ", cpu[:MAX_CPU_NAME_CHARS].lower().replace("(r)", "").replace("(tm)", ""))
    return next((p for p in platforms() if any(re.search(m, name) for m in p.match)), None)


def platform_ram(cpu: str) -> Device | None:
    """The host RAM of a named CPU whose RAM no one stated: its platform's fastest as the
    bandwidth judged against, its slowest kept as `bandwidth_low` (as ram_class does for a RAM
    known by its class only). None: the CPU's platform is not in the table."""
    p = platform_of(cpu)
    if p is None:
        return None
    detail = f"RAM not stated, the CPU's platform: {p.describe()}; --ram-bandwidth BW states it"
    return Device(
        id="ram",
        name=f"host RAM ({p.name}, not stated)",
        backend="cpu",
        bandwidth=Figure(p.high_bytes_per_s, "theoretical", detail),
        bandwidth_low=Figure(p.low_bytes_per_s, "theoretical", detail),
    )


def given_ram(bandwidth: Figure | None, cpu: str | None = None) -> Device | None:
    """The RAM beside a GPU as the user gave it: its bandwidth (--ram-bandwidth), else its CPU's
    platform (--cpu); None: neither given."""
    if bandwidth is not None:
        return Device(id="ram", name="host RAM", backend="cpu", bandwidth=bandwidth)
    return platform_ram(cpu) if cpu is not None else None


def with_platform_ram(target: Target, cpu: str) -> Target:
    """The target whose GPU's host RAM is the named CPU's platform's (its size, where given, kept);
    a device that is not a discrete GPU, or a CPU the table does not know, is left as it is."""
    ram = platform_ram(cpu)
    if ram is None or not target.device.is_discrete_gpu:
        return target
    size = target.cpu.memory_bytes if target.cpu is not None else None
    source = target.cpu.memory_source if target.cpu is not None else None
    return replace(target, cpu=replace(ram, memory_bytes=size, memory_source=source))

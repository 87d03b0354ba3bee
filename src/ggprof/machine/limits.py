"""The physical range of every figure a vendor or OS tool reports: what no real device has is
dropped, with a note naming the tool (nvidia-smi saying 1e300 MiB, udevadm 1e9 MT/s or 10,000
modules). One table, used wherever a tool's figure enters (built-in and third-party plugins
alike: `ggprof.physical`)."""

from __future__ import annotations

import math

from ggprof.machine.tools import note
from ggprof.units import clean_name

# figure -> (least, most, what it is); generous: far past any device of 2026, far below nonsense
PHYSICAL: dict[str, tuple[float, float, str]] = {
    "memory_bytes": (1 << 20, 1 << 50, "a device's memory"),  # 1 MiB .. 1 PiB
    "module_bytes": (1 << 24, 1 << 42, "a memory module's size"),  # 16 MiB .. 4 TiB
    "memory_modules": (1, 128, "memory modules in one machine"),
    "transfer_mts": (100, 30_000, "a memory's transfer rate (MT/s)"),  # DDR-200 .. past LPDDR6
    "clock_mhz": (1, 100_000, "a clock (MHz)"),
    "bandwidth_bytes_per_s": (1e8, 1e14, "a memory bandwidth"),  # 0.1 GB/s .. 100 TB/s
    "gpu_cores": (1, 1_000_000, "GPU cores"),
    "bus_width_bits": (8, 16_384, "a memory bus width (bits)"),
}


def physical(kind: str, value: float | int | None, tool: str) -> float | int | None:
    """`value` where it is a finite number in `kind`'s physical range; else None, with a note
    naming `tool` (nothing for a figure the tool did not give)."""
    if value is None:
        return None
    low, high, what = PHYSICAL[kind]
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an int of hundreds of digits
        number = math.inf
    if math.isfinite(number) and low <= number <= high:
        return value
    shown = clean_name(repr(value), 40)
    note(f"{clean_name(tool, 40)}: {what} of {shown} is outside any real device's ({low:g} to {high:g}); dropped")
    return None

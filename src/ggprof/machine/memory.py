"""Installed memory modules, where the OS tells without root, and the theoretical peak.

peak bytes/s = MT/s x 8 bytes x 64-bit channels; the channel count is inferred from the
populated modules (one module per channel) and always reported as inferred.
"""

from __future__ import annotations

import json
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ggprof.machine.limits import physical
from ggprof.machine.tools import run_tool
from ggprof.units import clean_name

# SMBIOS memory type codes (Win32_PhysicalMemory.SMBIOSMemoryType).
_SMBIOS_TYPES = {
    20: "DDR",
    21: "DDR2",
    24: "DDR3",
    26: "DDR4",
    27: "LPDDR",
    28: "LPDDR2",
    29: "LPDDR3",
    30: "LPDDR4",
    34: "DDR5",
    35: "LPDDR5",
}


@dataclass(frozen=True)
class MemoryModule:
    size_bytes: int
    type: str | None  # DDR4, DDR5, LPDDR5 ...
    speed_mts: int | None  # configured speed in MT/s (what the module runs at)


@dataclass(frozen=True)
class MemoryConfig:
    modules: tuple[MemoryModule, ...]
    source: str  # which tool said so

    @property
    def type(self) -> str | None:
        types = {m.type for m in self.modules if m.type}
        return types.pop() if len(types) == 1 else None

    @property
    def speed_mts(self) -> int | None:
        speeds = [m.speed_mts for m in self.modules if m.speed_mts]
        return min(speeds) if speeds else None

    @property
    def names_dram(self) -> bool:
        """The modules name a DRAM generation (DDR4, LPDDR5X ...) and a speed: a peak worth
        holding a measurement to (a VM's emulated modules say "RAM" or nothing)."""
        return bool(self.type and self.type.upper().startswith(("DDR", "LPDDR")) and self.speed_mts)

    @property
    def channels_inferred(self) -> int:
        return len(self.modules)

    @property
    def theoretical_bandwidth_bytes_per_s(self) -> float | None:
        if not self.speed_mts or not self.modules:
            return None
        return self.speed_mts * 1e6 * 8 * self.channels_inferred

    def describe(self) -> str:
        return (
            f"{self.type or 'memory'}-{self.speed_mts} MT/s x 8 B x {self.channels_inferred} channels "
            f"(channels inferred from {len(self.modules)} populated modules; {self.source})"
        )


def parse_udevadm(text: str) -> MemoryConfig | None:
    """`udevadm info -q property -p /devices/virtual/dmi/id` (Linux, no root needed)."""
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    indices = sorted({int(m[1]) for k in props if (m := re.match(r"MEMORY_DEVICE_(\d+)_", k))})
    modules = []
    for i in indices:
        size = _int(props.get(f"MEMORY_DEVICE_{i}_SIZE"))
        if not size or props.get(f"MEMORY_DEVICE_{i}_PRESENT") == "0":
            continue
        speed = _int(props.get(f"MEMORY_DEVICE_{i}_CONFIGURED_SPEED_MTS")) or _int(
            props.get(f"MEMORY_DEVICE_{i}_SPEED_MTS")
        )
        modules.append(_module(size, props.get(f"MEMORY_DEVICE_{i}_TYPE"), speed, "udevadm"))
    return _config(modules, "udevadm DMI", "udevadm")


def _json(text: str) -> Any:
    """A vendor tool's JSON, or None when it printed something else."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def parse_windows_cim(text: str) -> MemoryConfig | None:
    """`Get-CimInstance Win32_PhysicalMemory | ConvertTo-Json` (one object or a list)."""
    data = _json(text)
    if data is None:
        return None
    rows = data if isinstance(data, list) else [data]
    modules = []
    for row in rows:
        if not isinstance(row, dict) or not _int(row.get("Capacity")):
            continue
        speed = _int(row.get("ConfiguredClockSpeed")) or _int(row.get("Speed"))
        mtype = _SMBIOS_TYPES.get(_int(row.get("SMBIOSMemoryType")) or 0)
        modules.append(_module(_int(row["Capacity"]) or 0, mtype, speed, "Win32_PhysicalMemory"))
    return _config(modules, "Win32_PhysicalMemory", "Win32_PhysicalMemory")


def parse_system_profiler(text: str) -> MemoryConfig | None:
    """`system_profiler SPMemoryDataType -json` (Intel Macs list DIMMs; Apple silicon does not)."""
    data = _json(text)
    modules = []
    for group in data.get("SPMemoryDataType", []) if isinstance(data, dict) else []:
        for item in group.get("_items", []) if isinstance(group, dict) else []:
            size = _size_text(item.get("dimm_size", ""))
            speed = _int(str(item.get("dimm_speed", "")).split(" ")[0])
            if size:
                modules.append(_module(size, item.get("dimm_type"), speed, "system_profiler"))
    return _config(modules, "system_profiler", "system_profiler")


def parse_smbios(blob: bytes) -> MemoryConfig | None:
    """SMBIOS type 17 (Memory Device) records of a raw DMI table (/sys/firmware/dmi/tables/DMI)."""
    modules, pos = [], 0
    while pos + 4 <= len(blob):
        stype, length = blob[pos], blob[pos + 1]
        strings_end = blob.find(b"\0\0", pos + length)
        if length < 4 or strings_end < 0:
            break
        if stype == 17 and length >= 0x17:
            module = _smbios_module(blob[pos : pos + length])
            if module is not None:
                modules.append(_module(module.size_bytes, module.type, module.speed_mts, "SMBIOS"))
        if stype == 127:  # end of table
            break
        pos = strings_end + 2
    return _config(modules, "SMBIOS (/sys/firmware/dmi)", "SMBIOS")


def _smbios_module(rec: bytes) -> MemoryModule | None:
    size = int.from_bytes(rec[0x0C:0x0E], "little")
    if size in (0, 0xFFFF):
        return None  # an empty slot, or unknown size
    if size == 0x7FFF and len(rec) >= 0x20:
        size_bytes = (int.from_bytes(rec[0x1C:0x20], "little") & 0x7FFFFFFF) << 20
    else:
        size_bytes = (size & 0x7FFF) << (10 if size & 0x8000 else 20)
    speed = int.from_bytes(rec[0x15:0x17], "little")
    configured = int.from_bytes(rec[0x20:0x22], "little") if len(rec) >= 0x22 else 0
    mts = next((v for v in (configured, speed) if v not in (0, 0xFFFF)), None)
    return MemoryModule(size_bytes, _SMBIOS_TYPES.get(rec[0x12]), mts)


def detect_memory() -> MemoryConfig | None:
    system = platform.system()
    if system == "Linux":
        out = run_tool(["udevadm", "info", "-q", "property", "-p", "/devices/virtual/dmi/id"])
        found = parse_udevadm(out) if out else None
        if found is None:  # where permitted (usually root only)
            try:
                found = parse_smbios(Path("/sys/firmware/dmi/tables/DMI").read_bytes())
            except OSError:
                found = None
        return found
    if system == "Windows":
        out = run_tool(
            [
                "powershell",
                "-NoProfile",
                "-Command",
                "Get-CimInstance Win32_PhysicalMemory | Select-Object Capacity,Speed,"
                "ConfiguredClockSpeed,SMBIOSMemoryType | ConvertTo-Json",
            ],
            timeout_s=15,
        )
        return parse_windows_cim(out) if out else None
    if system == "Darwin":
        out = run_tool(["system_profiler", "SPMemoryDataType", "-json"], timeout_s=15)
        return parse_system_profiler(out) if out else None
    return None


def _module(size: int, mtype: object, speed: int | None, tool: str) -> MemoryModule | None:
    """A module as a tool described it; its size and speed each in their physical range (a
    figure outside it is dropped, with a note naming the tool), None without a size."""
    kept = physical("module_bytes", size, tool)
    if kept is None:
        return None
    mts = physical("transfer_mts", speed, tool)
    return MemoryModule(int(kept), clean_name(mtype, 20) if isinstance(mtype, str) else None, int(mts) if mts else None)


def _config(modules: list[MemoryModule | None], source: str, tool: str) -> MemoryConfig | None:
    """The modules a tool listed; more than any machine holds is no configuration (dropped, with
    a note): a peak of 10,000 channels would claim petabytes a second."""
    found = tuple(m for m in modules if m is not None)
    if not found or physical("memory_modules", len(found), tool) is None:
        return None
    return MemoryConfig(found, source)


def _int(value: object) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _size_text(text: str) -> int | None:
    m = re.match(r"^\s*(\d+)\s*(GB|MB)", str(text))
    return int(m[1]) * (1 << 30 if m[2] == "GB" else 1 << 20) if m else None

"""The ROCm backend: AMD GPUs via `amd-smi` (or `rocm-smi`); bandwidth from the profile."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ggprof import Backend, Detection, EfficiencyBand, hookimpl, physical, run_tool, with_gfx_target

if TYPE_CHECKING:  # annotations only: importing the plugin stays cheap
    from ggprof import BuildFacts, Device, HostContext, ProfileDB
from ggprof_backends._diagnosis import (
    FLASH_ATTN_NO_ROCWMMA_PREFILL,
    FLASH_ATTN_NO_ROCWMMA_UNTIL_BUILD,
    HIPBLASLT_OFF_PREFILL_NEW_ROCM,
    HIPBLASLT_OFF_PREFILL_OLD_ROCM,
)
from ggprof_backends._gpu import GPUBackend, gpu_device

_HIPBLASLT_EVIDENCE = (
    f"on a Radeon 8060S (gfx1151) prompts ran at {HIPBLASLT_OFF_PREFILL_OLD_ROCM:.2f}x of the same run with "
    f"ROCBLAS_USE_HIPBLASLT=1 under ROCm 6.4.3 ({HIPBLASLT_OFF_PREFILL_NEW_ROCM:.2f}x from ROCm 6.4.4)"
)
HIPBLASLT_OFF = f"rocBLAS without hipBLASLt: {_HIPBLASLT_EVIDENCE}; set ROCBLAS_USE_HIPBLASLT=1"
HIPBLASLT_UNKNOWN = (
    f"rocBLAS without hipBLASLt (ROCBLAS_USE_HIPBLASLT not 1; `ggprof profile` records it): {_HIPBLASLT_EVIDENCE}"
)
# unset: rocBLAS's own default decides, which was off on the 2025-08 builds measured; so the
# first cause to check, not a cause found
HIPBLASLT_UNSET = (
    f"rocBLAS without hipBLASLt (ROCBLAS_USE_HIPBLASLT not set: rocBLAS's default, off on the 2025-08 builds "
    f"measured): {_HIPBLASLT_EVIDENCE}; set ROCBLAS_USE_HIPBLASLT=1"
)


# a run cannot show whether its build had rocWMMA's kernels (no log line, JSON field or
# system_info entry names GGML_HIP_ROCWMMA_FATTN): a cause to check, never one found
FLASH_ATTN_NO_ROCWMMA = (
    f"flash attention on a build without rocWMMA's kernels (GGML_HIP_ROCWMMA_FATTN): on a Radeon 8060S "
    f"with builds of August 2025 prompts ran at {FLASH_ATTN_NO_ROCWMMA_PREFILL:.2f}x of the same run with -fa 0 "
    "(later builds do without them); compare -fa 0, or build with -DGGML_HIP_ROCWMMA_FATTN=ON"
)


class ROCmBackend(GPUBackend):
    name = "rocm"
    band = EfficiencyBand(low=0.5, high=0.85, source="assumption: llama.cpp HIP decode reaches 50-85% of peak")
    prefill_causes = (*GPUBackend.prefill_causes, HIPBLASLT_UNKNOWN)

    def build_causes(self, build: BuildFacts) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """rocBLAS's hipBLASLt switch, where the run's setting is known (and the run's flash
        attention, a check)."""
        fa = () if build.flash_attn is None else (f"flash attention {'on' if build.flash_attn else 'off'}",)
        setting = build.rocblas_use_hipblaslt
        if setting is None:
            return (), fa
        check = "ROCBLAS_USE_HIPBLASLT not set" if setting == "unset" else f"ROCBLAS_USE_HIPBLASLT={setting}"
        return ((), (check, *fa)) if setting in ("1", "unset") else ((HIPBLASLT_OFF,), (check, *fa))

    def prefill_causes_to_check(self, build: BuildFacts) -> tuple[str, ...]:
        """With the setting known, the hipBLASLt cause is ruled out (1) or first to check (unset);
        with flash attention on, on a build not known to be newer than those it slowed, the
        build's rocWMMA kernels are a cause to check."""
        setting = build.rocblas_use_hipblaslt
        if setting is None:
            causes = self.prefill_causes
        else:
            rest = tuple(c for c in self.prefill_causes if c != HIPBLASLT_UNKNOWN)
            causes = (HIPBLASLT_UNSET, *rest) if setting == "unset" else rest
        number = build.known_number
        if not build.flash_attn or (number is not None and number > FLASH_ATTN_NO_ROCWMMA_UNTIL_BUILD):
            return causes
        # first on a build known to be of those it slowed, last where the build is not known
        return (FLASH_ATTN_NO_ROCWMMA, *causes) if number is not None else (*causes, FLASH_ATTN_NO_ROCWMMA)

    def detect(self, host: HostContext) -> Detection:
        out = run_tool(["amd-smi", "static", "--asic", "--vram", "--json"])
        if out is not None:
            devices = parse_amd_smi(out, host.profiles)
            return Detection(backend=self.name, devices=devices, reason=None if devices else "amd-smi found no GPU")
        out = run_tool(["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"])
        if out is None:
            return Detection(backend=self.name, reason="neither amd-smi nor rocm-smi is installed or working")
        devices = parse_rocm_smi(out, host.profiles)
        return Detection(backend=self.name, devices=devices, reason=None if devices else "rocm-smi found no GPU")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def parse_amd_smi(text: str, profiles: ProfileDB) -> list[Device]:
    data = _json(text)
    rows = data if isinstance(data, list) else (data or {}).get("gpu_data", []) if isinstance(data, dict) else []
    devices = []
    for i, row in enumerate(r for r in rows if isinstance(r, dict)):
        given = row.get("asic")
        asic: dict[str, Any] = given if isinstance(given, dict) else {}
        vram = row.get("vram") or {}
        # a generic market name (a Strix Halo's "AMD Radeon Graphics") is matched by its gfx target
        name = with_gfx_target(
            str(asic.get("market_name") or asic.get("product_name") or "AMD GPU"), asic.get("target_graphics_version")
        )
        size = vram.get("size") if isinstance(vram, dict) else None
        mib = size.get("value") if isinstance(size, dict) else size
        memory = _bytes(mib, 1 << 20, "amd-smi")
        devices.append(gpu_device(profiles, "rocm", _index(row.get("gpu"), i), name, memory))
    return devices


def parse_rocm_smi(text: str, profiles: ProfileDB) -> list[Device]:
    data = _json(text)
    devices = []
    for key, row in data.items() if isinstance(data, dict) else []:
        if not key.startswith("card") or not isinstance(row, dict):
            continue
        name = row.get("Card Series") or row.get("Card series") or row.get("Card SKU") or "AMD GPU"
        name = with_gfx_target(str(name), row.get("GFX Version"))
        memory = _bytes(row.get("VRAM Total Memory (B)"), 1, "rocm-smi")
        devices.append(gpu_device(profiles, "rocm", _index(key[4:], 0), name, memory))
    return devices


def _bytes(given: object, unit: int, tool: str) -> int | None:
    """A memory figure a tool printed (a number, or its text), as bytes: one no GPU has is dropped
    with a note naming the tool."""
    if isinstance(given, bool) or not isinstance(given, (int, float, str)):
        return None
    try:
        value = float(given) * unit
    except (ValueError, OverflowError):
        return None
    kept = physical("memory_bytes", value, tool)
    return int(kept) if kept is not None else None


def _index(given: object, default: int) -> int:
    """A device's index as a tool printed it (its order where it printed none we can use)."""
    text = str(given)
    return int(text) if text.isdigit() and len(text) <= 4 else default


BACKEND = ROCmBackend()


@hookimpl
def register_backends(register: Callable[[Backend], None]) -> None:
    register(BACKEND)

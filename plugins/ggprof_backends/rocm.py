"""The ROCm backend: AMD GPUs via `amd-smi` (or `rocm-smi`); bandwidth from the profile."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ggprof import hookimpl
from ggprof.backend import Backend, Detection, Device, EfficiencyBand
from ggprof.host import HostContext
from ggprof.host.facts import run_tool
from ggprof.judge import Finding, JudgeCase
from ggprof_backends._gpu import GPUBackend, gpu_device


class ROCmBackend(GPUBackend):
    name = "rocm"
    band = EfficiencyBand(0.5, 0.85, "assumption: llama.cpp HIP decode reaches 50-85% of peak")

    def detect(self, host: HostContext) -> Detection:
        out = run_tool(["amd-smi", "static", "--asic", "--vram", "--json"])
        if out is not None:
            return (
                Detection(self.name, parse_amd_smi(out))
                if parse_amd_smi(out)
                else Detection(self.name, [], "amd-smi found no GPU")
            )
        out = run_tool(["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"])
        if out is None:
            return Detection(self.name, [], "neither amd-smi nor rocm-smi is installed or working")
        devices = parse_rocm_smi(out)
        return Detection(self.name, devices) if devices else Detection(self.name, [], "rocm-smi found no GPU")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def parse_amd_smi(text: str) -> list[Device]:
    data = _json(text)
    rows = data if isinstance(data, list) else (data or {}).get("gpu_data", []) if isinstance(data, dict) else []
    devices = []
    for i, row in enumerate(r for r in rows if isinstance(r, dict)):
        asic = row.get("asic") or {}
        vram = row.get("vram") or {}
        name = asic.get("market_name") or asic.get("product_name") or "AMD GPU"
        size = vram.get("size") if isinstance(vram, dict) else None
        mib = size.get("value") if isinstance(size, dict) else size
        memory = (
            int(float(mib) * (1 << 20))
            if isinstance(mib, (int, float, str)) and str(mib).replace(".", "").isdigit()
            else None
        )
        devices.append(gpu_device("rocm", int(row.get("gpu", i)), str(name), memory))
    return devices


def parse_rocm_smi(text: str) -> list[Device]:
    data = _json(text)
    devices = []
    for key, row in data.items() if isinstance(data, dict) else []:
        if not key.startswith("card") or not isinstance(row, dict):
            continue
        name = row.get("Card Series") or row.get("Card series") or row.get("Card SKU") or "AMD GPU"
        total = row.get("VRAM Total Memory (B)")
        memory = int(total) if isinstance(total, (int, str)) and str(total).isdigit() else None
        devices.append(gpu_device("rocm", int(key[4:] or 0), str(name), memory))
    return devices


BACKEND = ROCmBackend()


@hookimpl
def register_backends(register: Callable[[Backend], None]) -> None:
    register(BACKEND)


@hookimpl
def judge(case: JudgeCase) -> list[Finding]:
    return BACKEND.judge(case) if case.backend == BACKEND.name else []

"""ggprof: how fast should this GGUF model run here, how fast does it run, and is that believable.

The public plugin API: a plugin imports what it needs from here only, e.g.

    from ggprof import Backend, Detection, Device, EfficiencyBand, Finding, JudgeCase, hookimpl

Names are loaded on first use, so `import ggprof` (and `ggprof --version`) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_API = {
    "Backend": "ggprof.verdict.backend",
    "BenchParams": "ggprof.bench.results",
    "BenchResult": "ggprof.bench.results",
    "BenchRow": "ggprof.bench.results",
    "BuildFacts": "ggprof.machine.device",
    "Engine": "ggprof.engines",
    "ModelInfo": "ggprof.bench.results",
    "Causes": "ggprof.verdict.backend",
    "Diagnosis": "ggprof.verdict.backend",
    "Detection": "ggprof.machine.device",
    "Device": "ggprof.machine.device",
    "EfficiencyBand": "ggprof.machine.device",
    "ExpectedSpeed": "ggprof.machine.device",
    "Figure": "ggprof.figures",
    "Finding": "ggprof.verdict.finding",
    "HostContext": "ggprof.machine.host",
    "JudgeCase": "ggprof.verdict.finding",
    "ModelSpec": "ggprof.model.spec",
    "N_UBATCH": "ggprof.llamacpp",
    "SpeedFits": "ggprof.physics.expected",
    "Prediction": "ggprof.physics.roofline",
    "ProfileDB": "ggprof.machine.profiles",
    "RunContext": "ggprof.bench.context",
    "SwaPattern": "ggprof.model.spec",
    "physical": "ggprof.machine.limits",
    "run_tool": "ggprof.machine.tools",
    "speed_fits": "ggprof.calibration",
    "fmt_bytes": "ggprof.units",
    "fmt_rate": "ggprof.units",
    "sig3": "ggprof.units",
    "with_gfx_target": "ggprof.machine.profiles",
}
__all__ = [
    "N_UBATCH",
    "Backend",
    "BenchParams",
    "BenchResult",
    "BenchRow",
    "BuildFacts",
    "Causes",
    "Detection",
    "Device",
    "Diagnosis",
    "EfficiencyBand",
    "Engine",
    "ExpectedSpeed",
    "Figure",
    "Finding",
    "HostContext",
    "JudgeCase",
    "ModelInfo",
    "ModelSpec",
    "Prediction",
    "ProfileDB",
    "RunContext",
    "SpeedFits",
    "SwaPattern",
    "__version__",
    "fmt_bytes",
    "fmt_rate",
    "hookimpl",
    "physical",
    "run_tool",
    "sig3",
    "speed_fits",
    "with_gfx_target",
]

if TYPE_CHECKING:
    import pluggy

    hookimpl: pluggy.HookimplMarker
    from ggprof.bench.context import RunContext
    from ggprof.bench.results import BenchParams, BenchResult, BenchRow, ModelInfo
    from ggprof.calibration import speed_fits
    from ggprof.engines import Engine
    from ggprof.figures import Figure
    from ggprof.llamacpp import N_UBATCH
    from ggprof.machine.device import BuildFacts, Detection, Device, EfficiencyBand, ExpectedSpeed
    from ggprof.machine.host import HostContext
    from ggprof.machine.limits import physical
    from ggprof.machine.profiles import ProfileDB, with_gfx_target
    from ggprof.machine.tools import run_tool
    from ggprof.model.spec import ModelSpec, SwaPattern
    from ggprof.physics.expected import SpeedFits
    from ggprof.physics.roofline import Prediction
    from ggprof.units import fmt_bytes, fmt_rate, sig3
    from ggprof.verdict.backend import Backend, Causes, Diagnosis
    from ggprof.verdict.finding import Finding, JudgeCase


def __getattr__(name: str) -> Any:
    if name == "hookimpl":  # pluggy is imported by the first plugin, not by `ggprof --version`
        import pluggy

        marker = globals()["hookimpl"] = pluggy.HookimplMarker("ggprof")
        return marker
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'ggprof' has no attribute {name!r}")

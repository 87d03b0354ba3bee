"""Extensions: what the plugins add to the core, resolved once by the CLI and passed down."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ggprof.engines import EngineType
from ggprof.machine.profiles import ProfileDB
from ggprof.model.spec import SwaDefault
from ggprof.verdict.backend import Backend
from ggprof.verdict.judge import ExtraFindings, no_extra_findings


def no_swa_default(architecture: str) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class Extensions:
    """The backends and the engines by name, the hardware profiles (with plugins' folders), the architecture
    rules a GGUF may leave out, and the extra findings plugins add to every verdict."""

    backends: Mapping[str, Backend]
    profiles: ProfileDB
    engines: Mapping[str, EngineType] = field(default_factory=dict)
    swa_default: SwaDefault = no_swa_default
    extra_findings: ExtraFindings = no_extra_findings

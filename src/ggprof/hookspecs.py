"""The plugin contract (pluggy, project name `ggprof`, entry-point group `ggprof`).

A plugin is a module with functions named after these hooks and decorated with
`ggprof.hookimpl`. Built-in backends under plugins/ register through the same entry
points a third-party package uses. docs/plugins.md documents each hook with an example.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # annotations only: loading the plugin contract stays cheap
    from ggprof.engines import EngineType
    from ggprof.model.spec import SwaPattern
    from ggprof.verdict.backend import Backend
    from ggprof.verdict.finding import Finding, JudgeCase

hookspec = pluggy.HookspecMarker("ggprof")


@hookspec
def register_backends(register: Callable[[Backend], None]) -> None:
    """Register Backend objects: each detects its devices and knows its expected speed."""


@hookspec
def register_engines(register: Callable[[str, EngineType], None]) -> None:
    """Register engines, each by name with its factory (called with what follows `=` in
    `--engine NAME=OPTION`, or None) making an ggprof.engines.Engine: what runs llama.cpp."""


@hookspec(firstresult=True)
def swa_pattern(architecture: str) -> SwaPattern | None:
    """Which layers of `architecture` use the sliding window when its GGUF does not say."""


@hookspec
def profile_dirs() -> list[Path]:
    """Extra folders of hardware profile TOML files."""


@hookspec
def judge(case: JudgeCase) -> list[Finding]:
    """Extra findings about one measured or reported run (the run's backend judges it first)."""


@hookspec
def register_commands(cli: object) -> None:
    """Add commands to the `ggprof` Click group (`cli` is a click.Group)."""

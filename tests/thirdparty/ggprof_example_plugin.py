"""An outside package's ggprof plugin, used by the tests (installed via a .dist-info folder)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import click

from ggprof import hookimpl
from ggprof.backend import Backend, Detection, Device, EfficiencyBand
from ggprof.figures import Figure
from ggprof.judge import Finding, JudgeCase
from ggprof.model import SwaPattern


class ExampleAccelerator(Backend):
    name = "example"
    band = EfficiencyBand(0.4, 0.6, "example plugin")

    def detect(self, host: object) -> Detection:
        device = Device(
            "example:0",
            "Example Accelerator 9000",
            "example",
            8 * 10**9,
            "os",
            Figure(123e9, "os", "example tool"),
            None,
        )
        return Detection(self.name, [device])


@hookimpl
def register_backends(register: Callable[[Backend], None]) -> None:
    register(ExampleAccelerator())


@hookimpl
def swa_pattern(architecture: str) -> SwaPattern | None:
    return SwaPattern(3) if architecture == "examplearch" else None


@hookimpl
def profile_dirs() -> list[Path]:
    return [Path(os.environ["EXAMPLE_PROFILE_DIR"])] if "EXAMPLE_PROFILE_DIR" in os.environ else []


@hookimpl
def register_commands(cli: click.Group) -> None:
    @cli.command(name="example-hello")
    def hello() -> None:
        """Say hello from the example plugin."""
        click.echo("hello from the example plugin")


@hookimpl
def judge(case: JudgeCase) -> list[Finding]:
    """A reviewer's rule: a reported speed that is a round million deserves a second look."""
    if not os.environ.get("EXAMPLE_JUDGE") or case.measured_tg_tok_s is None:
        return []
    if case.measured_tg_tok_s % 1_000_000 == 0:
        return [
            Finding(
                "suspicious",
                "EXAMPLE_SUSPICIOUS_ROUND_NUMBER",
                "a suspiciously round number",
                observed=f"{case.measured_tg_tok_s:g} tok/s",
                plugin="example",
            )
        ]
    return []

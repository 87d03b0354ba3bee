"""An outside package's ggprof plugin, used by the tests (installed via a .dist-info folder)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import click

from ggprof import hookimpl
from ggprof.backend import Backend, Detection, Device, EfficiencyBand
from ggprof.figures import Figure
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

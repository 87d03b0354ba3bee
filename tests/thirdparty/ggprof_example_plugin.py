"""An outside package's ggprof plugin, used by the tests (installed via a .dist-info folder).

It imports only from ggprof's public API (the package root), as any third-party plugin should.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import click

from ggprof import (
    Backend,
    Detection,
    Device,
    EfficiencyBand,
    Figure,
    Finding,
    HostContext,
    JudgeCase,
    SwaPattern,
    hookimpl,
)


class ExampleAccelerator(Backend):
    name = "example"
    band = EfficiencyBand(low=0.4, high=0.6, source="example plugin")

    def detect(self, host: HostContext) -> Detection:
        device = Device(
            id="example:0",
            name="Example Accelerator 9000",
            backend="example",
            memory_bytes=8 * 10**9,
            memory_source="os",
            bandwidth=Figure(123e9, "os", "example tool"),
        )
        return Detection(backend=self.name, devices=[device])


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
                severity="suspicious",
                code="EXAMPLE_SUSPICIOUS_ROUND_NUMBER",
                title="a suspiciously round number",
                observed=f"{case.measured_tg_tok_s:g} tok/s",
                plugin="example",
            )
        ]
    return []

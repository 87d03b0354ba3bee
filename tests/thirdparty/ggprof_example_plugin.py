"""An outside package's ggprof plugin, used by the tests (installed via a .dist-info folder).

It imports only from ggprof's public API (the package root), as any third-party plugin should.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ggprof import (
    Backend,
    BenchResult,
    BenchRow,
    Detection,
    Device,
    EfficiencyBand,
    Engine,
    Figure,
    Finding,
    HostContext,
    JudgeCase,
    ModelInfo,
    RunContext,
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


class ReplayEngine(Engine):
    """Answers a run with the rows of a recorded llama-bench JSON file: --engine example-replay=FILE."""

    name = "example-replay"
    summary = "replays a recorded llama-bench JSON file (example plugin)"

    def run(self, spec: Any, params: Any, facts: Any, progress: Any = None) -> BenchResult:
        rows = json.loads(Path(self.option or "").read_text())
        bench = tuple(
            BenchRow(
                name=f"{'pp' if r['n_prompt'] else 'tg'}{r['n_prompt'] or r['n_gen']}",
                n_prompt=r["n_prompt"],
                n_gen=r["n_gen"],
                n_depth=r["n_depth"],
                samples_ns=tuple(r["samples_ns"]),
            )
            for r in rows
        )
        model = ModelInfo(
            model_filename=str(spec.path),
            model_type=rows[0]["model_type"],
            model_size=rows[0]["model_size"],
            model_n_params=rows[0]["model_n_params"],
            n_layer=spec.n_layers,
            n_vocab=spec.vocab_size,
        )
        context = RunContext(backends_used=("cpu",), engine=self.name, n_threads=rows[0]["n_threads"])
        return BenchResult(
            params=params, model=model, rows=bench, context=context, test_time=time.strftime("%Y"), elapsed_s=0.0
        )


@hookimpl
def register_engines(register: Callable[[str, Callable[[str | None], Engine]], None]) -> None:
    register(ReplayEngine.name, ReplayEngine)

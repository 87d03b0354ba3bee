"""The state a log's readers share while its lines go by: its runs, the formats seen."""

from __future__ import annotations

from ggprof.logs.records import (
    MAX_DEVICES,
    MAX_RUNS,
    MAX_SPEEDS,
    MAX_SPEEDS_IN_ALL,
    LogDevice,
    LogRun,
    Speed,
)
from ggprof.logs.text import Line


class ParserState:
    """What the readers of each family of lines share: the runs so far and the formats seen."""

    def __init__(self) -> None:
        self.runs: list[LogRun] = [LogRun()]
        self.formats: list[str] = []
        self.dropped = 0
        self.backend_of_devices: str | None = None  # the last `found N X devices`
        self.bench_columns: list[str] | None = None
        self.ollama: dict[str, tuple[str, Line]] = {}
        self.last_prefill: Speed | None = None
        self.sample: tuple[float, int] | None = None
        self.task_prompt: int | None = None
        self.similar = 0.0  # the slot's LCP similarity to the task's prompt (llama-server)
        self.draft_said: tuple[int, int] | None = None  # the last `draft acceptance` line's (kept, drafted)

    @property
    def run(self) -> LogRun:
        return self.runs[-1]

    def saw(self, fmt: str) -> None:
        if fmt not in self.formats:
            self.formats.append(fmt)

    def new_run_if_measured(self, line: Line) -> None:
        if self.run.speeds:
            self.runs.append(LogRun(first_line=line.number))
            # the new run may keep MAX_SPEEDS: the earliest runs make room (in all MAX_SPEEDS_IN_ALL)
            while len(self.runs) > MAX_RUNS or sum(len(r.speeds) for r in self.runs) > MAX_SPEEDS_IN_ALL - MAX_SPEEDS:
                self.runs.pop(0)
                self.dropped += 1
            self.last_prefill, self.sample, self.task_prompt = None, None, None

    def _device(self, d: LogDevice) -> None:
        devices = self.run.devices
        if any(x.index == d.index and x.backend == d.backend for x in devices):
            devices[:] = [x for x in devices if not (x.index == d.index and x.backend == d.backend)]
        if len(devices) < MAX_DEVICES:
            devices.append(d)

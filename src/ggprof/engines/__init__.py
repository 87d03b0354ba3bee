"""Engines: what runs llama.cpp for a measurement.

An engine takes the model, llama-bench's parameters and this host's facts, runs prefill
and decode, and answers a BenchResult whose context says which backend did the work. It
is a plugin axis (the `register_engines` hook): the built-in ones are

- `python`: llama.cpp through llama-cpp-python, in a crash-isolated child (the default);
- `llama-bench`: the user's own llama.cpp build, run as llama-bench with `-o jsonl`;
- `server`: a running llama-server, Ollama or LM Studio, measured through its HTTP API
  (`ggprof profile --server`, see ggprof.engines.server).

The CLI resolves the engines once (`--engine NAME[=OPTION]`) and passes the one chosen down.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar

from ggprof.errors import BadInputError
from ggprof.units import clean_name

if TYPE_CHECKING:
    from ggprof.bench.results import BenchParams, BenchResult
    from ggprof.machine.facts import HostFacts
    from ggprof.model.spec import ModelSpec

ProgressFn = Callable[[str, int, int], None]
DEFAULT_ENGINE = "python"


class Engine(ABC):
    """One way of running llama.cpp. `option` is what follows `=` in `--engine NAME=OPTION`
    (for llama-bench: the program's path)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""  # one line for `ggprof plugins` and the docs

    def __init__(self, option: str | None = None) -> None:
        self.option = option

    def compiled_backends(self) -> tuple[str, ...] | None:
        """The llama.cpp backends this engine's build has (ggprof names: cpu, cuda, metal,
        vulkan, rocm, sycl), known before it runs; None when only a run can tell."""
        return None

    def host_cpu_threads(self, facts: HostFacts) -> int | None:
        """The threads it will decode with when it is known, before it runs, to run on this
        host's CPU alone and with a thread count of its own (a local server's -t); None: the
        run's own -t decides (or only a run can tell where it runs)."""
        return None

    def describe(self) -> str:
        """What runs, in words, for the report's `run:` line."""
        return self.name

    @abstractmethod
    def run(
        self, spec: ModelSpec, params: BenchParams, facts: HostFacts, progress: ProgressFn | None = None
    ) -> BenchResult:
        """Run params' tests on spec's file. BadInputError when llama.cpp refuses the model or
        the engine's program is not usable; RunError when the run crashes, is killed or times
        out (naming what it measured before)."""


EngineType = Callable[[str | None], Engine]


def engine_from(text: str | None, engines: Mapping[str, EngineType]) -> Engine:
    """`NAME` or `NAME=OPTION` (e.g. `llama-bench=/opt/llama.cpp/build/bin/llama-bench`)."""
    name, _, option = (text or DEFAULT_ENGINE).partition("=")
    factory = engines.get(name.strip().lower())
    if factory is None:
        known = ", ".join(sorted(engines)) or "none"
        raise BadInputError(f"--engine {clean_name(name, 40)}: no such engine (known: {known})")
    return factory(option.strip() or None)

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ggprof.errors import BadInputError
from ggprof.units import clean_name

if TYPE_CHECKING:
    from ggprof.bench.results import BenchParams, BenchResult
    from ggprof.machine.facts import HostFacts
    from ggprof.machine.host import HostReport
    from ggprof.model.spec import ModelSpec, SwaDefault

ProgressFn = Callable[[str, int, int], None]
DEFAULT_ENGINE = "python"


@dataclass(frozen=True)
class ModelSource:
    """How the CLI turns a model argument into a ModelSpec, handed to an engine that resolves
    the model a run will use: `load(text)` reads a file, `ollama:NAME` or a store reference
    (None: the default synthetic model); `swa_default` is the plugins' architecture rules,
    for a header an engine builds itself."""

    load: Callable[[str | None], ModelSpec]
    swa_default: SwaDefault | None = None


# What `profile` may ask of an engine, by flag: (flag, the Engine attribute that says it can,
# what the flag measures). The CLI checks each flag given against the engine chosen.
CAPABILITIES = (
    ("-d", "can_depth", "decode at a KV depth (a cache filled to N tokens)"),
    ("--rpc", "can_rpc", "a model split over rpc-servers"),
    ("--threads-sweep", "can_sweep_threads", "prefill and decode at each thread count"),
    ("--concurrency", "can_serve_users", "several users at once"),
    ("--parallel", "can_batch", "several sequences decoded together in one context (a batch sweep)"),
)


@dataclass(frozen=True)
class EnginePlan:
    """What an engine knows before it runs, asked once per run (Engine.plan) and passed down:
    its name, its build's backends (None: only a run can tell) and the threads it decodes with
    on this host's CPU alone (None: the run's -t decides, or it may not run on this CPU)."""

    name: str
    compiled_backends: tuple[str, ...] | None
    host_cpu_threads: int | None


class Engine(ABC):
    """One way of running llama.cpp. `option` is what follows `=` in `--engine NAME=OPTION`
    (for llama-bench: the program's path)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""  # one line for `ggprof plugins` and the docs
    # what it can measure (CAPABILITIES: the flags that need each), as llm's models declare can_stream
    can_depth: ClassVar[bool] = True
    can_rpc: ClassVar[bool] = True
    can_sweep_threads: ClassVar[bool] = True
    can_serve_users: ClassVar[bool] = False
    can_batch: ClassVar[bool] = True

    def __init__(self, option: str | None = None) -> None:
        self.option = option
        self.timeout_s: float | None = None  # the run's --timeout, set before prepare (None: none given)

    def prepare(self, model: str | None) -> None:
        """Before anything is measured: fail now on what a bad option makes wrong (a server is
        found and identified here), given the model argument the run was asked for."""
        return None

    def resolve_model(self, model: str | None, source: ModelSource) -> ModelSpec:
        """The model a run will use: by default the argument given (or the default model);
        an engine that serves its own (a server) asks it."""
        return source.load(model)

    def attach(self, host: HostReport) -> None:
        """The host as it was described, before the run (what a local server needs of it)."""
        return None

    def planned_tests(self, params: BenchParams) -> int:
        """How many tests a run of `params` times (for the progress bar)."""
        return len(params.tests())

    def plan(self, facts: HostFacts) -> EnginePlan:
        """What it knows before the run, asked once: the value the pipeline passes down."""
        return EnginePlan(self.name, self.compiled_backends(), self.host_cpu_threads(facts))

    def compiled_backends(self) -> tuple[str, ...] | None:
        """The llama.cpp backends this engine's build has (ggprof names: cpu, cuda, metal,
        vulkan, rocm, sycl), known before it runs; None when only a run can tell."""
        return None

    def host_cpu_threads(self, facts: HostFacts) -> int | None:
        """The threads it will decode with when it is known, before it runs, to run on this
        host's CPU alone and with a thread count of its own (a local server's -t); None: the
        run's own -t decides (or only a run can tell where it runs)."""
        return None

    def runs_on_this_host(self) -> bool:
        """Whether its runs use this machine's CPUs (a server on another machine does not):
        then this machine's load before a run bears on the figures."""
        return True

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

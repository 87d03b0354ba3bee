"""The `python` engine: llama.cpp through llama-cpp-python, in a crash-isolated child
(`child.py`, supervised by `runner.py`). The default engine."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from ggprof.engines import Engine, ProgressFn

if TYPE_CHECKING:
    from ggprof.bench.results import BenchParams, BenchResult
    from ggprof.machine.facts import HostFacts
    from ggprof.model.spec import ModelSpec

# ggml's backend libraries as llama-cpp-python installs them (llama_cpp/lib/libggml-<name>.so),
# by ggprof's backend name; Metal may also be built into ggml itself on macOS.
BACKEND_LIBRARIES = {
    "cuda": "ggml-cuda",
    "vulkan": "ggml-vulkan",
    "rocm": "ggml-hip",
    "metal": "ggml-metal",
    "sycl": "ggml-sycl",
    "rpc": "ggml-rpc",
}


class PythonEngine(Engine):
    name = "python"
    summary = "llama.cpp through llama-cpp-python, in a crash-isolated child process (the default)"

    def compiled_backends(self) -> tuple[str, ...] | None:
        """From the libraries beside llama-cpp-python (found without importing it)."""
        try:
            found = importlib.util.find_spec("llama_cpp")
        except (ImportError, ValueError):
            return None
        if found is None or not found.origin:
            return None
        return backends_in(Path(found.origin).parent / "lib")

    def describe(self) -> str:
        from importlib import metadata

        try:
            version = metadata.version("llama-cpp-python")
        except metadata.PackageNotFoundError:
            version = "(not installed)"
        return f"llama.cpp via llama-cpp-python {version}"

    def run(
        self, spec: ModelSpec, params: BenchParams, facts: HostFacts, progress: ProgressFn | None = None
    ) -> BenchResult:
        from ggprof.engines.python.runner import run_bench

        if params.rpc and "rpc" not in (self.compiled_backends() or ()):
            from ggprof.errors import BadInputError
            from ggprof.llamacpp import rebuild_command

            raise BadInputError(
                f"--rpc needs llama.cpp's RPC backend, which this llama-cpp-python was built without: rebuild it "
                f"with {rebuild_command('rpc')}, or run llama.cpp's own llama-bench (built with -DGGML_RPC=on) "
                "with --engine llama-bench=PATH"
            )
        return run_bench(params, facts, progress=progress)


def backends_in(libdir: Path) -> tuple[str, ...] | None:
    """The backends whose ggml library is in `libdir` (cpu always); None if there is no such folder."""
    if not libdir.is_dir():
        return None
    names = {p.name.split(".")[0].removeprefix("lib") for p in libdir.iterdir()}
    return ("cpu", *sorted(b for b, lib in BACKEND_LIBRARIES.items() if lib in names))

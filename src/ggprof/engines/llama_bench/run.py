"""llama-bench running under supervision: its argument list from the run facts, JSONL rows
from its stdout, progress and the load log's offload and device lines from its stderr."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ggprof.bench.llamabench import MAX_ROW_SAMPLES, row_problem
from ggprof.bench.stopping import rates
from ggprof.bench.supervise import Supervised, ended_by
from ggprof.bounded import loads_bounded
from ggprof.engines import ProgressFn
from ggprof.errors import BadInputError, RunError
from ggprof.llamacpp import test_name
from ggprof.logs.patterns import (
    BENCH_PROGRESS,
    FLAG_REFUSED,
    MODEL_REFUSED,
    sycl_f16,
    sycl_reorder,
    vulkan_banner,
)
from ggprof.logs.records import LogDevice
from ggprof.logs.text import MAX_LINE_CHARS as MAX_LOG_LINE_CHARS
from ggprof.runfacts import bench_arguments
from ggprof.units import clean_name

if TYPE_CHECKING:
    from ggprof.bench.results import BenchParams

# llama-bench's avg_ts is the mean of its samples' tok/s (tools/llama-bench/llama-bench.cpp,
# get_ts): a row whose avg_ts its own samples_ns contradict by more than this is not its output
AVG_TS_TOLERANCE = 0.01
MAX_BANNERS = 64  # Vulkan device banners noted from one run's stderr
MAX_ROW_ITEMS = MAX_ROW_SAMPLES + 1_000  # a row's fields and its samples: what one JSONL line may parse into


def _arguments(p: BenchParams, amx: bool, more: Mapping[str, Any] | None = None) -> list[str]:
    """llama-bench's flags for these parameters; the defaults left out (older builds lack some).
    `--repack auto` turns repacking off on a CPU with AMX, as the python engine does: llama.cpp's
    AMX path segfaults on some of them (ggml-org/llama.cpp#20824). `more`: run facts beyond
    BenchParams' own (a server's placement: -ncmoe, -nkvo, -sm, -mg)."""
    args = ["-m", str(p.model), "-p", _ints(p.n_prompt), "-n", _ints(p.n_gen), "-r", str(p.reps)]
    if p.n_depth != (0,):
        args += ["-d", _ints(p.n_depth)]
    facts = p.facts() | dict(more or {})
    if facts["repack"] is None and amx:
        facts["repack"] = False
    args += bench_arguments(facts)
    if p.rpc:
        args += ["--rpc", ",".join(p.rpc)]
    return [*args, "-o", "jsonl", "--progress", "-v"]


def bench_command(program: Path, p: BenchParams, amx: bool, more: Mapping[str, Any] | None = None) -> list[str]:
    """The llama-bench command line one run of `p` is (what a report cites as its evidence)."""
    return [str(program), *_arguments(p, amx, more)]


def run_rows(program: Path, p: BenchParams, amx: bool, more: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """One llama-bench invocation of `p` (each test `p.reps` times), supervised as every run is:
    its rows as llama-bench wrote them, validated."""
    return _Run(program, _arguments(p, amx, more), p, None).rows()


def _ints(values: tuple[int, ...]) -> str:
    return ",".join(str(v) for v in values)


class _Run(Supervised):
    """llama-bench running: JSONL rows from stdout, progress from stderr, supervised as any
    llama.cpp program is (bench.supervise)."""

    def __init__(
        self, program: Path, args: list[str], params: BenchParams, progress: ProgressFn | None, what: str = "run"
    ) -> None:
        self.params, self.progress, self.what = params, progress, what
        self.tests = params.tests()
        self.banners: dict[int, LogDevice] = {}  # Vulkan device -> its banner
        self.sycl_f16: bool | None = None  # a SYCL build's GGML_SYCL_F16, as its stderr says
        self.sycl_reorder: bool | None = None  # a SYCL run's reorder optimizations (GGML_SYCL_ENABLE_OPT)
        try:
            super().__init__([str(program), *args], on_stderr=self._progress)
        except OSError as e:
            raise BadInputError(f"{clean_name(program)}: cannot run it ({clean_name(e, 120)})") from None

    def _progress(self, line: str) -> bool:
        """llama-bench's `benchmark 1/2: prompt run 3/5` lines drive the bar (and stay out of the
        tail); its Vulkan device banners are noted (what they say of matrix cores, the driver and
        int8 dot products), and a SYCL build's GGML_SYCL_F16 and reorder optimizations."""
        banner = vulkan_banner(line[:MAX_LOG_LINE_CHARS]) if "ggml_vulkan" in line else None  # a log line's bound
        if banner is not None and len(self.banners) < MAX_BANNERS:
            self.banners[banner.index] = banner
        f16 = sycl_f16(line[:MAX_LOG_LINE_CHARS]) if "GGML_SYCL_F16" in line else None
        if f16 is not None:
            self.sycl_f16 = f16
        reorder = sycl_reorder(line[:MAX_LOG_LINE_CHARS]) if "GGML_SYCL_" in line else None
        if reorder is not None:
            self.sycl_reorder = reorder
        m = BENCH_PROGRESS.search(line)
        if m is None:
            return False
        if self.progress:
            index = int(m[1]) - 1
            name = str(self.tests[index]["name"]) if index < len(self.tests) else "llama-bench"
            self.progress(name, int(m[4]), int(m[5]))
        return True

    def rows(self) -> list[dict[str, Any]]:
        """Every row, validated; RunError/BadInputError naming the rows finished before a fault."""
        rows: list[dict[str, Any]] = []
        timeout = self.params.timeout_s

        def timed_out() -> RunError:
            return RunError(
                f"{self._doing(rows)}: timed out after {timeout:g} s (--timeout); "
                f"llama-bench last said: {self.last_words()}{_kept(rows)}"
            )

        try:
            for line in self.output(timeout, timed_out):
                if line.strip():
                    rows.append(self._row(line, len(rows) + 1, rows))
            rc = self.proc.wait()
        finally:  # an interrupt, a timeout, a bad row: it ends, and every process it started
            if self.proc.poll() is None:
                self.kill()
            self.end_descendants()
        if rc != 0:
            self._fail(rc, rows)
        if not rows:
            raise RunError(f"{self._doing(rows)}: llama-bench printed no results; it last said: {self.last_words()}")
        return rows

    def _row(self, line: str, index: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
        try:
            row = loads_bounded(line, MAX_ROW_ITEMS)
        except (ValueError, RecursionError):
            row = None
        problem = row_problem(row) or self._unasked(row, rows)
        if problem:
            self.kill()
            raise RunError(
                f"{self._doing(rows)}: llama-bench's output line {index} is not a result row ({problem}): "
                f"{clean_name(line.strip(), 80)}{_kept(rows)}"
            )
        assert isinstance(row, dict)
        return row

    def _unasked(self, row: Any, rows: list[dict[str, Any]]) -> str | None:
        """Why a well-formed row is not one this run asked for (None: it is): a test not asked,
        one printed twice, another model, or an avg_ts its own samples contradict."""
        key: tuple[int, int, int] = (row["n_prompt"], row["n_gen"], row.get("n_depth", 0))
        asked = {(t["n_prompt"], t["n_gen"], t["n_depth"]) for t in self.tests}
        if key not in asked:
            return f"a test not asked for ({test_name(*key)})"
        if any((r["n_prompt"], r["n_gen"], r.get("n_depth", 0)) == key for r in rows):
            return f"{test_name(*key)} printed twice"
        named = row.get("model_filename")
        if isinstance(named, str) and named and named != str(self.params.model):
            return f"a row of another model ({clean_name(named, 60)})"
        own = statistics.fmean(rates(key[0] + key[1], row["samples_ns"]))
        if abs(row["avg_ts"] - own) > AVG_TS_TOLERANCE * own:
            return f"avg_ts {row['avg_ts']:.4g} t/s, while its samples_ns say {own:.4g} t/s"
        return None

    def _fail(self, rc: int, rows: list[dict[str, Any]]) -> None:
        words = self.last_words()
        if MODEL_REFUSED.search(words):
            raise BadInputError(f"{clean_name(self.params.model)}: llama-bench cannot load this model: {words}")
        if FLAG_REFUSED.search(words):
            raise BadInputError(f"llama-bench refused a flag (an older build?): {words}")
        raise RunError(f"{self._doing(rows)}: {ended_by(rc)}; llama-bench last said: {words}{_kept(rows)}")

    def _doing(self, rows: list[dict[str, Any]]) -> str:
        current = self.tests[len(rows)]["name"] if len(rows) < len(self.tests) else "finishing"
        p = self.params
        return (
            f"llama-bench {self.what} of {clean_name(p.model.name)} ({current}, threads {p.n_threads}, "
            f"ngl {p.n_gpu_layers})"
        )


def _kept(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    done = ", ".join(f"{test_name(r['n_prompt'], r['n_gen'], r['n_depth'])} {r['avg_ts']:.2f} t/s" for r in rows)
    return f"; measured before the fault: {done}"

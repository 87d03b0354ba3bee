"""The `llama-bench` engine: the user's own llama.cpp build (CUDA, Metal, Vulkan, ROCm, SYCL or
CPU), run as `llama-bench ... -o jsonl` with ggprof's test flags.

The program is `--engine llama-bench=PATH`, else `llama-bench` on PATH, else $LLAMA_BENCH.
Flags equal to llama-bench's defaults are left out, so that older builds (without `-d`,
`-fa auto` or `--repack`) still run the default tests. Rows stream from its stdout; its
stderr (`--progress`, and with `-v` llama.cpp's load log, which says how many layers were
offloaded) feeds the progress bar and the last words of a failure. The child runs in a
process group of its own: Ctrl-C, a timeout or a crash ends it, and the rows it finished
are named in the error. Its output is untrusted: every field is checked and bounded.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psutil

from ggprof.bench.context import RunContext, host_cores, rocblas_use_hipblaslt
from ggprof.bench.llamabench import MAX_ROW_SAMPLES
from ggprof.bench.results import BenchResult, BenchRow, ModelInfo, ThreadProbe
from ggprof.bench.stopping import (
    NOISE_PROBE_REPS,
    PROBE_NOT_NEEDED,
    PROBE_REPS,
    PROBE_TOKENS,
    ProbeSchedule,
    interval,
    rates,
    stop_key,
)
from ggprof.bench.supervise import kill_group, spawn
from ggprof.engines import Engine, ProgressFn
from ggprof.engines.llama_bench.run import _arguments, _Run
from ggprof.errors import BadInputError, RunError
from ggprof.files import is_regular, user_path
from ggprof.llamacpp import BACKEND_NAMES, backend_names, test_name
from ggprof.logs.patterns import BENCH_DEVICE
from ggprof.machine.load import cpu_times, others_load, own_cpu_s, sample_load
from ggprof.units import clean_name

if TYPE_CHECKING:
    from ggprof.bench.results import BenchParams
    from ggprof.bench.stopping import StopRule
    from ggprof.machine.facts import HostFacts
    from ggprof.model.spec import ModelSpec

ENV_VAR = "LLAMA_BENCH"
PROGRAM = "llama-bench"
# Without -r, llama-bench's first invocation runs each test this many times: another invocation
# costs a model load and a full-size warm-up per test, so the first asks for what a steady
# device needs to reach the 3% target (3 repetitions reach it at a CV up to 1.2%: Student's t
# with 2 degrees of freedom is 4.30) or a CPU run needs to lie wholly where its verdict is
# plausible; a test that is not known by then gets the repetitions its spread says it needs.
FIRST_REPS = 3
LIST_DEVICES_TIMEOUT_S = 20.0


class LlamaBenchEngine(Engine):
    name = "llama-bench"
    summary = "your own llama.cpp build: llama-bench[=PATH] (else llama-bench on PATH, else $LLAMA_BENCH)"
    can_batch = False  # llama-bench has no batched decode

    def program(self) -> Path:
        """The llama-bench to run; BadInputError (naming where it looked) if there is none."""
        if self.option:
            where = f"--engine llama-bench={clean_name(self.option)}"
            found = user_path(self.option, where)
        elif (on_path := shutil.which(PROGRAM)) is not None:
            where, found = f"{PROGRAM} on PATH", Path(on_path)
        elif os.environ.get(ENV_VAR):
            where = f"${ENV_VAR}={clean_name(os.environ[ENV_VAR])}"
            found = user_path(os.environ[ENV_VAR], where)
        else:
            raise BadInputError(
                f"the llama-bench engine needs llama-bench: give --engine llama-bench=PATH, put it on PATH, "
                f"or set ${ENV_VAR}"
            )
        if not is_regular(found) or not os.access(found, os.X_OK):
            raise BadInputError(f"{where}: not an executable file")
        return found

    def describe(self) -> str:
        return f"llama.cpp's llama-bench ({clean_name(self.program())})"

    def compiled_backends(self) -> tuple[str, ...] | None:
        """From `llama-bench --list-devices` (each device line names its backend); None if that
        fails. Asked once per engine: the program does not change during a run."""
        if not hasattr(self, "_compiled"):
            self._compiled = self._list_devices()
        return self._compiled

    def _list_devices(self) -> tuple[str, ...] | None:
        try:
            proc = spawn([str(self.program()), "--list-devices"], stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        except (OSError, BadInputError):
            return None
        try:
            out, _ = proc.communicate(timeout=LIST_DEVICES_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None
        finally:  # a timeout or Ctrl-C: the program and whatever it started end here
            if proc.poll() is None:
                kill_group(proc)
        if proc.returncode != 0 or "Available devices" not in out:
            return None
        found = {
            BACKEND_NAMES.get(m[1].lower(), m[1].lower())
            for line in out.splitlines()
            if (m := BENCH_DEVICE.match(line))
        }
        return ("cpu", *sorted(found - {"cpu"}))

    def run(
        self, spec: ModelSpec, params: BenchParams, facts: HostFacts, progress: ProgressFn | None = None
    ) -> BenchResult:
        if params.n_parallel:
            raise BadInputError("--parallel (a batch sweep) needs the python engine: llama-bench has no batched decode")
        program = self.program()
        t_start, wall0 = time.time(), time.monotonic()
        affinity = facts.cpus.affinity if facts.cpus else None
        load = sample_load(affinity, 0.1)  # others', on this run's CPUs
        load_before = 100 * load.share if load is not None else None
        # and over the run: every CPU's time less this process's and its llama-bench children's
        counters, own0, counted0 = cpu_times(), own_cpu_s(), time.monotonic()
        ram_before = int(psutil.virtual_memory().available)
        amx = "AMX_INT8" in facts.simd
        first_params = replace(params, reps=FIRST_REPS) if params.stop else params
        run = _Run(program, _arguments(first_params, amx), first_params, progress)
        rows = run.rows()
        # what an invocation costs besides its repetitions: start, model load, warm-ups
        overhead_s = max(time.monotonic() - wall0 - sum(sum(r["samples_ns"]) for r in rows) / 1e9, 0.0)
        probes: dict[int, ThreadProbe] = {}
        first = rows[0] if rows else {}
        cpu_only = backend_names(str(first.get("backends", "CPU"))) in {(), ("cpu",)} or params.n_gpu_layers == 0
        probe_threads = params.probe_threads if cpu_only and any(params.n_gen) else None
        probe_skipped = bool(probe_threads) and _decode_settled(params, rows)
        if probe_threads and not probe_skipped:
            probe_params = replace(params, n_prompt=(0,), n_gen=(PROBE_TOKENS,), reps=PROBE_REPS)
            probe_params = replace(probe_params, n_threads=probe_threads)
            probe = _Run(program, _arguments(probe_params, amx), probe_params, None, what="thread probe")
            for r in probe.rows():
                probes[int(r["n_depth"])] = ThreadProbe(
                    n_threads=probe_threads, n_gen=int(r["n_gen"]), samples_ns=tuple(r["samples_ns"])
                )
        reasons = _until_known(program, params, amx, rows, probes, overhead_s, progress) if params.stop else {}
        if probe_skipped:
            for i, r in enumerate(rows):
                if int(r["n_gen"]) and i in reasons:
                    reasons[i] += f"; {PROBE_NOT_NEEDED}"
        bench_rows = tuple(
            replace(_bench_row(r, probes.get(int(r["n_depth"])) if r["n_gen"] else None), stop_reason=reasons.get(i))
            for i, r in enumerate(rows)
        )
        wall = time.monotonic() - wall0
        during = others_load(counters, cpu_times(), affinity, own_cpu_s() - own0, time.monotonic() - counted0)
        return BenchResult(
            # llama-bench warms each test up with its whole size; without -r, more invocations
            # add repetitions to the tests whose answer is not known yet (_until_known)
            params=replace(
                params,
                warmup_prompt=None,
                stop=replace(params.stop, min_reps=FIRST_REPS, single_margin=0.0) if params.stop else None,
            ),
            model=ModelInfo(
                model_filename=str(params.model),
                model_type=clean_name(first.get("model_type", spec.architecture), 80),
                model_size=int(first.get("model_size", spec.file_size_bytes)),
                model_n_params=int(first.get("model_n_params", spec.n_params)),
                n_layer=spec.n_layers,
                n_vocab=spec.vocab_size,
            ),
            rows=bench_rows,
            context=replace(
                _context(params, facts, first, run, load_before, ram_before),
                cpu_load_during_percent=100 * during.share if during is not None else None,
            ),
            test_time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
            elapsed_s=wall,
        )


def _decode_settled(params: BenchParams, rows: list[dict[str, Any]]) -> bool:
    """Whether every decode test's first repetitions lie wholly in the range where its verdict
    is plausible without a thread probe (the probe only lowers that range's low end): then the
    probe, another llama-bench invocation, is not run."""
    if params.stop is None:
        return False
    rule = params.stop.for_backends(("cpu",))
    decode = [r for r in rows if int(r["n_gen"])]
    schedules = [
        (ProbeSchedule(rule, stop_key(int(r["n_prompt"]), int(r["n_gen"]), int(r["n_depth"])), wanted=True), r)
        for r in decode
    ]
    return bool(decode) and all(s.after(_rates(r), probed=False) is False for s, r in schedules)


def _until_known(
    program: Path,
    params: BenchParams,
    amx: bool,
    rows: list[dict[str, Any]],
    probes: dict[int, ThreadProbe],
    overhead_s: float,
    progress: ProgressFn | None,
) -> dict[int, str]:
    """Repeat the tests whose answer is not known yet (params.stop) in further llama-bench
    invocations, each asking for the repetitions the test's spread says it needs, until every
    test has a reason to stop; but not where an invocation's cost besides its repetitions
    (`overhead_s`, as the first one took: a large model's load, weights sent to rpc-servers)
    exceeds the time of the repetitions it would add. Extends each row's samples_ns in place;
    returns the reasons by row index."""
    assert params.stop is not None
    used = backend_names(str(rows[0].get("backends", "CPU"))) if rows else ()
    rule, reasons = params.stop.for_backends(used or ("cpu",)), {}
    while True:
        pending: dict[tuple[int, int, int], int] = {}
        for i, r in enumerate(rows):
            if i in reasons:
                continue
            n_prompt, n_gen, depth = int(r["n_prompt"]), int(r["n_gen"]), int(r["n_depth"])
            probe = probes.get(depth) if n_gen else None
            reason = rule.reason(_rates(r), (), stop_key(n_prompt, n_gen, depth), probe.tok_s if probe else None)
            if reason:
                reasons[i] = reason
            else:
                pending[(n_prompt, n_gen, depth)] = i
        if not pending:
            return reasons
        reps = max(1, *(_wanted(rule, _rates(rows[i])) for i in pending.values()))
        measuring_s = reps * sum(statistics.fmean(rows[i]["samples_ns"]) for i in pending.values()) / 1e9
        if overhead_s > measuring_s:
            for i in pending.values():
                rates = _rates(rows[i])
                reasons[i] = (
                    f"stopped after {len(rates)}: {interval(rates)}; {reps} more would take another llama-bench "
                    f"invocation, {overhead_s:.0f} s of loading and warm-up for {measuring_s:.0f} s of measuring"
                )
            return reasons
        again = replace(
            params,
            n_prompt=tuple(sorted({p for p, _, _ in pending if p})) or (0,),
            n_gen=tuple(sorted({g for _, g, _ in pending if g})) or (0,),
            n_depth=tuple(sorted({d for _, _, d in pending})),
            reps=reps,
        )
        try:
            more = _Run(program, _arguments(again, amx), again, progress, what="run, more repetitions").rows()
        except RunError as e:  # what the first invocations measured stands; the reason says why it stopped
            more, failed = [], f": another llama-bench invocation failed ({clean_name(e, 200)})"
        else:
            failed = ": llama-bench ran no more repetitions of it"
        for r in more:
            key = (int(r["n_prompt"]), int(r["n_gen"]), int(r["n_depth"]))
            if key in pending:  # the same test: its samples join the first ones (a cross-product extra does not)
                i = pending.pop(key)
                rows[i]["samples_ns"] = [*rows[i]["samples_ns"], *r["samples_ns"]][:MAX_ROW_SAMPLES]
        for i in pending.values():  # never measured again: stop rather than ask forever
            reasons[i] = f"stopped after {len(rows[i]['samples_ns'])}{failed}"


def _rates(row: dict[str, Any]) -> list[float]:
    """A llama-bench row's tok/s, repetition by repetition."""
    return rates(row["n_prompt"] + row["n_gen"], row["samples_ns"])


def _wanted(rule: StopRule, tok_s: list[float]) -> int:
    """The repetitions a test still needs at its spread; where the cap would not get there
    either, as many as tell it is too noisy to pin down (as the python engine does)."""
    needed = rule.needed(tok_s)
    return (NOISE_PROBE_REPS if needed > rule.max_reps else needed) - len(tok_s)


T = TypeVar("T")


def _agreed(said: list[T]) -> T | None:
    """What the run's Vulkan devices' banners said of one fact: one answer where they all agree
    (a run over several devices that differ has none)."""
    values = set(said)
    return values.pop() if len(values) == 1 else None


def _bench_row(r: dict[str, Any], probe: ThreadProbe | None) -> BenchRow:
    return BenchRow(
        name=test_name(r["n_prompt"], r["n_gen"], r["n_depth"]),
        n_prompt=r["n_prompt"],
        n_gen=r["n_gen"],
        n_depth=r["n_depth"],
        samples_ns=tuple(r["samples_ns"]),
        probe=probe,
    )


def _context(
    params: BenchParams, facts: HostFacts, row: dict[str, Any], run: _Run, load_before: float | None, ram_before: int
) -> RunContext:
    compiled = backend_names(str(row.get("backends", "CPU"))) or ("cpu",)
    gpus = tuple(b for b in compiled if b != "cpu")
    offloaded = run.offloaded
    if not gpus or params.n_gpu_layers == 0 or (offloaded is not None and offloaded[0] == 0):
        used: tuple[str, ...] = ("cpu",)
    elif offloaded is not None and offloaded[0] < offloaded[1]:
        used = (*gpus, "cpu")
    else:
        used = gpus
    return RunContext(
        backends_used=used,
        engine=LlamaBenchEngine.name,
        build_commit=clean_name(row["build_commit"], 40) if row.get("build_commit") else None,
        build_number=row.get("build_number"),
        matrix_cores=_agreed([b.matrix_cores for b in run.banners.values()]),
        vulkan_driver=_agreed([b.driver for b in run.banners.values()]),
        int_dot=_agreed([b.int_dot for b in run.banners.values()]),
        rocblas_use_hipblaslt=rocblas_use_hipblaslt(used),
        sycl_f16=run.sycl_f16 if "sycl" in used else None,
        sycl_reorder=run.sycl_reorder if "sycl" in used else None,
        flash_attn=params.flash_attn_used,
        n_ubatch=params.physical_batch,
        cpu_model=clean_name(row.get("cpu_info") or facts.cpu_model or "", 120) or None,
        gpu_info=clean_name(row.get("gpu_info", ""), 200),
        n_threads=params.n_threads,
        **host_cores(facts),
        n_gpu_layers_requested=params.n_gpu_layers,
        # a CPU-only build logs "offloaded N/N layers to GPU" too: no GPU backend, nothing offloaded
        n_gpu_layers_offloaded=0 if not gpus else offloaded[0] if offloaded else None,
        n_layers=offloaded[1] if offloaded else None,
        backends_compiled=("cpu", *gpus),
        gpu_offload_supported=bool(gpus),
        cpu_load_before_percent=load_before,
        ram_available_before_bytes=ram_before,
        ram_available_after_bytes=int(psutil.virtual_memory().available),
        governor=facts.governor,
        repack=row["repack"] if isinstance(row.get("repack"), bool) else None,
    )

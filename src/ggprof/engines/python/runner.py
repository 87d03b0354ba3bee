"""The parent side of `ggprof bench`: supervise the llama.cpp child, never die with it.

The child (ggprof.engines.python.child) runs in its own process group. An abort, a segfault, an
OOM kill or a timeout becomes one error naming what was running, the signal or exit
code, and the last thing llama.cpp printed. The run's context (host load, free RAM,
swap, page cache, threads, offloaded layers, llama.cpp's build) is recorded around it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil

from ggprof.bench.context import RunContext, host_cores, rocblas_use_hipblaslt
from ggprof.bench.results import BenchParams, BenchResult, BenchRow, ModelInfo, ThreadProbe
from ggprof.bench.supervise import Supervised, ended_by
from ggprof.engines.python.child import EXIT_LOAD_FAILED
from ggprof.errors import BadInputError, RunError
from ggprof.logs.patterns import SIMD_COMPILED
from ggprof.machine.facts import HostFacts, cpu_clock, page_cache_resident_fraction
from ggprof.machine.load import cpu_times, others_load, own_cpu_s, sample_load
from ggprof.units import clean

ProgressFn = Callable[[str, int, int], None]


class _Child(Supervised):
    """The running child (ggprof.engines.python.child): its protocol lines as events, supervised as any
    llama.cpp program is (bench.supervise)."""

    def __init__(self, params: BenchParams) -> None:
        super().__init__(
            [sys.executable, "-m", "ggprof.engines.python.child"],
            stdin=json.dumps(params.request()),
            on_stderr=lambda line: "amx repack tensor" in line,  # one per tensor: noise, not news
            max_line_chars=-1,  # ggprof's own protocol: a row carries every step's time
        )

    def events(self, timeout_s: float | None, on_timeout: Callable[[], Exception]) -> Iterator[dict[str, Any]]:
        """Its protocol events until it closes stdout; a line that is not one joins the log tail."""
        for line in self.output(timeout_s, on_timeout):
            try:
                event = json.loads(line)
            except (ValueError, RecursionError):
                event = None
            if isinstance(event, dict):
                yield event
            else:
                self.log.append(f"(unparsable protocol line) {clean(line.strip()[:200])}")


def run_bench(params: BenchParams, facts: HostFacts, progress: ProgressFn | None = None) -> BenchResult:
    """Run the tests in a child process; BadInputError if llama.cpp refuses the model, RunError if
    the child crashes, is killed, or runs past `params.timeout_s`. `facts`: this host's, gathered
    once by the caller, for the run context."""
    before = _host_state(params, facts)
    t_start = time.time()
    affinity = facts.cpus.affinity if facts.cpus else None
    wall0, sys0, own0 = time.monotonic(), cpu_times(), own_cpu_s(children=False)
    child = _Child(params)
    events: dict[str, Any] = {
        "rows": [],
        "notes": [],
        "current": "loading the model",
        "model_filename": str(params.model),
    }
    child_cpu = 0.0

    def timed_out() -> RunError:
        return RunError(
            f"{_what(params, events)}: timed out after {params.timeout_s:g} s "
            f"(--timeout); llama.cpp last said: {child.last_words()}"
        )

    try:
        for event in child.events(params.timeout_s, timed_out):
            child_cpu = _child_cpu(child.proc.pid, child_cpu)
            _handle(event, events, progress)
        rc = child.proc.wait()
    finally:  # an interrupt, a timeout, a failure here: the child (and its process group) ends with us
        if child.proc.poll() is None:
            child.kill()
        child.end_descendants()
    if rc != 0 or "done" not in events:
        _raise_failure(params, events, child, rc)
    wall = time.monotonic() - wall0
    own = child_cpu + own_cpu_s(children=False) - own0  # the child's time, and this process's
    load = others_load(sys0, cpu_times(), affinity, own, wall)
    during = 100 * load.share if load is not None else None
    context = _context(params, facts, events, child, before, _host_state(params, facts, after=True), during)
    return BenchResult(
        params=params,
        model=ModelInfo(**events["model"]),
        rows=tuple(events["rows"]),
        context=context,
        test_time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
        elapsed_s=wall,
        notes=tuple(events["notes"]),
    )


def _handle(event: dict[str, Any], events: dict[str, Any], progress: ProgressFn | None) -> None:
    kind = event.pop("event")
    if kind == "system":
        events["system"] = event
        events["current"] = "loading the model"
    elif kind == "model":
        events["model"] = {
            "model_filename": events.get("model_filename", ""),
            **{k: event[k] for k in ("model_type", "model_size", "model_n_params", "n_layer", "n_vocab")},
        }
    elif kind == "progress":
        events["current"] = event["test"]
        if progress:
            progress(event["test"], event["rep"], event["reps"])
    elif kind == "row":
        probe = event.get("probe")
        row = BenchRow(
            name=event["name"],
            n_prompt=event["n_prompt"],
            n_gen=event["n_gen"],
            n_depth=event["n_depth"],
            samples_ns=tuple(event["samples_ns"]),
            ttft_ns=tuple(event["ttft_ns"]),
            itl_ns=tuple(event["itl_ns"]),
            n_parallel=int(event.get("n_parallel", 1)),
            stop_reason=event.get("stop_reason"),
            probe=ThreadProbe(n_threads=probe["n_threads"], n_gen=probe["n_gen"], samples_ns=tuple(probe["samples_ns"]))
            if probe
            else None,
        )
        events["rows"].append(row)
    elif kind == "note":
        events["notes"].append(event["message"])
    elif kind == "error":
        events["error"] = event
    elif kind == "done":
        events["done"] = True


def _what(params: BenchParams, events: dict[str, Any]) -> str:
    return (
        f"llama.cpp run of {params.model.name} ({events['current']}, threads {params.n_threads}, "
        f"ngl {params.n_gpu_layers})"
    )


def _raise_failure(params: BenchParams, events: dict[str, Any], child: _Child, rc: int) -> None:
    words = child.last_words()
    error = events.get("error")
    if rc == EXIT_LOAD_FAILED or (error and error.get("kind") == "load"):
        raise BadInputError(f"{params.model}: llama.cpp cannot load this model: {words}")
    detail = f": {error['message']}" if error and rc >= 0 else ""
    raise RunError(f"{_what(params, events)}: {ended_by(rc)}{detail}; llama.cpp last said: {words}")


def _child_cpu(pid: int, last: float) -> float:
    """The child's CPU seconds so far (kept from the last reading once it has exited)."""
    try:
        return own_cpu_s(pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return last


def _host_state(params: BenchParams, facts: HostFacts, after: bool = False) -> dict[str, Any]:
    vm, swap = psutil.virtual_memory(), psutil.swap_memory()
    state: dict[str, Any] = {"ram_available": int(vm.available), "swap_used": int(swap.used), "clock": cpu_clock()}
    if not after:
        load = sample_load(facts.cpus.affinity if facts.cpus else None, 0.2)  # others', on this run's CPUs
        state["cpu_load"] = 100 * load.share if load is not None else None
        state["page_cache"] = page_cache_resident_fraction(params.model)
    return state


def _context(
    params: BenchParams,
    facts: HostFacts,
    events: dict[str, Any],
    child: _Child,
    before: dict[str, Any],
    after: dict[str, Any],
    during: float | None,
) -> RunContext:
    system = events.get("system", {})
    info = system.get("system_info", "")
    named = {part.split(":")[0].strip().lower() for part in info.split("|") if ":" in part}
    # llama.cpp's system info names the compute backends, not RPC: the child registered the
    # rpc-servers itself, and layers offloaded then went to them
    backends = tuple(sorted(named | ({"rpc"} if params.rpc else set())))
    offloaded = child.offloaded[0] if child.offloaded else 0
    used = (
        ("cpu",)
        if not offloaded
        else tuple(b for b in backends if b != "cpu")
        + (("cpu",) if child.offloaded and child.offloaded[0] < child.offloaded[1] else ())
    )
    notes = list(events["notes"])
    if not system.get("repack", True):
        notes.append("repacking buffers off (llama.cpp's AMX path segfaults on some machines: llama.cpp#20824)")
    return RunContext(
        backends_used=used,
        rocblas_use_hipblaslt=rocblas_use_hipblaslt(used),
        flash_attn=params.flash_attn_used,
        n_ubatch=params.physical_batch,
        cpu_model=facts.cpu_model,
        n_threads=params.n_threads,
        **host_cores(facts),
        n_gpu_layers_requested=params.n_gpu_layers,
        n_gpu_layers_offloaded=offloaded,
        n_layers=events["model"]["n_layer"],
        system_info=info,
        simd_compiled=tuple(SIMD_COMPILED.findall(info)),
        backends_compiled=backends or ("cpu",),
        gpu_offload_supported=system.get("gpu_offload"),
        llama_cpp_python_version=system.get("llama_cpp_python"),
        cpu_load_before_percent=before["cpu_load"],
        cpu_load_during_percent=during,
        ram_available_before_bytes=before["ram_available"],
        ram_available_after_bytes=after["ram_available"],
        swap_used_before_bytes=before["swap_used"],
        swap_used_after_bytes=after["swap_used"],
        page_cache_fraction_before=before["page_cache"],
        governor=facts.governor,
        cpu_freq_max_mhz=before["clock"].max_mhz,
        cpu_freq_before_mhz=before["clock"].current_mhz,
        cpu_freq_after_mhz=after["clock"].current_mhz,
        repack=bool(system.get("repack", True)),
        notes=tuple(notes),
    )

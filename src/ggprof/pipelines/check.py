"""`ggprof check`: judge numbers someone reported (a bug report, a README, llama-bench JSON),
running nothing. This host is described once per command, whatever the number of rows."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ggprof.bench.context import RunContext
from ggprof.bench.llamabench import LlamaBenchRow, backend_of_row
from ggprof.bench.roofs import StoredRoof
from ggprof.calibration import reach_band
from ggprof.errors import NoBandwidthError
from ggprof.llamacpp import CACHE_TYPE, N_PROMPT
from ggprof.machine.device import BuildFacts, Device, with_build
from ggprof.machine.host import HostReport, describe_host
from ggprof.machine.platforms import platform_ram
from ggprof.machine.target import DeviceChoice, Target, resolve_target, with_spill
from ggprof.model.spec import ModelSpec
from ggprof.physics.placement import ram_class
from ggprof.physics.roofline import PredictInputs, Prediction, drafted, splits_to_cpu
from ggprof.physics.speculative import Drafting
from ggprof.pipelines.extensions import Extensions
from ggprof.pipelines.judged import Judged
from ggprof.pipelines.placements import FIT_LEAVES, FitAsked, Fitted, derived
from ggprof.pipelines.predict import kept_roof, roof_note
from ggprof.pipelines.profile import prediction_for
from ggprof.pipelines.rpc import SplitSetup, predict_split
from ggprof.units import tps
from ggprof.verdict.finding import Finding, JudgeCase, Verdict
from ggprof.verdict.judge import judge

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Reported:
    """A reported result: decode and/or prefill speed and what the report says about the run."""

    tg_tok_s: float | None = None
    pp_tok_s: float | None = None
    depth: int = 0
    n_prompt: int = N_PROMPT
    backend: str | None = None
    n_gpu_layers: int | None = None
    placement: tuple[tuple[str, Any], ...] = ()  # where the rest of the weights lived (ggprof.runfacts.PLACEMENT)
    drafting: Drafting | None = None  # speculative decoding: how it drafted (its decode is judged per verify step)
    cv: float | None = None
    label: str = "reported"
    context: RunContext | None = None  # what the report says about the run (a pasted log's facts)
    model_uncertainty: float = 0.0  # the model estimated from a log: how far its bytes may be off
    build: BuildFacts | None = None  # the llama.cpp build it ran on, where the report says (its era moves the band)
    cache_types: tuple[str, str] = (CACHE_TYPE, CACHE_TYPE)  # its KV cache's K and V types (-ctk, -ctv)
    n_ctx: int | None = None  # the context it allocated (-c; None: what its depth and prompt need)
    fit: FitAsked | None = None  # llama.cpp's --fit placed it (where no -ngl, -ncmoe or -ot is given)
    placement_note: str | None = None  # how the placement judged was known, where not given


def flash_attn_of(build: BuildFacts | None) -> str:
    """A report's -fa as PredictInputs takes it: on, off, or llama.cpp's auto where not said."""
    said = build.flash_attn if build else None
    return "auto" if said is None else ("on" if said else "off")


PredictionKey = tuple[
    str | None,
    int,
    int,
    int | None,
    tuple[tuple[str, Any], ...],
    "Drafting | None",
    "BuildFacts | None",
    tuple[str, str],
    int | None,
    "FitAsked | None",
    str | None,
]


class Checker:
    """Judges reported results against one device choice; this host is described at most once."""

    def __init__(
        self,
        spec: ModelSpec,
        choice: DeviceChoice,
        ext: Extensions,
        *,
        use_host: bool = True,
        cpu: Device | None = None,
        cpu_name: str | None = None,
        spill: str | None = None,
    ) -> None:
        """`use_host`: whether this host may stand in for the device (not for a pasted log's
        machine); `cpu`: the CPU and RAM holding layers not offloaded, where known otherwise;
        `cpu_name`: the CPU the report names (its platform bounds an unstated RAM); `spill`: how
        the GPU's driver served what was over its memory (physics.placement.SPILLS), where told."""
        self.spec, self.choice, self.ext = spec, choice, ext
        self.use_host, self.cpu, self.cpu_name, self.spill = use_host, cpu, cpu_name, spill
        self._host: HostReport | None = None
        self.split: SplitSetup | None = None  # the machines RPC rows ran on (--rpc, --rpc-device)
        self.tensor_split: tuple[float, ...] = ()
        # Many rows share a backend, depth, prompt and offload: predict each combination once.
        self._predictions: dict[
            PredictionKey,
            tuple[Target | None, Prediction | None],
        ] = {}
        self._index: dict[int, int] = {}  # id of each prediction made -> its place in predictions()
        self._roofs: dict[int, StoredRoof | None] = {}  # depth -> the compute roof kept for it here
        self._fitted: dict[PredictionKey, tuple[Fitted | None, str | None]] = {}  # facts -> what --fit chose

    def host(self) -> HostReport:
        if self._host is None:
            self._host = describe_host(self.ext.backends.values(), self.ext.profiles, measure=False)
        return self._host

    def target(self, backend: str | None, partial: bool, devices: tuple[str, ...] = ()) -> Target | None:
        target = self._target(backend, partial, devices)
        return with_spill(target, self.spill) if target is not None else None

    def _target(self, backend: str | None, partial: bool, devices: tuple[str, ...]) -> Target | None:
        host = self.host() if self.use_host and (self.choice.needs_host or partial) else None
        try:
            target = resolve_target(
                self.choice, profiles=self.ext.profiles, host=host, backend=backend, devices=devices
            )
        except NoBandwidthError:
            return None
        if self.cpu is not None and target.device.is_discrete_gpu:
            return replace(target, cpu=self.cpu)
        if not (partial and target.device.is_discrete_gpu):
            return target
        # a CPU the report names: its platform's RAM (the GPU's class where the table does not know
        # it); this host's measured RAM only where the CPU named is this host's
        named = platform_ram(self.cpu_name) if self.cpu_name else None
        elsewhere = self.cpu_name is not None and not self.is_this_host(self.cpu_name, host)
        if elsewhere or target.cpu is None or target.cpu.bandwidth is None:
            return replace(target, cpu=named or ram_class(target.device))  # the RAM not stated, labelled
        return target

    @staticmethod
    def is_this_host(cpu_name: str, host: HostReport | None) -> bool:
        """Whether the CPU a report names is this host's (its measured RAM is then the report's)."""
        mine = host.facts.cpu_model if host is not None else ""
        return bool(mine) and " ".join(mine.lower().split()) == " ".join(cpu_name.lower().split())

    @staticmethod
    def key(r: Reported) -> PredictionKey:
        """What a prediction depends on: rows with the same key share one."""
        key = (r.backend, r.depth, r.n_prompt, r.n_gpu_layers, r.placement, r.drafting, r.build or None)
        return (*key, r.cache_types, r.n_ctx, r.fit, r.placement_note)

    @staticmethod
    def inputs_of(r: Reported) -> PredictInputs:
        # the context: what -c allocated (its whole KV cache), else what the report needs; one --fit
        # set is that exactly (llama-bench fits each test's own)
        ctx = r.n_ctx if r.fit is not None and r.n_ctx else max(r.depth + r.n_prompt + 1, r.n_ctx or 0, 1)
        return PredictInputs(
            depth=r.depth,
            prompt=r.n_prompt,
            gen=1,
            ctx=ctx,
            n_gpu_layers=r.n_gpu_layers,
            cache_type_k=r.cache_types[0],
            cache_type_v=r.cache_types[1],
            flash_attn=flash_attn_of(r.build),  # the compute buffer's attention scores
            **dict(r.placement),
        )

    def fitted(self, r: Reported) -> Reported:
        """A report whose placement llama.cpp's --fit chose (it gave no -ngl, -ncmoe, -ot or -ts,
        which --fit leaves as given): the placement --fit would choose on the GPU's memory, judged
        as if given and named as derived; its other facts (-nkvo, -dev) kept. Where ggprof cannot
        derive it (several GPUs, a GPU of unknown memory), the report says so."""
        placed = {n for n, _ in r.placement} & set(FIT_LEAVES)
        if r.fit is None or r.n_gpu_layers is not None or placed or r.backend in ("rpc", "cpu"):
            return r
        key = self.key(r)
        if key not in self._fitted:  # what --fit chose, once for each report of the same facts
            inputs = self.inputs_of(r)
            self._fitted[key] = derived(self.spec, self.target(r.backend, False, inputs.devices), inputs, r.fit)
        got, note = self._fitted[key]
        if got is None:
            return replace(r, placement_note=note)
        return replace(
            r,
            n_gpu_layers=got.n_gpu_layers,
            placement=(*r.placement, *((("n_cpu_moe", got.n_cpu_moe),) if got.n_cpu_moe else ())),
            n_ctx=got.ctx,
            placement_note=note,
        )

    def predicted(self, r: Reported) -> tuple[Target | None, Prediction | None]:
        key = self.key(r)
        if key not in self._predictions:
            inputs = self.inputs_of(r)
            # the CPU's RAM read too: layers not offloaded, or a draft model's weights kept there
            draft_in_ram = r.drafting is not None and r.drafting.draft_bytes_in_ram > 0
            partial = splits_to_cpu(inputs, self.spec.n_layers) or draft_in_ram
            target = self.target(r.backend, partial, inputs.devices)
            if target is not None and r.build:
                target = replace(target, device=with_build(target.device, r.build))
            if r.backend == "rpc":
                s = self.split
                split = (
                    predict_split(
                        self.spec,
                        s.host_cpu,
                        s.remote,
                        inputs,
                        self.ext,
                        local_gpu=s.local_gpu,
                        tensor_split=self.tensor_split,
                    )
                    if s is not None
                    else None
                )
                self._predictions[key] = (target, split)
            else:
                made = prediction_for(self.spec, target, inputs, self.ext)
                if made is not None and r.drafting is not None:
                    made = drafted(made, r.drafting, reach_band())
                if made is not None and r.placement_note:
                    made = replace(made, rules=(r.placement_note, *made.rules))
                self._predictions[key] = target, made
            made = self._predictions[key][1]
            if made is not None and id(made) not in self._index:
                self._index[id(made)] = len(self._index)
        return self._predictions[key]

    def roof(self, target: Target, depth: int) -> StoredRoof | None:
        """The thread probe kept for this model and depth on this host (read once per depth)."""
        if depth not in self._roofs:
            self._roofs[depth] = kept_roof(self.spec, target, depth)
        return self._roofs[depth]

    def index_of(self, p: Prediction) -> int:
        """A prediction's place in predictions(): the same in a forked worker, which inherits
        every prediction made (judge_chunks makes them all before it forks)."""
        return self._index[id(p)]

    def predictions(self) -> list[Prediction]:
        """Every prediction made so far, in the order they were first needed (their indices)."""
        made = {id(p): p for _, p in self._predictions.values() if p is not None}
        return [made[i] for i in self._index]

    def explaining(self, r: Reported, p: Prediction | None) -> tuple[Prediction | None, Finding | None]:
        """A report that names no placement, of a mixture of experts its GPU cannot hold, faster than
        spilling allows: judged on experts in RAM at the smallest -ncmoe that fits (`fit`'s rule),
        the placement that explains it, named with what tells the placements apart."""
        given = r.n_gpu_layers is not None or r.placement or r.backend == "rpc"
        if given or p is None or not p.spill_bytes or r.tg_tok_s is None or not self.spec.n_experts:
            return p, None
        if r.tg_tok_s <= p.decode_ceiling_tok_s:
            return p, None
        for n in range(1, self.spec.n_layers + 1):
            _, other = self.predicted(replace(r, n_gpu_layers=-1, placement=(("n_cpu_moe", n),)))
            if (
                other is not None
                and not other.spill_bytes
                and other.memory
                and other.memory[0].verdict != "does_not_fit"
            ):
                return other, explained_by(other, n, r.tg_tok_s)
        return p, None

    def check(self, r: Reported) -> Judged:
        r = self.fitted(r)
        target, prediction = self.predicted(r)
        prediction, named = self.explaining(r, prediction)
        used = r.backend or (target.device.backend if target else "cpu")
        # this host's CPU: the compute roof `profile` measured for the model here, as profile judged
        here = target is not None and used == "cpu" and self.use_host  # a roof measured on this host
        roof = self.roof(target, r.depth) if here and target is not None else None
        case = JudgeCase(
            model=self.spec,
            backend=used,
            prediction=prediction,
            measured_tg_tok_s=r.tg_tok_s,
            measured_pp_tok_s=r.pp_tok_s,
            n_prompt=r.n_prompt,
            depth=r.depth,
            tg_cv=r.cv,
            context=r.context,
            model_uncertainty=r.model_uncertainty,
            source="reported",
            probe=roof.probe if roof else None,
            n_threads=roof.run_threads if roof else None,
            roof_note=roof_note(roof, target) if here and target is not None else None,
        )
        return Judged(
            label=r.label,
            depth=r.depth,
            prediction=prediction,
            tg=r.tg_tok_s,
            pp=r.pp_tok_s,
            verdict=with_finding(judge(case, self.ext.backends, self.ext.extra_findings), named),
            source="reported",
        )


def with_finding(v: Verdict, f: Finding | None) -> Verdict:
    return replace(v, findings=(*v.findings, f)) if f is not None else v


def explained_by(p: Prediction, n: int, tg: float) -> Finding:
    """The placement a report left out that explains its number."""
    return Finding(
        severity="plausible",
        code="PLACEMENT_EXPLAINS",
        title=f"experts in RAM (-ngl 99 -ncmoe {n}) explains {tps(tg)}: no placement was given, the GPU cannot hold "
        "the model, and spilling over its link is slower",
        expected=f"at most {tps(p.decode_ceiling_tok_s)} with the experts of the first {n} layers in RAM",
        observed=tps(tg),
        evidence=tuple(p.rules),
        causes=(f"experts in RAM (-ncmoe {n}): the smallest N whose placement fits the GPU's memory",),
        next_step="tell the placements apart: the load log's buffer sizes (`CUDA0 model buffer size` against "
        "`CPU_Mapped`), the command line (-ngl, -ncmoe, -ot); give them to check (-ncmoe N)",
    )


def reported_from_row(row: LlamaBenchRow, backend: str | None) -> Reported:
    """One row of `llama-bench -o json`: pp rows report prefill, tg rows decode."""
    used = backend or backend_of_row(row.backends)
    # -fitt or -fitc: llama-bench fitted the placement to each test's context, whatever its -ngl
    fit = FitAsked(margin_mib=row.fit[0], min_ctx=row.fit[1]) if any(row.fit) and used != "cpu" else None
    # llama-bench's fit sets -ngl, -ts and the overrides (-ncmoe is one) and the test's own context
    kept = tuple((n, v) for n, v in row.placement if n not in FIT_LEAVES) if fit else row.placement
    return Reported(
        tg_tok_s=row.avg_ts if row.n_gen and not row.n_prompt else None,  # a pp+tg test is neither
        pp_tok_s=row.avg_ts if row.n_prompt and not row.n_gen else None,
        depth=row.n_depth,
        n_prompt=row.n_prompt or N_PROMPT,
        backend=used,
        n_gpu_layers=None if used == "cpu" or fit else row.n_gpu_layers,
        placement=() if used == "cpu" else kept,
        n_ctx=max(row.n_prompt + row.n_gen + row.n_depth, 1) if fit else None,
        cv=row.stddev_ts / row.avg_ts,
        label=row.test,
        build=BuildFacts(number=row.build_number, flash_attn=row.flash_attn, n_ubatch=row.physical_batch) or None,
        cache_types=row.cache_types,
        fit=fit,
    )


# -- many rows: judged over every core ------------------------------------------------------------
PARALLEL_MIN_ROWS = 2000  # fewer rows: starting the workers costs more than it saves
CHUNK_ROWS = 1000
_work: tuple[Checker, Callable[[int, Iterator[Judged]], Any]] | None = None  # what forked workers inherit


def _judge_chunk(job: tuple[int, list[Reported]]) -> Any:
    assert _work is not None
    checker, on_chunk = _work
    index, chunk = job
    return on_chunk(index, (checker.check(r) for r in chunk))


def judge_chunks(
    checker: Checker,
    reports: list[Reported],
    on_chunk: Callable[[int, Iterator[Judged]], T],
    processes: int | None = None,
) -> Iterator[T]:
    """The reports judged a chunk at a time, `on_chunk(index, judged rows)` applied to each, the
    answers in order. Many rows (llama-bench output of a long sweep) are judged in forked worker
    processes, one per core: judging is plain Python and the rows are independent; `on_chunk`
    runs in the worker (write its output there: only its answer comes back). The parent makes
    every prediction first (the host is described once, never by a worker). Elsewhere than
    Linux, or for few rows: in this process."""
    global _work
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    processes = cores if processes is None else processes
    jobs = [(i, reports[at : at + CHUNK_ROWS]) for i, at in enumerate(range(0, len(reports), CHUNK_ROWS))]
    # fork only on Linux: macOS offers it but its system libraries are not safe across a fork
    parallel = len(reports) >= PARALLEL_MIN_ROWS and processes >= 2 and sys.platform.startswith("linux")
    if not parallel:
        yield from (on_chunk(i, (checker.check(r) for r in chunk)) for i, chunk in jobs)
        return
    for r in {checker.key(r): r for r in reports}.values():
        checker.predicted(checker.fitted(r))
    _work = (checker, on_chunk)
    pool = multiprocessing.get_context("fork").Pool(processes, initializer=_quiet_worker)
    try:
        yield from pool.imap(_judge_chunk, jobs)
        pool.close()  # every chunk answered: the workers end by themselves
    finally:
        pool.terminate()  # after close: nothing left to stop; on an error or Ctrl-C: stops them
        pool.join()
        _work = None


def _quiet_worker() -> None:
    """A worker leaves Ctrl-C and SIGTERM to the parent, which ends the pool (ggprof's own
    handlers, inherited by the fork, would print a traceback in every worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

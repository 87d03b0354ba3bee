"""Sweeps that trace this machine's rooflines: decode at batch sizes (where the weights read
once per step serve B sequences) and llama.cpp at thread counts.

Batch: while a step is bandwidth-bound its time barely moves with B (the weights are read
once for all B sequences, the KV once per sequence), so aggregate tok/s grows almost
linearly; once compute binds, the step time grows with B. The first B whose step takes
clearly longer than the batch-1 step is this machine's empirical ridge, shown beside the
roofline's prediction (peak FLOP/s / bandwidth, in batch terms).

Threads: tok/s grows with threads until memory (the kernels consume most of the measured
bandwidth) or the cores (physical, performance, SMT siblings) stop it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from ggprof.bench.results import BenchResult, BenchRow
from ggprof.errors import BadInputError
from ggprof.machine.facts import HostFacts
from ggprof.model.spec import ModelSpec
from ggprof.physics.roofline import Prediction
from ggprof.physics.serving import concurrent_decode_ceiling_tok_s
from ggprof.units import fmt_bytes, fmt_rate, sig3

# A step "nearly flat" when within this factor of the batch-1 step. On a bandwidth-bound
# device a batch of 8 adds the KV of 8 short sequences and 8x the (tiny) compute: a few %.
FLAT_STEP_RATIO = 1.25
# Decode "bandwidth-bound" when its bytes per second reach this share of the measured bandwidth.
BANDWIDTH_SHARE = 0.7


@dataclass(frozen=True, kw_only=True)
class BatchPoint:
    batch: int
    aggregate_tok_s: float
    per_sequence_tok_s: float
    step_ms: float  # median decode step (TPOT of each sequence)
    regime: str  # bandwidth-bound | compute-bound


@dataclass(frozen=True, kw_only=True)
class BatchSweep:
    points: tuple[BatchPoint, ...]
    bend_batch: int | None  # the first batch whose step grows: the empirical ridge (None: not reached)
    predicted_ridge_batch: float | None  # where the roofline says compute starts to bind
    prediction_basis: str


def check_batch_memory(spec: ModelSpec, batches: tuple[int, ...], n_gen: int, facts: HostFacts) -> None:
    """Refuse (with the figure) a sweep whose KV cache would not fit in free RAM: never run into swap."""
    b = max(batches)
    kv = b * spec.kv_bytes_at(n_gen + 1)
    need = spec.file_size_bytes + kv
    if need > facts.ram_available_bytes:
        raise BadInputError(
            f"--parallel {b} needs {fmt_bytes(need, binary=False)} "
            f"(weights {fmt_bytes(spec.file_size_bytes, binary=False)} + KV of {b} sequences x "
            f"{n_gen + 1:,} tokens {fmt_bytes(kv, binary=False)}); "
            f"{fmt_bytes(facts.ram_available_bytes, binary=False)} of RAM is free: use smaller batches or fewer tokens"
        )


def batch_sweep(result: BenchResult, prediction: Prediction | None) -> BatchSweep:
    rows = sorted(result.rows, key=lambda r: r.n_parallel)
    base = _step_ms(rows[0]) if rows else 0.0
    points = tuple(
        BatchPoint(
            batch=r.n_parallel,
            aggregate_tok_s=r.avg_ts,
            per_sequence_tok_s=r.avg_ts / r.n_parallel,
            step_ms=_step_ms(r),
            regime="bandwidth-bound" if _step_ms(r) <= FLAT_STEP_RATIO * base else "compute-bound",
        )
        for r in rows
    )
    if len(points) > 1 and points[0].batch == 1:
        # batch 1 is the reference; if a second sequence already lengthens the step, compute was
        # binding at batch 1 too (were it bandwidth-bound, the second sequence would be almost free)
        points = (replace(points[0], regime=points[1].regime), *points[1:])
    bend = next((p.batch for p in points[1:] if p.regime == "compute-bound"), None)
    ridge, basis = predicted_ridge_batch(prediction)
    return BatchSweep(points=points, bend_batch=bend, predicted_ridge_batch=ridge, prediction_basis=basis)


def _step_ms(row: BenchRow) -> float:
    return statistics.median(row.itl_ns) / 1e6 if row.itl_ns else 0.0


def predicted_ridge_batch(p: Prediction | None) -> tuple[float | None, str]:
    """B* where decode's intensity 2PB / (W + B KV) reaches the ridge I* = peak / bandwidth."""
    if p is None or not p.ridge_flops_per_byte:
        return None, "no peak FLOP/s known for this device: the ridge cannot be predicted"
    ridge, w, kv, params = p.ridge_flops_per_byte, p.decode_bytes_per_token, p.kv_bytes_at_depth, p.active_params
    if 2 * params <= ridge * kv:
        return None, f"ridge {sig3(ridge)} FLOP/byte: the KV traffic keeps decode below it at any batch"
    batch = ridge * w / (2 * params - ridge * kv)
    return batch, (
        f"ridge {sig3(ridge)} FLOP/byte = peak {sig3((p.peak_flops or 0) / 1e12)} TFLOP/s / "
        f"{fmt_rate(p.bandwidth_bytes_per_s)}; decode reaches it at B = {sig3(batch)}"
    )


# -- users of a server --------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class UsersPoint:
    users: int
    aggregate_tok_s: float
    per_user_tok_s: float
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p50_ms: float | None
    predicted_aggregate_ceiling_tok_s: float | None  # the roofline at this many sequences
    expected_aggregate_tok_s: tuple[float, float] | None  # the ceiling x the backend's decode band


@dataclass(frozen=True, kw_only=True)
class ConcurrencySweep:
    points: tuple[UsersPoint, ...]
    basis: str  # how the predicted curve was computed


def concurrency_sweep(result: BenchResult, prediction: Prediction | None) -> ConcurrencySweep | None:
    """A server's rows at 1, 2, 4... users at once, beside the roofline for as many sequences:
    each step reads the weights once and every sequence's KV (at the request's mid depth)."""
    many = sorted((r for r in result.rows if r.n_parallel > 1), key=lambda r: r.n_parallel)
    if not many:
        return None
    single, prompt = result.row("tg"), result.row("pp")
    p = prediction
    mid_kv = p.kv_bytes_per_token * (result.params.n_prompt[0] + result.params.n_gen[0] // 2) if p else 0
    points = []
    for r in ([single] if single else []) + many:
        ceiling = (
            concurrent_decode_ceiling_tok_s(
                p.decode_bytes_per_token, mid_kv, r.n_parallel, p.bandwidth_bytes_per_s, p.peak_flops, p.active_params
            )
            if p and p.bandwidth_bytes_per_s
            else None
        )
        band = p.band if p else None
        points.append(
            UsersPoint(
                users=r.n_parallel,
                aggregate_tok_s=r.avg_ts,
                per_user_tok_s=r.avg_ts / r.n_parallel,
                ttft_p50_ms=(prompt if r is single and prompt else r).ttft_percentile_ms(50),
                ttft_p95_ms=(prompt if r is single and prompt else r).ttft_percentile_ms(95),
                itl_p50_ms=r.itl_percentile_ms(50),
                predicted_aggregate_ceiling_tok_s=ceiling,
                expected_aggregate_tok_s=(ceiling * band.low, ceiling * band.high) if ceiling and band else None,
            )
        )
    basis = (
        f"roofline: (weights {fmt_bytes(p.decode_bytes_per_token)} + users x KV {fmt_bytes(mid_kv)}) per step at "
        f"{fmt_rate(p.bandwidth_bytes_per_s)}, x the decode band"
        if p
        else "no bandwidth known: no predicted curve"
    )
    return ConcurrencySweep(points=tuple(points), basis=basis)


# -- threads ------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ThreadPoint:
    threads: int
    pp_tok_s: float | None
    tg_tok_s: float | None


@dataclass(frozen=True, kw_only=True)
class ThreadSweep:
    points: tuple[ThreadPoint, ...]
    best_tg_threads: int | None
    best_pp_threads: int | None
    reason: str  # why the decode curve stops rising
    advice: str  # the line to paste: -t N


def sweep_counts(facts: HostFacts) -> tuple[int, ...]:
    """1 .. the usable physical cores (the affinity set and cgroup quota bound them), and one
    count above (to show the drop)."""
    cores = max(facts.usable_cores, 1)
    return tuple(range(1, cores + 2))


def thread_sweep(
    results: list[BenchResult], facts: HostFacts, bytes_per_token: int, bandwidth: float | None
) -> ThreadSweep:
    points = tuple(
        ThreadPoint(
            threads=r.params.n_threads,
            pp_tok_s=(row.avg_ts if (row := r.row("pp")) else None),
            tg_tok_s=(row.avg_ts if (row := r.row("tg")) else None),
        )
        for r in sorted(results, key=lambda r: r.params.n_threads)
    )
    best_tg = max((p for p in points if p.tg_tok_s), key=lambda p: p.tg_tok_s or 0, default=None)
    best_pp = max((p for p in points if p.pp_tok_s), key=lambda p: p.pp_tok_s or 0, default=None)
    best = best_tg or best_pp
    reason = _why_it_stops(points, best, facts, bytes_per_token, bandwidth) if best else "nothing was measured"
    return ThreadSweep(
        points=points,
        best_tg_threads=best_tg.threads if best_tg else None,
        best_pp_threads=best_pp.threads if best_pp else None,
        reason=reason,
        advice=f"-t {best.threads}" if best else "",
    )


def _why_it_stops(
    points: tuple[ThreadPoint, ...], best: ThreadPoint, facts: HostFacts, bytes_per_token: int, bandwidth: float | None
) -> str:
    n, cores, e_cores = best.threads, facts.usable_cores, facts.efficiency_cores or 0
    rate = best.tg_tok_s or 0.0
    consumed = rate * bytes_per_token
    if bandwidth and consumed >= BANDWIDTH_SHARE * bandwidth:
        return (
            f"bandwidth: at {n} threads decode consumes {fmt_rate(consumed)}, {consumed / bandwidth:.0%} of the "
            f"{fmt_rate(bandwidth)} measured; more threads cannot read memory faster"
        )
    if n == cores < facts.physical_cores and facts.cpus is not None:
        return (
            f"usable cores: {n} of the machine's {facts.physical_cores}, limited by {facts.cpus.limited_by}; "
            "a thread more than that waits for CPU time"
        )
    if e_cores and n == cores - e_cores:
        return (
            f"efficiency cores: {n} performance cores; threads on the {e_cores} efficiency cores hold the others back"
        )
    if n == cores and facts.logical_cores > cores:
        return (
            f"SMT siblings: {n} physical cores; a sibling thread shares its core's units "
            f"({facts.logical_cores} logical)"
        )
    if n == cores:
        return f"physical cores: {n} cores; a thread more than that waits for a core"
    if n == max(p.threads for p in points):
        return f"still rising at {n} threads, the most tried"
    share = f"{consumed / bandwidth:.0%} of the measured bandwidth" if bandwidth else "an unknown share of bandwidth"
    return f"fewer threads than cores were best ({n} of {cores}): decode uses {share}; something else shares the cores"

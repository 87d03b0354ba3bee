"""Batch and thread sweeps: the curves as JSON and as text."""

from __future__ import annotations

from typing import Any

from ggprof.bench.llamabench import row_dict
from ggprof.bench.results import BenchResult
from ggprof.pipelines.sweep import BatchSweep, ConcurrencySweep, ThreadSweep
from ggprof.units import clean, sig3


def batch_sweep_dict(sweeps: list[tuple[BenchResult, BatchSweep]]) -> dict[str, Any]:
    out = []
    for result, s in sweeps:
        out.append(
            {
                "n_threads": result.params.n_threads,
                "points": [
                    {
                        "batch": p.batch,
                        "aggregate_tok_s": p.aggregate_tok_s,
                        "per_sequence_tok_s": p.per_sequence_tok_s,
                        "tpot_ms": p.step_ms,
                        "step_ms": p.step_ms,
                        "regime": p.regime,
                    }
                    for p in s.points
                ],
                "bend_batch": s.bend_batch,
                "predicted_ridge_batch": s.predicted_ridge_batch,
                "prediction_basis": s.prediction_basis,
                "rows": [row_dict(result, r) for r in result.rows],
            }
        )
    return {"batch_sweeps": out}


def batch_sweep_text(sweeps: list[tuple[BenchResult, BatchSweep]]) -> str:
    lines = []
    for result, s in sweeps:
        lines += [
            f"batch sweep: {clean(result.model.model_type)}, {result.params.n_threads} threads, "
            f"tg{result.params.n_gen[0]} per sequence, {result.params.reps} repetitions",
            "| B | aggregate tok/s | per-sequence tok/s | TPOT ms | regime |",
            "| ---: | ---: | ---: | ---: | --- |",
        ]
        lines += [
            f"| {p.batch} | {sig3(p.aggregate_tok_s)} | {sig3(p.per_sequence_tok_s)} | {sig3(p.step_ms)} | {p.regime} |"
            for p in s.points
        ]
        bend = (
            f"the step time grows from B = {s.bend_batch}: compute binds there (the empirical ridge)"
            if s.bend_batch
            else "the step time stays nearly flat: bandwidth-bound at every batch tried"
        )
        ridge = f"B = {sig3(s.predicted_ridge_batch)}" if s.predicted_ridge_batch else "unknown"
        lines += [f"measured: {bend}", f"predicted ridge: {ridge} ({clean(s.prediction_basis)})", ""]
    return "\n".join(lines).rstrip()


def thread_sweep_dict(s: ThreadSweep) -> dict[str, Any]:
    return {
        "curve": [{"threads": p.threads, "pp_tok_s": p.pp_tok_s, "tg_tok_s": p.tg_tok_s} for p in s.points],
        "best_tg_threads": s.best_tg_threads,
        "best_pp_threads": s.best_pp_threads,
        "reason": s.reason,
        "advice": s.advice,
    }


def thread_sweep_lines(s: ThreadSweep) -> list[str]:
    curve = ", ".join(
        f"{p.threads}: " + " / ".join(f"{k} {sig3(v)}" for k, v in (("pp", p.pp_tok_s), ("tg", p.tg_tok_s)) if v)
        for p in s.points
    )
    return [
        f"threads: {curve} tok/s",
        f"  best: decode at {s.best_tg_threads} threads, prefill at {s.best_pp_threads}; {clean(s.reason)}",
        f"  use: {s.advice}",
    ]


def concurrency_dict(s: ConcurrencySweep) -> dict[str, Any]:
    return {
        "points": [
            {
                "users": p.users,
                "aggregate_tok_s": p.aggregate_tok_s,
                "per_user_tok_s": p.per_user_tok_s,
                "ttft_p50_ms": p.ttft_p50_ms,
                "ttft_p95_ms": p.ttft_p95_ms,
                "itl_p50_ms": p.itl_p50_ms,
                "predicted_aggregate_ceiling_tok_s": p.predicted_aggregate_ceiling_tok_s,
                "expected_aggregate_tok_s": list(p.expected_aggregate_tok_s) if p.expected_aggregate_tok_s else None,
            }
            for p in s.points
        ],
        "basis": s.basis,
    }


def concurrency_lines(s: ConcurrencySweep) -> list[str]:
    def ms(x: float | None) -> str:
        return sig3(x) if x is not None else "-"

    lines = [
        "users at once (each request its own prompt and decode):",
        "| users | aggregate tok/s | per-user tok/s | TTFT ms p50 / p95 | ITL ms p50 | predicted aggregate |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in s.points:
        e, c = p.expected_aggregate_tok_s, p.predicted_aggregate_ceiling_tok_s
        predicted = f"{sig3(e[0])}-{sig3(e[1])} (ceiling {sig3(c)})" if e and c else (sig3(c) if c else "-")
        lines.append(
            f"| {p.users} | {sig3(p.aggregate_tok_s)} | {sig3(p.per_user_tok_s)} | {ms(p.ttft_p50_ms)} / "
            f"{ms(p.ttft_p95_ms)} | {ms(p.itl_p50_ms)} | {predicted} |"
        )
    return [*lines, f"predicted: {clean(s.basis)}"]

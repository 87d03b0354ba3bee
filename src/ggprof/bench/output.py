"""`ggprof bench` output: a table like llama-bench's, and md/csv/json/jsonl with llama-bench's
field names where the meaning is the same, so the two compare row by row."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from typing import Any

from ggprof.bench.results import BenchResult, BenchRow

FORMATS = ("table", "md", "csv", "json", "jsonl")


def row_dict(result: BenchResult, row: BenchRow) -> dict[str, Any]:
    """One test as llama-bench names it, plus ggprof's latency figures and the run context."""
    p, m, ctx = result.params, result.model, result.context
    return {
        "build_commit": None, "build_number": None,
        "llama_cpp_python_version": ctx.llama_cpp_python_version,
        "cpu_info": ctx.cpu_model or "", "gpu_info": "", "backends": ",".join(b.upper() for b in ctx.backends_used),
        "model_filename": m.model_filename, "model_type": m.model_type, "model_size": m.model_size,
        "model_n_params": m.model_n_params, "n_batch": p.n_batch, "n_ubatch": p.n_ubatch,
        "n_threads": p.n_threads, "type_k": p.type_k, "type_v": p.type_v, "n_gpu_layers": p.n_gpu_layers,
        "flash_attn": {"auto": -1, "off": 0, "on": 1}[p.flash_attn], "repack": ctx.repack, "use_mmap": True,
        "n_prompt": row.n_prompt, "n_gen": row.n_gen, "n_depth": row.n_depth, "test_time": result.test_time,
        "avg_ns": row.avg_ns, "stddev_ns": row.stddev_ns, "avg_ts": row.avg_ts, "stddev_ts": row.stddev_ts,
        "samples_ns": list(row.samples_ns), "samples_ts": row.samples_ts,
        "itl_p50_ms": row.itl_percentile_ms(50), "itl_p95_ms": row.itl_percentile_ms(95),
        "itl_p99_ms": row.itl_percentile_ms(99), "ttft_ms": row.ttft_ms, "ttft_p50_ms": row.ttft_percentile_ms(50),
        "ttft_p95_ms": row.ttft_percentile_ms(95),
    }  # fmt: skip


def context_dict(result: BenchResult) -> dict[str, Any]:
    return {**asdict(result.context), "elapsed_s": result.elapsed_s, "notes": list(result.notes)}


def render(result: BenchResult, fmt: str) -> str:
    rows = [row_dict(result, r) for r in result.rows]
    if fmt == "json":
        return json.dumps(rows, indent=2, allow_nan=False)
    if fmt == "jsonl":
        return "\n".join(json.dumps(r, allow_nan=False) for r in rows)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else [], lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
        return buf.getvalue().rstrip("\n")
    if fmt == "md":
        return markdown(result)
    return table(result)


def markdown(result: BenchResult) -> str:
    """llama-bench's markdown table (model, size, params, backend, threads, test, t/s)."""
    m, ctx = result.model, result.context
    head = (
        "| model | size | params | backend | threads | test | t/s |\n| --- | ---: | ---: | --- | ---: | ---: | ---: |"
    )
    lines = [head]
    for r in result.rows:
        lines.append(
            f"| {m.model_type} | {m.model_size / 2**20:.2f} MiB | {m.model_n_params / 1e6:.2f} M | "
            f"{','.join(b.upper() for b in ctx.backends_used)} | {result.params.n_threads} | {r.name} | "
            f"{r.avg_ts:.2f} ± {r.stddev_ts:.2f} |"
        )
    return "\n".join(lines)


def table(result: BenchResult) -> str:
    """llama-bench's table, then latency: TTFT for prompt tests, ITL percentiles for generation."""
    lines = [
        markdown(result),
        "",
        "| test | TTFT ms (mean, p95) | ITL ms p50 / p95 / p99 | CV |",
        "| --- | ---: | ---: | ---: |",
    ]
    for r in result.rows:
        ttft = f"{r.ttft_ms:.1f}, {r.ttft_percentile_ms(95):.1f}" if r.ttft_ms is not None else "-"
        itl = (
            f"{r.itl_percentile_ms(50):.2f} / {r.itl_percentile_ms(95):.2f} / {r.itl_percentile_ms(99):.2f}"
            if r.itl_ns
            else "-"
        )
        lines.append(f"| {r.name} | {ttft} | {itl} | {r.cv:.1%} |")
    return "\n".join(lines)

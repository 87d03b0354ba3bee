"""llama-bench's output format, written and read in one place.

Written: `ggprof bench` rows with llama-bench's field names where the meaning is the same
(so the two compare row by row), one printer per output format as llama-bench has.
Read: rows of `llama-bench -o json` or `-o jsonl`, for `ggprof check --llama-bench`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ggprof.bench.results import BenchResult, BenchRow
from ggprof.bounded import item_bound
from ggprof.errors import BadInputError
from ggprof.files import read_stdin_text, read_text
from ggprof.llamacpp import CACHE_TYPE, backend_names, physical_batch, test_name
from ggprof.runfacts import FLASH_ATTN_TYPES, KV_CACHE_TYPES, from_json, placement_of
from ggprof.units import MAX_TOK_S, MAX_TOKENS, clean_name


def row_dict(result: BenchResult, row: BenchRow) -> dict[str, Any]:
    """One test as llama-bench names it, plus ggprof's latency figures and the run context."""
    p, m, ctx = result.params, result.model, result.context
    return {
        "build_commit": ctx.build_commit,
        "build_number": ctx.build_number,
        "engine": ctx.engine,
        "llama_cpp_python_version": ctx.llama_cpp_python_version,
        "cpu_info": ctx.cpu_model or "",
        "gpu_info": ctx.gpu_info,
        "backends": ",".join(b.upper() for b in ctx.backends_used),
        "model_filename": m.model_filename,
        "model_type": m.model_type,
        "model_size": m.model_size,
        "model_n_params": m.model_n_params,
        "n_batch": p.n_batch,
        "n_ubatch": p.n_ubatch,
        "n_threads": p.n_threads,
        "type_k": p.type_k,
        "type_v": p.type_v,
        "n_gpu_layers": p.n_gpu_layers,
        "flash_attn": FLASH_ATTN_TYPES[p.flash_attn],
        "repack": ctx.repack,
        "use_mmap": True,
        "n_parallel": row.n_parallel,
        "n_prompt": row.n_prompt,
        "n_gen": row.n_gen,
        "n_depth": row.n_depth,
        "test_time": result.test_time,
        "avg_ns": row.avg_ns,
        "stddev_ns": row.stddev_ns,
        "avg_ts": row.avg_ts,
        "stddev_ts": row.stddev_ts,
        "samples_ns": list(row.samples_ns),
        "samples_ts": row.samples_ts,
        "itl_p50_ms": row.itl_percentile_ms(50),
        "itl_p95_ms": row.itl_percentile_ms(95),
        "itl_p99_ms": row.itl_percentile_ms(99),
        "ttft_ms": row.ttft_ms,
        "ttft_p50_ms": row.ttft_percentile_ms(50),
        "ttft_p95_ms": row.ttft_percentile_ms(95),
        "client_avg_ts": row.client_avg_ts,  # a server's row: the client's view of the same tokens
        "stop_reason": row.stop_reason,  # with adaptive repetitions: how many it took and why
    }


def context_dict(result: BenchResult) -> dict[str, Any]:
    context = asdict(result.context)
    context["drafting"] = dict(result.context.drafting)  # {"spec_type": "ngram-mod", ...}
    return {**context, "elapsed_s": result.elapsed_s, "notes": list(result.notes)}


Results = Sequence[BenchResult]  # one run, or one per thread count of a sweep


def render(results: BenchResult | Results, fmt: str) -> str:
    """The result(s) in one of PRINTERS' formats."""
    return PRINTERS[fmt]([results] if isinstance(results, BenchResult) else list(results))


def _dicts(results: Results) -> list[dict[str, Any]]:
    return [row_dict(res, r) for res in results for r in res.rows]


def as_json(results: Results) -> str:
    return json.dumps(_dicts(results), indent=2, allow_nan=False)


def as_jsonl(results: Results) -> str:
    return "\n".join(json.dumps(d, allow_nan=False) for d in _dicts(results))


def as_csv(results: Results) -> str:
    rows = _dicts(results)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else [], lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
    return buf.getvalue().rstrip("\n")


def markdown(results: BenchResult | Results) -> str:
    """llama-bench's markdown table (model, size, params, backend, threads, test, t/s)."""
    results = [results] if isinstance(results, BenchResult) else results
    lines = [
        "| model | size | params | backend | threads | test | t/s |\n| --- | ---: | ---: | --- | ---: | ---: | ---: |"
    ]
    for result in results:
        m, ctx = result.model, result.context
        model_type = _cell(m.model_type)  # from the model's header, or a server's description of it
        backends = _cell(",".join(b.upper() for b in ctx.backends_used))
        for r in result.rows:
            lines.append(
                f"| {model_type} | {m.model_size / 2**20:.2f} MiB | {m.model_n_params / 1e6:.2f} M | "
                f"{backends} | {result.params.n_threads} | {_cell(r.name)} | "
                f"{r.avg_ts:.2f} ± {r.stddev_ts:.2f} |"
            )
    return "\n".join(lines)


def _cell(text: object) -> str:
    """Text from outside as a table cell: no control, escape or bidi character, no `|`, bounded."""
    return clean_name(text, 80).replace("|", "/")


def table(results: Results) -> str:
    """llama-bench's table, then latency: TTFT for prompt tests, ITL percentiles for generation."""
    lines = [
        markdown(results),
        "",
        "| test | threads | TTFT ms (mean, p95) | ITL ms p50 / p95 / p99 | CV |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for result in results:
        for r in result.rows:
            ttft = f"{r.ttft_ms:.1f}, {r.ttft_percentile_ms(95):.1f}" if r.ttft_ms is not None else "-"
            itl = (
                f"{r.itl_percentile_ms(50):.2f} / {r.itl_percentile_ms(95):.2f} / {r.itl_percentile_ms(99):.2f}"
                if r.itl_ns
                else "-"
            )
            lines.append(f"| {r.name} | {result.params.n_threads} | {ttft} | {itl} | {r.cv:.1%} |")
    return "\n".join(lines)


PRINTERS: dict[str, Callable[[Results], str]] = {
    "table": table,
    "md": markdown,
    "csv": as_csv,
    "json": as_json,
    "jsonl": as_jsonl,
}


# -- reading llama-bench's JSON ----------------------------------------------------------------
def backend_of_row(field: str) -> str:
    """The first compute backend of a llama-bench row ("CUDA", "Metal,BLAS", "CPU")."""
    names = backend_names(field)
    return names[0] if names else str(field).split(",")[0].strip().lower() or "cpu"


MAX_RESULTS_BYTES = 64 << 20  # llama-bench JSON of ~100,000 rows; a larger file is not results
ITEMS_PER_ROW = 400  # a row's ~40 fields and its samples (-r 100 and more), generously
MAX_RESULT_ITEMS = 8_000_000  # 100,000 rows of -r 5: about 5 million


class BadRows(BadInputError):
    """llama-bench's rows that cannot be judged: a field no run can have, or more JSON than the
    rows it claims may hold (not JSON of another shape)."""


@dataclass(frozen=True, kw_only=True)
class LlamaBenchRow:
    """One row of llama-bench's JSON output, with the fields ggprof judges, validated."""

    index: int  # 1-based, as a person counts rows
    model_filename: str
    backends: str
    n_prompt: int
    n_gen: int
    n_depth: int
    n_gpu_layers: int | None
    avg_ts: float
    stddev_ts: float
    # what a row says of its model, machine and build (kept where well formed, for a pasted log)
    model_type: str = ""
    model_size: int | None = None
    model_n_params: int | None = None
    gpu_info: str = ""
    cpu_info: str = ""
    n_threads: int | None = None
    build_commit: str | None = None
    build_number: int | None = None
    flash_attn: bool | None = None  # its -fa: true/false (older llama-bench), 1/0 (-1: auto, None)
    n_batch: int | None = None  # its -b
    n_ubatch: int | None = None  # its -ub
    placement: tuple[tuple[str, Any], ...] = ()  # where the rest of its weights lived (ggprof.runfacts.PLACEMENT)
    cache_types: tuple[str, str] = (CACHE_TYPE, CACHE_TYPE)  # its -ctk and -ctv (a type not llama.cpp's: f16)
    # its -fitt and -fitc (MiB left free, least context): llama-bench fits the placement when either
    # is not 0, whatever -ngl says (its JSON keeps the -ngl given); (0, 0): not fitted
    fit: tuple[int, int] = (0, 0)

    @property
    def physical_batch(self) -> int | None:
        """The tokens a prompt went through the model at once: -ub, at most -b (llama.cpp caps
        the physical batch at the logical one)."""
        return physical_batch(self.n_ubatch, self.n_batch)

    @property
    def test(self) -> str:
        """llama-bench's test name: pp512, tg128 @ d4096."""
        return test_name(self.n_prompt, self.n_gen, self.n_depth)


def read_rows(path: str) -> list[LlamaBenchRow]:
    """Rows of llama-bench's -o json (a list) or -o jsonl (one object a line), each validated,
    from a regular file or standard input (`-`); BadInputError naming the row and field for
    anything else."""
    if path == "-":
        return rows_from_text(read_stdin_text(MAX_RESULTS_BYTES, "standard input"), "standard input")
    return rows_from_text(read_text(path, MAX_RESULTS_BYTES), clean_name(path))


def rows_from_text(text: str, where: str, max_items: int = MAX_RESULT_ITEMS) -> list[LlamaBenchRow]:
    """The rows of llama-bench's JSON or JSONL output in `text` (see read_rows)."""
    # parsing multiplies memory: what may be parsed is bounded by the rows the text claims (a
    # real row is ~45 items: its fields and samples), and in all
    claimed = text.count('"avg_ts"')
    allowed = min(ITEMS_PER_ROW * claimed + 1000, max_items)
    if item_bound(text) > allowed:
        raise BadRows(
            f"{where}: more JSON items than {claimed:,} llama-bench rows hold (at most {allowed:,}); not parsed"
        )
    try:
        data = json.loads(text)
        raw = data if isinstance(data, list) else [data]
    except RecursionError:
        raise BadInputError(f"{where}: JSON nested too deeply to be llama-bench output") from None
    except ValueError:
        try:
            raw = [json.loads(line) for line in text.splitlines() if line.strip()]
        except RecursionError:
            raise BadInputError(f"{where}: JSON nested too deeply to be llama-bench output") from None
        except ValueError as e:
            raise BadInputError(f"{where}: not llama-bench JSON or JSONL output ({clean_name(e, 80)})") from None
    if not raw:
        raise BadInputError(f"{where}: no llama-bench rows (objects with avg_ts) found")
    return [_row(where, i, r) for i, r in enumerate(raw, 1)]


def _row(where: str, index: int, r: object) -> LlamaBenchRow:
    if not isinstance(r, dict) or "avg_ts" not in r:
        raise BadInputError(f"{where}: no llama-bench rows: row {index} is not an object with avg_ts")

    def bad(field: str, wanted: str) -> BadInputError:
        shown = clean_name(repr(r.get(field)), 40)
        return BadRows(f"{where}: row {index}: field {field!r} must be {wanted}, got {shown}")

    def count(field: str, low: int = 0, default: int | None = 0) -> int | None:
        v = r.get(field, default)
        if v is None and default is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_TOKENS:
            raise bad(field, f"a whole number from {low} to {MAX_TOKENS}")
        return v

    def number(field: str, positive: bool, top: float = math.inf) -> float:
        v = r.get(field, 0.0)
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 1 << 53:  # larger: no float holds it
            v = float(v)
        ok = isinstance(v, float) and math.isfinite(v) and v <= top
        if not ok or v < 0 or (positive and v == 0):
            wanted = f"a finite number above 0, at most {top:,.0f}" if positive else "a finite number, 0 or more"
            raise bad(field, wanted)
        return float(v)

    n_prompt, n_gen = count("n_prompt") or 0, count("n_gen") or 0
    if n_prompt == 0 and n_gen == 0:
        raise BadRows(f"{where}: row {index}: n_prompt and n_gen are both 0 (no test)")
    for field in ("model_filename", "backends"):
        if not isinstance(r.get(field, ""), str):
            raise bad(field, "a string")
    facts = from_json(r)
    return LlamaBenchRow(
        index=index,
        model_filename=str(r.get("model_filename", "")),
        backends=str(r.get("backends", "CPU")),
        n_prompt=n_prompt,
        n_gen=n_gen,
        n_depth=count("n_depth") or 0,
        n_gpu_layers=count("n_gpu_layers", low=-1, default=None),
        avg_ts=number("avg_ts", positive=True, top=MAX_TOK_S),
        stddev_ts=number("stddev_ts", positive=False),
        model_type=_text(r.get("model_type")),
        model_size=_whole(r.get("model_size"), 1 << 50),
        model_n_params=_whole(r.get("model_n_params"), 1 << 50),
        gpu_info=_text(r.get("gpu_info")),
        cpu_info=_text(r.get("cpu_info")),
        n_threads=_whole(r.get("n_threads"), 1 << 16),
        build_commit=_text(r.get("build_commit"))[:40] or None,
        build_number=_whole(r.get("build_number"), 1 << 31),
        flash_attn=_switch(r.get("flash_attn")),
        n_batch=_whole(r.get("n_batch"), MAX_TOKENS),
        n_ubatch=_whole(r.get("n_ubatch"), MAX_TOKENS),
        placement=placement_of(facts),
        cache_types=(_kv_type(r.get("type_k")), _kv_type(r.get("type_v"))),
        fit=(facts.get("fit_target") or 0, facts.get("fit_min_ctx") or 0),
    )


def _switch(v: object) -> bool | None:
    """A llama-bench on/off field: true/false, or 1/0 (-1, `auto`, and anything else: None)."""
    if isinstance(v, bool):
        return v
    return v == 1 if isinstance(v, int) and v in (0, 1) else None


def _text(v: object) -> str:
    return clean_name(v, 200) if isinstance(v, str) else ""


def _whole(v: object, top: int) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= top else None


MAX_ROW_SAMPLES = 10_000  # a row's repetitions: samples_ns of -r 10,000 at most


def row_problem(row: object) -> str | None:
    """Why a line llama-bench's `-o jsonl` printed is not one of its result rows (None: it is one):
    what the llama-bench engine reads of its own run, line by line."""
    if not isinstance(row, dict):
        return "not a JSON object"
    for field in ("n_prompt", "n_gen", "n_depth"):
        v = row.get(field, 0)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_TOKENS:
            return f"{field} is not a token count"
    if not row.get("n_prompt") and not row.get("n_gen"):
        return "n_prompt and n_gen are both 0"
    samples = row.get("samples_ns")
    if not isinstance(samples, list) or not 0 < len(samples) <= MAX_ROW_SAMPLES:
        return "samples_ns is not a list of 1 to 10,000 times"
    if not all(isinstance(s, int) and not isinstance(s, bool) and 0 < s < 1 << 62 for s in samples):
        return "samples_ns holds something other than positive nanoseconds"
    avg = row.get("avg_ts")
    if isinstance(avg, bool) or not isinstance(avg, (int, float)) or not math.isfinite(avg) or avg <= 0:
        return "avg_ts is not a positive number"
    for field in ("backends", "model_type", "cpu_info", "gpu_info", "build_commit"):
        if not isinstance(row.get(field, ""), str):
            return f"{field} is not text"
    for field in ("model_size", "model_n_params", "build_number", "n_threads", "n_gpu_layers"):
        v = row.get(field, 0)
        if isinstance(v, bool) or not isinstance(v, int) or abs(v) >= 1 << 62:
            return f"{field} is not a whole number"
    return None


def _kv_type(value: object) -> str:
    """A row's type_k or type_v as llama.cpp names the type (f16, q8_0, ...); else the default."""
    name = value.strip().lower() if isinstance(value, str) else ""
    return name if name in KV_CACHE_TYPES else CACHE_TYPE

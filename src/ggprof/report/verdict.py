"""`ggprof profile` and `ggprof check`: verdicts and findings as JSON and as text."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, TextIO

from ggprof.bench.context import RunContext
from ggprof.bench.llamabench import context_dict, markdown, row_dict
from ggprof.bench.results import BenchResult
from ggprof.model.spec import ModelSpec
from ggprof.physics.roofline import Prediction
from ggprof.pipelines.judged import Judged
from ggprof.pipelines.profile import ProfileReport
from ggprof.report.host import device_dict
from ggprof.report.predict import predict_dict
from ggprof.report.sweep import concurrency_dict, concurrency_lines, thread_sweep_dict, thread_sweep_lines
from ggprof.units import clean, clean_name, fmt_bytes, fmt_rate, sig3
from ggprof.verdict.finding import EXIT, RANK, Finding, Severity

TAG = {"impossible": "IMPOSSIBLE", "suspicious": "SUSPICIOUS", "plausible": "plausible", "unknown": "unknown"}


_FINDING_FIELDS = tuple(field.name for field in fields(Finding))


def finding_dict(f: Finding) -> dict[str, Any]:
    """A finding's fields in order (tuples as lists); shallow, as Finding holds plain values."""
    d = {name: getattr(f, name) for name in _FINDING_FIELDS}
    return {**d, "evidence": list(f.evidence), "causes": list(f.causes)}


def judged_dict(j: Judged, model: ModelSpec, note: str = "", with_prediction: bool = True) -> dict[str, Any]:
    """A judged row as JSON; its prediction inline (`with_prediction`), or left for the caller to
    name (`check --json` lists each prediction once and rows refer to it by index)."""
    p, v = j.prediction, j.verdict
    e = v.expected
    out: dict[str, Any] = {
        "label": j.label,
        "source": j.source,
        "depth": j.depth,
        "verdict": v.severity,
        "findings": [finding_dict(f) for f in v.findings],
        "decode_ceiling_tok_s": p.decode_ceiling_tok_s if p else None,
        "expected_tok_s_low": e.low_tok_s if e else None,
        "expected_tok_s_high": e.high_tok_s if e else None,
        "expected_basis": e.basis if e else None,
        "measured_tg_tok_s": j.tg,
        "measured_pp_tok_s": j.pp,
        "efficiency": j.efficiency,
        "prefill_ceiling_tok_s": p.prefill_ceiling_tok_s if p else None,
        "tolerance": v.tolerance,
        "tolerance_basis": v.tolerance_basis,
        "likely_cause": v.likely_cause,
        "likely_next_step": v.likely_next_step,
    }
    if j.tg_row is not None:
        r = j.tg_row
        out |= {
            "tg_stddev_tok_s": r.stddev_ts,
            "tg_cv": r.cv,
            "itl_p50_ms": r.itl_percentile_ms(50),
            "itl_p95_ms": r.itl_percentile_ms(95),
            "itl_p99_ms": r.itl_percentile_ms(99),
            "probe_threads": r.probe.n_threads if r.probe else None,
            "probe_tg_tok_s": r.probe.tok_s if r.probe else None,
        }
    if j.pp_row is not None:
        out |= {
            "pp_stddev_tok_s": j.pp_row.stddev_ts,
            "ttft_ms": j.pp_row.ttft_ms,
            "ttft_p95_ms": j.pp_row.ttft_percentile_ms(95),
        }
    if with_prediction:
        out["prediction"] = predict_dict(model, p, note) if p is not None else None
    return out


# The first row's figures, repeated at the top level of `profile --json` and `check --json`.
SUMMARY_KEYS = (
    "decode_ceiling_tok_s",
    "expected_tok_s_low",
    "expected_tok_s_high",
    "expected_basis",
    "measured_tg_tok_s",
    "measured_pp_tok_s",
    "efficiency",
)
LATENCY_KEYS = ("ttft_ms", "itl_p50_ms", "itl_p95_ms", "itl_p99_ms")
VERDICT_KEYS = ("tolerance", "tolerance_basis", "likely_cause", "likely_next_step")  # profile's, the first depth's


def summary(rows: list[dict[str, Any]], severity: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The verdict, every finding, and the first row's figures under `keys`."""
    first = rows[0] if rows else {}
    return {
        "verdict": severity,
        "exit_status": int(EXIT[severity]),
        "findings": [f for row in rows for f in row["findings"]],
        **{k: first.get(k) for k in keys},
    }


def profile_dict(r: ProfileReport) -> dict[str, Any]:
    depths = [judged_dict(j, r.model, r.device_note) for j in r.judged]
    m = r.model
    return {
        **summary(depths, r.severity, SUMMARY_KEYS + LATENCY_KEYS + VERDICT_KEYS),
        "model": {
            "path": str(m.path),
            "architecture": m.architecture,
            "quant_label": m.quant_label,
            "n_params": m.n_params,
            "file_size_bytes": m.file_size_bytes,
            "decode_bytes_per_token": m.decode_bytes_per_token,
            "kv_bytes_per_token": m.kv_bytes_per_token(),
        },
        "device": device_dict(r.device) if r.device else None,
        "device_description": r.device_note,
        "engine": r.engine,
        "depths": depths,
        "bench": [row_dict(r.bench, row) for row in r.bench.rows] if r.bench else [],
        "context": context_dict(r.bench) if r.bench else None,
        "threads_sweep": thread_sweep_dict(r.threads) if r.threads else None,
        "concurrency": concurrency_dict(r.concurrency) if r.concurrency else None,
    }


@dataclass(frozen=True)
class EncodedRow:
    """One judged row of `check --json`, encoded: its severity, the row, its findings, and the
    top-level summary figures (`check --json` repeats the first row's)."""

    severity: Severity
    row: str
    findings: tuple[str, ...]
    summary: dict[str, Any]


class RowEncoder:
    """Judged rows to EncodedRow. A prediction is shared by many rows (one per backend, depth and
    prompt): a row names it by its index in the top-level `predictions` (`index_of`), which are
    written once, after the rows; at 100,000 rows inlining each would write half a gigabyte."""

    def __init__(self, model: ModelSpec, index_of: Callable[[Prediction], int]) -> None:
        self.model, self.index_of = model, index_of

    def __call__(self, j: Judged) -> EncodedRow:
        """judged_dict's JSON with `prediction_index` for the prediction, the findings last and
        each finding encoded once (the top-level `findings` take the same text)."""
        import json

        d = judged_dict(j, self.model, with_prediction=False)
        findings = tuple(json.dumps(f, allow_nan=False) for f in d.pop("findings"))
        d["prediction_index"] = self.index_of(j.prediction) if j.prediction is not None else None
        text = json.dumps(d, allow_nan=False)
        row = f'{text[:-1]}, "findings": [{", ".join(findings)}]}}'
        return EncodedRow(j.verdict.severity, row, findings, {k: d.get(k) for k in SUMMARY_KEYS})


@dataclass(frozen=True)
class Spooled:
    """A chunk of judged rows written to its spool files: what the final output needs of it."""

    severity: Severity  # the worst of the chunk ("unknown" when empty)
    rows: int
    findings: int
    summary: dict[str, Any] | None  # the chunk's first row's summary figures


def _worse(a: Severity, b: Severity) -> Severity:
    return a if RANK[a] >= RANK[b] else b


def spool_json_chunk(folder: Path, index: int, encoder: RowEncoder, judged: Iterable[Judged]) -> Spooled:
    """One chunk of `check --json`: its rows and findings, each a line, into two files of
    `folder` named by the chunk's index (written where the chunk was judged)."""
    severity: Severity = "unknown"
    summary, n_rows, n_findings = None, 0, 0
    with (folder / f"rows-{index:08d}").open("w") as rows, (folder / f"findings-{index:08d}").open("w") as found:
        for j in judged:
            r = encoder(j)
            summary = summary if summary is not None else r.summary
            severity = r.severity if n_rows == 0 else _worse(severity, r.severity)
            rows.write(("," if n_rows else "") + "\n    " + r.row)
            n_rows += 1
            for f in r.findings:
                found.write(("," if n_findings else "") + "\n    " + f)
                n_findings += 1
    return Spooled(severity, n_rows, n_findings, summary)


def write_check_json(
    folder: Path, chunks: Iterable[Spooled], out: TextIO, predictions: Callable[[], Iterable[dict[str, Any]]]
) -> Severity:
    """`check --json` from its spooled chunks: verdict, exit_status, findings (every row's), the
    first row's SUMMARY_KEYS, rows, then predictions (each once; a row's `prediction_index`
    points into them), in that order (the verdict first, known only once every row is judged),
    each row and finding one line; nothing is held in memory but a chunk's figures and the
    predictions. The worst severity."""
    import json
    import shutil

    done = list(chunks)
    judged = [c for c in done if c.rows]
    severity: Severity = judged[0].severity if judged else "unknown"
    for c in judged[1:]:
        severity = _worse(severity, c.severity)
    first = judged[0].summary if judged else None

    def copy(kind: str, count: Callable[[Spooled], int]) -> None:
        wrote = False
        for i, c in enumerate(done):
            if count(c):
                with (folder / f"{kind}-{i:08d}").open() as f:
                    if wrote:
                        out.write(",")
                    shutil.copyfileobj(f, out)
                wrote = True
        out.write("\n  ]" if wrote else "]")

    out.write(f'{{\n  "verdict": {json.dumps(severity)},\n  "exit_status": {int(EXIT[severity])},\n  "findings": [')
    copy("findings", lambda c: c.findings)
    for k in SUMMARY_KEYS:
        out.write(f",\n  {json.dumps(k)}: {json.dumps((first or {}).get(k), allow_nan=False)}")
    out.write(',\n  "rows": [')
    copy("rows", lambda c: c.rows)
    out.write(',\n  "predictions": [')
    out.write(",".join("\n    " + json.dumps(p, allow_nan=False) for p in predictions()))
    out.write("\n  ]\n}\n")
    return severity


# -- text ------------------------------------------------------------------------------------
def finding_lines(f: Finding) -> list[str]:
    lines = _wrap(f"[{TAG[f.severity]}] {clean_name(f.code, 60)}: {clean(f.title)}", "  ", "      ")
    if f.expected or f.observed:
        lines += _wrap(
            f"expected {clean(f.expected or '?')}; observed {clean(f.observed or '?')}", "      ", "        "
        )
    for e in f.evidence:
        lines += _wrap(f"- {clean(e)}", "      ", "        ")
    for i, cause in enumerate(f.causes, 1):
        lines += _wrap(f"{i}. {clean(cause)}", "      ", "         ")
    if f.next_step:
        lines += _wrap(f"next: {clean(f.next_step)}", "      ", "        ")
    return lines


WIDTH = 80


@lru_cache(maxsize=8192)  # causes, next steps and evidence repeat row after row of a llama-bench file
def _wrapped(text: str, first: str, rest: str) -> tuple[str, ...]:
    # never split at a hyphen: a flag (--no-cache-dir) or a command stays whole, to be copied
    lines = textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)
    return tuple(lines or [first])


def _wrap(text: str, first: str, rest: str) -> list[str]:
    """textwrap's lines; a line that fits as it is (textwrap would leave it whole) is not re-split."""
    if len(first) + len(text) <= WIDTH and text == text.strip() and text.isprintable():
        return [first + text]
    return list(_wrapped(text, first, rest))


def judged_lines(j: Judged) -> list[str]:
    p, v = j.prediction, j.verdict
    e = v.expected
    lines = [f"{j.label}: verdict {TAG[v.severity]}"]
    if v.likely_cause:  # said first: it explains the findings below
        lines += _wrap(f"likely cause: {clean(v.likely_cause)}", "  ", "    ")
        lines += _wrap(f"next: {clean(v.likely_next_step or '')}", "  ", "    ") if v.likely_next_step else []
    if p is not None:
        band = f"{sig3(e.low_tok_s)}-{sig3(e.high_tok_s)} tok/s ({clean(e.basis)})" if e else "not known (no band)"
        lines += _wrap(
            f"ceiling {sig3(p.decode_ceiling_tok_s)} tok/s (TPOT floor {sig3(p.tpot_floor_ms)} ms), expected {band}",
            "  ",
            "    ",
        )
    measured = []
    if j.tg is not None:
        eff = f" = {j.efficiency:.0%} of the ceiling" if j.efficiency is not None else ""
        measured.append(f"tg {sig3(j.tg)} tok/s{eff}")
    if j.pp is not None:
        measured.append(f"pp {sig3(j.pp)} tok/s")
    if j.pp_row and j.pp_row.ttft_ms is not None:
        measured.append(f"TTFT {sig3(j.pp_row.ttft_ms)} ms")
    if j.tg_row and j.tg_row.itl_ns:
        r = j.tg_row
        measured.append(
            f"ITL p50/p95/p99 {sig3(r.itl_percentile_ms(50) or 0)}/{sig3(r.itl_percentile_ms(95) or 0)}/"
            f"{sig3(r.itl_percentile_ms(99) or 0)} ms"
        )
    if measured:
        lines += _wrap(f"{j.source} " + "; ".join(measured), "  ", "    ")
        if v.tolerance is not None and j.source == "measured":  # the verdict's one +- figure (JSON `tolerance`)
            lines += _wrap(
                f"tolerance +- {v.tolerance:.0%} ({clean(v.tolerance_basis or '')}): how far past its band or "
                "ceiling a figure may land and keep its verdict",
                "  ",
                "    ",
            )
    for f in v.findings:
        lines += finding_lines(f)
    return lines


def profile_text(r: ProfileReport) -> str:
    m = r.model
    lines = [f"ggprof profile: {clean(m.path.name)}" + (f" ({clean(m.name)})" if m.name else "")]
    lines += _wrap(
        f"model: {clean(m.architecture)} {m.quant_label or ''}, {sig3(m.n_params / 1e6)}M params, "
        f"{fmt_bytes(m.file_size_bytes)}; a token reads {fmt_bytes(m.decode_bytes_per_token, binary=False)}"
        f" of weights + {fmt_bytes(m.kv_bytes_per_token(), binary=False)} of KV per token of depth",
        "",
        "  ",
    )
    if r.device is not None and r.device.bandwidth is not None:
        lines += _wrap(
            f"device: {clean(r.device.name)} [{r.device.backend}], bandwidth "
            f"{fmt_rate(r.device.bandwidth.value)} ({clean(r.device_note)})",
            "",
            "  ",
        )
    if r.bench is not None:
        c = r.bench.context
        lines += _wrap(
            "run: "
            + ", ".join(
                x
                for x in (
                    f"{clean(r.engine)}{_build(c)}",
                    ",".join(c.backends_used),
                    _threads(c),
                    _repetitions(r.bench),
                    f"{r.bench.elapsed_s:.0f} s",
                )
                if x
            ),
            "",
            "  ",
        )
        if c.engine != "python":  # what only the engine knows: where it found the server, the placement
            lines += [ln for note in c.notes for ln in _wrap(f"  {clean(note)}", "", "    ")]
        for row in r.bench.rows:
            if row.stop_reason:
                lines += _wrap(f"  {row.name}: {clean(row.stop_reason)}", "", "    ")
        lines += ["", markdown(r.bench), ""]
    for j in r.judged:
        lines += judged_lines(j)
    if r.threads is not None:
        lines += [line for text in thread_sweep_lines(r.threads) for line in _wrap(text, "", "    ")]
    if r.concurrency is not None:
        lines += concurrency_lines(r.concurrency)
    lines.append(f"verdict: {TAG[r.severity]} (exit status {int(EXIT[r.severity])})")
    return "\n".join(lines)


def _threads(c: RunContext) -> str:
    """`2 threads of 2 cores`, or what is known of it (a server on another machine: nothing)."""
    if c.n_threads is None:
        return ""
    if c.usable_cores and c.physical_cores and c.usable_cores < c.physical_cores:
        return f"{c.n_threads} threads of {c.usable_cores} usable cores ({c.physical_cores} in the machine)"
    return f"{c.n_threads} threads of {c.physical_cores} cores" if c.physical_cores else f"{c.n_threads} threads"


def _repetitions(b: BenchResult) -> str:
    stop = b.params.stop
    if stop is None:
        return f"{b.params.reps} repetitions"
    known = f"repetitions until tok/s is known within {stop.target:.0%} (95% CI; {stop.min_reps}-{stop.max_reps})"
    if not stop.ranges:
        return known
    return f"{known} or its verdict cannot change{' (from 1)' if stop.single_margin else ''}"


def _build(c: RunContext) -> str:
    """llama.cpp's build, when the engine reported it (llama-bench does), its Vulkan banner's
    matrix cores, int8 dot products and driver, a ROCm run's ROCBLAS_USE_HIPBLASLT and a SYCL
    build's GGML_SYCL_F16 and reorder optimizations, and the run's flash attention."""
    build = f", llama.cpp build {c.build_number} ({clean(c.build_commit)})" if c.build_commit else ""
    build += f", Vulkan matrix cores: {clean(c.matrix_cores)}" if c.matrix_cores else ""
    build += f", Vulkan int dot: {int(c.int_dot)}" if c.int_dot is not None else ""
    build += f", Vulkan driver: {clean(c.vulkan_driver)}" if c.vulkan_driver else ""
    setting = c.rocblas_use_hipblaslt
    if setting is not None:
        build += ", ROCBLAS_USE_HIPBLASLT " + ("not set" if setting == "unset" else f"= {clean(setting)}")
    build += f", GGML_SYCL_F16: {'yes' if c.sycl_f16 else 'no'}" if c.sycl_f16 is not None else ""
    build += f", SYCL reorder: {'on' if c.sycl_reorder else 'off'}" if c.sycl_reorder is not None else ""
    build += f", flash attention: {'on' if c.flash_attn else 'off'}" if c.flash_attn is not None else ""
    return build


def check_lines(
    model: ModelSpec, blocks: Iterable[tuple[Severity, list[str]]], note: str, severities: list[Severity]
) -> Iterator[list[str]]:
    """The text of a check, a block at a time (the header, each row's lines, the verdict), as the
    rows come (each a severity and its lines); each severity is appended to `severities`."""
    head = [f"ggprof check: {clean(model.path.name)}"]
    yield head + (_wrap(f"device: {clean(note)}", "", "  ") if note else [])
    for severity, lines in blocks:
        severities.append(severity)
        yield lines
    worst_seen = max(severities, key=lambda s: RANK[s]) if severities else "unknown"
    yield [f"verdict: {TAG[worst_seen]} (exit status {int(EXIT[worst_seen])})"]

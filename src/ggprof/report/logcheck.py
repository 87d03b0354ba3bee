"""`ggprof check --log` printed: the facts read (each with its line), what the log leaves out,
each speed's verdict, the likely cause first and the one next step; or one JSON object."""

from __future__ import annotations

from typing import Any

from ggprof.logs.records import MAX_RUNS, MAX_SPEEDS_IN_ALL, Fact, LogRun
from ggprof.logs.text import MAX_LOG_BYTES, MAX_LOG_LINES
from ggprof.pipelines.logcheck import LogCheck, Measurement, RunCheck
from ggprof.pipelines.logplacement import LogPlacement
from ggprof.report.triage import private
from ggprof.report.verdict import TAG, finding_dict, finding_lines
from ggprof.runfacts import BY_LOG_KEY
from ggprof.units import clean_name, fmt_bytes, sig3
from ggprof.verdict.finding import RANK

LINE_CHARS = 110  # a quoted log line is cut here

# The facts shown and put in JSON, in order: (key, label)
FACT_KEYS = (
    ("model_name", "model name"),
    ("model_file", "model file"),
    ("architecture", "architecture"),
    ("model_type", "model type"),
    ("quant", "quant"),
    ("model_params", "parameters"),
    ("model_size_bytes", "model size"),
    ("n_layers", "layers"),
    ("n_embd", "embedding width"),
    ("n_heads", "heads"),
    ("n_kv_heads", "KV heads"),
    ("n_ff", "FFN width"),
    ("n_experts", "experts"),
    ("n_experts_used", "experts used"),
    ("n_vocab", "vocabulary"),
    ("n_ctx_train", "trained context"),
    ("n_ctx", "context"),
    ("n_ubatch", "physical batch (-ub)"),
    ("layers_offloaded", "layers offloaded"),
    ("layers_total", "layers in all"),
    ("n_gpu_layers_requested", "-ngl asked"),
    ("threads", "threads"),
    ("hardware_threads", "hardware threads"),
    ("flash_attn", "flash attention"),
    ("cache_type_k", "K cache type"),
    ("sycl_f16", "GGML_SYCL_F16"),
    ("sycl_reorder", "SYCL reorder optimizations"),
    ("build", "build"),
    ("windows", "Windows (a backend DLL: CUDA's spill is its system-memory fallback)"),
    ("command", "command"),
)
# ... and in JSON, the rest of a context's settings as the run-fact table names them
# (`llama_context: n_seq_max = 4`, `kv_unified = true`)
JSON_FACT_KEYS = (
    *FACT_KEYS,
    *{f.name: (f.name, f.what) for f in BY_LOG_KEY.values() if f.name not in dict(FACT_KEYS)}.values(),
)


def _quote(f: Fact) -> str:
    return f"line {f.line}: {clean_name(private(f.text), LINE_CHARS)}"


def _shown(key: str, value: Any) -> str:
    if key == "model_size_bytes":
        return fmt_bytes(value)
    if key == "model_params":
        return f"{value / 1e9:.3g} B" if value >= 1e9 else f"{value / 1e6:.3g} M"
    if key == "command":
        return clean_name(private(str(value)), 80)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return clean_name(value, 80) if not isinstance(value, int) else f"{value:,}"


def facts_dict(rc: RunCheck) -> dict[str, Any]:
    r = rc.run
    out: dict[str, Any] = {
        k: (private(v) if isinstance(v, str) else v) for k, _ in JSON_FACT_KEYS if (v := r.value(k)) is not None
    }
    out["backend"] = rc.backend
    out["device_names"] = [clean_name(d.name, 120) for d in r.devices]
    out.setdefault("model_params", None)
    out.setdefault("model_size_bytes", None)
    for k in ("quant", "n_layers", "layers_offloaded", "layers_total", "threads", "build"):
        out.setdefault(k, None)
    return out


def _sources(r: LogRun) -> dict[str, Any]:
    return {
        k: {"line": f.line, "text": clean_name(private(f.text), 300)}
        for k, _ in JSON_FACT_KEYS
        if (f := r.facts.get(k)) is not None
    }


def measurement_dict(m: Measurement, index: int) -> dict[str, Any]:
    s, j = m.speed, m.judged
    out: dict[str, Any] = {
        "run": index + 1,
        "kind": s.kind,
        "tok_s": s.tok_s,
        "n_tokens": s.n_tokens,
        "depth": s.depth,
        "line": s.line,
        "source": s.source,
        "verdict": m.severity,
        "findings": [finding_dict(f) for f in j.verdict.findings] if j else [],
        "decode_ceiling_tok_s": j.prediction.decode_ceiling_tok_s if j and j.prediction else None,
        "expected_tok_s_low": j.verdict.expected.low_tok_s if j and j.verdict.expected else None,
        "expected_tok_s_high": j.verdict.expected.high_tok_s if j and j.verdict.expected else None,
        "not_judged": m.note.removeprefix("not judged: ") if m.note else None,
    }
    return out


def log_dict(c: LogCheck) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for rc in c.runs:
        spec = rc.model.spec
        lo_hi = rc.model.decode_bytes_range
        runs.append(
            {
                "run": rc.index + 1,
                "first_line": rc.run.first_line,
                "verdict": rc.severity,
                "facts": facts_dict(rc),
                "sources": _sources(rc.run),
                "devices": [
                    {
                        "name": clean_name(d.name, 120),
                        "backend": d.backend,
                        "line": d.line,
                        "memory_bytes": d.memory_bytes,
                        "compute": d.compute,
                        "uma": d.uma,
                        "fp16": d.fp16,
                        "int_dot": d.int_dot,
                        "matrix_cores": d.matrix_cores,
                        "driver": d.driver,  # cleaned where the banner is read
                    }
                    for d in rc.run.devices
                ],
                "tensor_types": dict(rc.run.type_counts),
                "warnings": [{"line": w.line, "text": clean_name(private(w.text), 300)} for w in rc.run.warnings],
                "model_buffers_bytes": {clean_name(k, 32): f.value for k, f in rc.run.model_buffers.items()},
                "kv_buffers_bytes": {clean_name(k, 32): f.value for k, f in rc.run.kv_buffers.items()},
                "placement": _placement_dict(rc.placement),
                "model": {
                    "source": clean_name(private(rc.model.source), 120),
                    "decode_bytes_per_token": spec.decode_bytes_per_token if spec else None,
                    "decode_bytes_range": list(lo_hi) if lo_hi else None,
                    "kv_bytes_per_token": spec.kv_bytes_per_token() if spec and spec.n_heads else None,
                    "assumptions": list(rc.model.assumptions),
                },
                "device": clean_name(rc.device_note, 200),
                "missing": rc.missing,
                "measurements": [measurement_dict(m, rc.index) for m in rc.measurements],
                "causes": [
                    {"code": x.code, "title": x.title, "lines": [f.line for f in x.evidence], "next_step": x.next_step}
                    for x in rc.causes
                ],
                "next_step": _next_step(rc),
            }
        )
    return {
        "log": c.log.name,
        "formats": c.parsed.formats,
        "bytes_read": c.log.bytes_read,
        "lines_read": c.log.lines_read,
        "truncated": c.log.truncated,
        "bytes_skipped": list(c.log.skipped) if c.log.skipped else None,
        "lines_cut": c.log.cut_lines,
        "verdict": c.severity,
        "facts": runs[0]["facts"] if runs else {},
        "measurements": [m for r in runs for m in r["measurements"]],
        "runs": runs,
        "comparison": c.comparison,
    }


def _likely(rc: RunCheck) -> tuple[str, str | None, str | None] | None:
    """The likely cause (its title, its line, the next step): the log's own first, else the
    first cause of the worst finding."""
    if rc.causes:
        x = rc.causes[0]
        return x.title, (f"line {x.evidence[0].line}" if x.evidence else None), x.next_step
    worst = [m for m in rc.measurements if m.judged and m.severity in ("suspicious", "impossible")]
    for m in worst:
        for f in m.judged.verdict.findings if m.judged else ():
            if f.severity == m.severity and f.causes:
                return f.causes[0], f"line {m.speed.line}", f.next_step
    return None


def _next_step(rc: RunCheck) -> str | None:
    likely = _likely(rc)
    if likely is not None:
        return likely[2]
    if rc.missing and any(m.judged is None for m in rc.measurements):
        return "give what the log leaves out (above) to judge its speeds"
    return None


def log_text(c: LogCheck) -> str:
    formats = ", ".join(c.parsed.formats) or "no known format"
    lines = [f"ggprof check --log: {clean_name(c.log.name, 80)} ({formats})"]
    lines += _read_lines(c)
    for rc in c.runs:
        lines += _run_lines(rc, len(c.runs))
    if c.comparison:
        lines.append("compared:")
        lines += [f"  {clean_name(x, 300)}" for x in c.comparison]
    return "\n".join(lines) + "\n"


def _read_lines(c: LogCheck) -> list[str]:
    """What reading the log left out, with the caps that left it out."""
    log, out = c.log, []
    cap = f"ggprof reads at most {MAX_LOG_BYTES >> 20} MiB and {MAX_LOG_LINES:,} lines of a log"
    lines = f"{log.lines_read:,} line{'s' if log.lines_read != 1 else ''}"
    if log.skipped:
        a, b = log.skipped
        tail = log.bytes_read - a
        out.append(
            f"  a long log: its first {fmt_bytes(a)}{f' and last {fmt_bytes(tail)}' if tail else ''} read ({lines}; "
            f"{cap}), bytes {a:,}-{b:,} (its middle) not; line numbers after the gap count from the gap"
        )
    elif log.truncated:
        out.append(f"  read the first {fmt_bytes(log.bytes_read)} ({lines}) only ({cap}); the rest was not read")
    if log.cut_lines:
        out.append(f"  {log.cut_lines:,} over-long line{'s were' if log.cut_lines != 1 else ' was'} cut")
    if c.parsed.runs_dropped:
        out.append(
            f"  {c.parsed.runs_dropped} earlier runs left out (a log keeps its last {MAX_RUNS} runs, "
            f"{MAX_SPEEDS_IN_ALL:,} speeds in all)"
        )
    return out


def _run_lines(rc: RunCheck, n_runs: int) -> list[str]:
    r = rc.run
    head = f"run {rc.index + 1} (from line {r.first_line})" if n_runs > 1 else "the run"
    out = [f"{head}: verdict {TAG[rc.severity]}"]
    backend = f"  backend: {rc.backend}" + (f" ({_quote(rc.backend_line)})" if rc.backend_line else "")
    out.append(backend)
    for d in r.devices:
        extra = [
            x
            for x in (
                f"compute {d.compute}" if d.compute else None,
                fmt_bytes(d.memory_bytes) if d.memory_bytes else None,
                f"matrix cores {d.matrix_cores}" if d.matrix_cores else None,
                f"int dot {int(d.int_dot)}" if d.int_dot is not None else None,
                f"driver {d.driver}" if d.driver else None,
                "uma" if d.uma else None,
            )
            if x
        ]
        out.append(
            f"  device {d.index}: {clean_name(d.name, 80)} "
            f"({d.backend}{', ' + ', '.join(extra) if extra else ''}; line {d.line})"
        )
    for key, label in FACT_KEYS:
        f = r.facts.get(key)
        if f is not None:
            out.append(f"  {label}: {_shown(key, f.value)} (line {f.line})")
    if rc.placement is not None:
        out += _placement_lines(rc.placement)
    spec = rc.model.spec
    if spec is not None:
        rng = rc.model.decode_bytes_range
        spread = (
            f" ({fmt_bytes(rng[0], binary=False)}-{fmt_bytes(rng[1], binary=False)} as the log allows)" if rng else ""
        )
        out.append(
            f"  model ({clean_name(private(rc.model.source), 60)}): a token reads "
            f"{fmt_bytes(spec.decode_bytes_per_token, binary=False)} of weights{spread}"
        )
        out += [f"    assumed: {a}" for a in rc.model.assumptions]
    out.append(f"  judged against: {clean_name(rc.device_note, 160)}")
    if rc.missing:
        out.append("  not in the log:")
        out += [f"    - {m}" for m in rc.missing]
    for m in rc.measurements:
        s = m.speed
        if m.judged is None:
            out.append(
                f"  {s.kind} {sig3(s.tok_s)} tok/s ({s.n_tokens or '?'} tokens, {s.source}, line {s.line}): {m.note}"
            )
            continue
        v = m.judged.verdict
        main = max(v.findings, key=lambda f: RANK[f.severity]) if v.findings else None
        where = f"line {s.line}, {s.source}, {s.n_tokens or '?'} tokens at depth {s.depth:,}"
        title = f": {clean_name(main.title, 200)}" if main else ""
        band = (
            f" (expected {sig3(v.expected.low_tok_s)}-{sig3(v.expected.high_tok_s)} tok/s)"
            if v.expected and s.kind == "decode"
            else ""
        )
        out.append(f"  {s.kind} {sig3(s.tok_s)} tok/s ({where}): {TAG[v.severity]}{title}{band}")
        for finding in v.findings:
            if finding.severity in ("suspicious", "impossible") or (finding.severity == "unknown" and finding is main):
                out += ["    " + x for x in finding_lines(finding)]
    likely = _likely(rc)
    if len(rc.causes) > 1:
        out.append("  causes the log shows, most likely first:")
        for x in rc.causes:
            out.append(f"    - {x.title} ({', '.join(f'line {f.line}' for f in x.evidence)})")
    if likely is not None:
        out.append(f"  likely cause: {clean_name(likely[0], 300)}" + (f" ({likely[1]})" if likely[1] else ""))
    step = _next_step(rc)
    if step:
        out.append(f"  next step: {clean_name(step, 300)}")
    return out


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:,.2f} MiB"


def _placement_lines(p: LogPlacement) -> list[str]:
    """Each device's buffers as the log printed them, beside ggprof's for the placement read."""
    out = [f"  placement: {clean_name(p.flags, 200) or '?'}, {p.source}"]
    if p.fit:
        chosen = "; ".join(
            f"{c.device} ({clean_name(c.where, 40)}) {c.layers} layers ({c.overflowing} overflowing)" for c in p.fit
        )
        status = f", {p.fit_status.value} (line {p.fit_status.line})" if p.fit_status else ""
        out.append(f"    --fit chose: {chosen}{status}")
    if all(row.predicted_bytes is None and row.kv_bytes is None for row in p.rows):  # the log's alone: one line
        shown = ", ".join(f"{clean_name(row.name, 40)} {_mib(row.model_bytes)} (line {row.line})" for row in p.rows)
        return [*out, f"    weights in: {shown}"]
    for row in p.rows:
        where = f" ({clean_name(row.where, 40)})" if row.where else ""
        kv = f", KV cache {_mib(row.kv_bytes)}" if row.kv_bytes is not None else ""
        err = f" ({row.error:+.1%})" if row.error is not None else ""
        ours = (
            f"; ggprof for this placement {_mib(row.predicted_bytes)}{err}" if row.predicted_bytes is not None else ""
        )
        out.append(
            f"    {clean_name(row.name, 40)}{where}: weights {_mib(row.model_bytes)} (line {row.line}){kv}{ours}"
        )
    if p.breakdown:
        shown = "; ".join(
            f"{clean_name(name, 20)} model {f.value[2]} + context {f.value[3]} + compute {f.value[4]}"
            for name, f in p.breakdown
        )
        out.append(f"    memory breakdown (MiB, line {p.breakdown[0][1].line}): {shown}")
    return out


def _placement_dict(p: LogPlacement | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {
        "flags": p.flags,
        "source": p.source,
        "buffers": [
            {
                "name": clean_name(r.name, 40),
                "where": clean_name(r.where, 80),
                "model_bytes": r.model_bytes,
                "kv_bytes": r.kv_bytes,
                "predicted_bytes": r.predicted_bytes,
                "error": r.error,
                "line": r.line,
            }
            for r in p.rows
        ],
        "fit": [
            {
                "device": c.device,
                "where": clean_name(c.where, 80),
                "layers": c.layers,
                "overflowing": c.overflowing,
                "used_mib": c.used_mib,
                "free_mib": c.free_mib,
                "line": c.line,
            }
            for c in p.fit
        ],
        "fit_status": p.fit_status.value if p.fit_status else None,
        "memory_breakdown_mib": {
            name: dict(zip(("self", "model", "context", "compute"), f.value[1:], strict=True))
            for name, f in p.breakdown
        },
    }

"""`ggprof report`: a Markdown block to paste into a llama.cpp, Ollama or LM Studio issue.

Everything in it comes from the kept run. Nothing secret, in every format: every path is
shown as its file name only (a path under a home folder names the user, whoever that is and
whoever runs `report`), and the host's name and fingerprint never appear.
"""

from __future__ import annotations

import re
from typing import Any

from ggprof import __version__
from ggprof.history.compare import label_of
from ggprof.history.store import Run
from ggprof.report.gap import gap_markdown
from ggprof.runfacts import command_line, from_json
from ggprof.units import clean, fmt_bytes, fmt_rate, sig3

# A path: a separator, then parts (Windows drive letters too); not the `//` of a URL.
_PATH = re.compile(r"(?<![\w:/.~])(?:~|[A-Za-z]:)?(?:[\\/][^\s\\/'\"`|,;()]+)+[\\/]?")


def private(text: str) -> str:
    """`text` with every path cut to its file name, and cleaned of control characters."""
    return clean(_PATH.sub(lambda m: re.split(r"[\\/]", m.group(0).rstrip("\\/"))[-1] or m.group(0), text))


def public(value: Any) -> Any:
    """A report part with every string made `private` (lists and objects walked)."""
    if isinstance(value, str):
        return private(value)
    if isinstance(value, list):
        return [public(v) for v in value]
    if isinstance(value, dict):
        return {k: public(v) for k, v in value.items()}
    return value


def triage_dict(run: Run) -> dict[str, Any]:
    p = run.payload
    result = p.get("result") or {}
    d = {
        "run": run.id,
        "created_at": run.created_at,
        "kind": run.kind,
        "ggprof_version": p.get("ggprof_version"),
        "command": private(" ".join(p.get("command") or [])),
        "host": {k: v for k, v in (p.get("host") or {}).items() if k != "fingerprint"},
        "model": p.get("model"),
        "device": result.get("device"),
        "device_description": private(str(result.get("device_description") or "")),
        "context": result.get("context"),
        "verdict": result.get("verdict"),
        "findings": result.get("findings") or [],
        "rows": run.record.rows,
    }
    shown: dict[str, Any] = public(d)
    return shown


def _line(label: str, value: object) -> str:
    return f"- **{label}:** {private(str(value))}"


def triage_markdown(run: Run) -> str:
    d = triage_dict(run)
    host, model, ctx, device = d["host"], d["model"] or {}, d["context"] or {}, d["device"] or {}
    rows = d["rows"]
    first = rows[0] if rows else {}
    lines = [f"### ggprof {d['kind']}: {private(model.get('name') or model.get('file') or '?')}", ""]
    lines += [
        _line(
            "host",
            f"{host.get('cpu_model')}, {host.get('physical_cores')} cores ({host.get('logical_cores')} "
            f"logical), {fmt_bytes(host.get('ram_total_bytes') or 0)} RAM; {host.get('os')}",
        ),
        _line("GPUs", ", ".join(host.get("devices") or []) or "none detected"),
    ]
    if device:
        bw = device.get("bandwidth_bytes_per_s")
        source = device.get("bandwidth_source") or "?"
        lines.append(
            _line(
                "bandwidth", f"{fmt_rate(bw) if bw else 'unknown'} ({source}: {device.get('bandwidth_detail') or ''})"
            )
        )
    version = ctx.get("llama_cpp_python_version") or first.get("llama_cpp_python_version")
    engine = ctx.get("engine") or first.get("engine") or "python"
    runner = f"llama-cpp-python {version}" if engine == "python" else f"{engine} engine"
    lines += [
        _line(
            "llama.cpp",
            f"{runner}, "
            f"backends {','.join(ctx.get('backends_used') or []) or first.get('backends')}, "
            f"build {first.get('build_commit') or 'unknown'}",
        ),
        _line(
            "flags",
            command_line(
                from_json({**ctx, **(ctx.get("drafting") or {})})  # the run's, where its first row does not say
                | {k: v for k, v in from_json(first).items() if v is not None}
                | {"repack": False if ctx.get("repack") is False else None}
            ),
        ),
        _line("compiled with", " ".join(ctx.get("simd_compiled") or []) or "?"),
        _line(
            "model",
            f"{model.get('architecture')} {model.get('quant_label') or ''}, "
            f"{sig3((model.get('n_params') or 0) / 1e6)}M params, {fmt_bytes(model.get('file_size_bytes') or 0)}; "
            f"a token reads {fmt_bytes(model.get('decode_bytes_per_token') or 0, binary=False)} of weights",
        ),
        _line("command", f"`{d['command']}`"),
        "",
        "| test | t/s | ± | repetitions |",
        "| --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        n = len(r.get("samples_ns") or r.get("samples_ts") or [])
        lines.append(f"| {label_of(r)} | {sig3(r.get('avg_ts') or 0)} | {sig3(r.get('stddev_ts') or 0)} | {n} |")
    # why each test stopped repeating (an adaptive run), for whoever judges the spread
    stops = [f"- {label_of(r)}: {private(str(r['stop_reason']))}" for r in rows if r.get("stop_reason")]
    if stops:
        lines += ["", *stops]
    result = run.payload.get("result") or {}
    if isinstance(gap := result.get("gap"), dict):
        lines += ["", f"**Against llama-bench** ({private(str(gap.get('server') or ''))}):", gap_markdown(public(gap))]
    if d["verdict"]:
        tg = sig3(result.get("measured_tg_tok_s") or 0)
        lines += [
            "",
            f"**Verdict: {d['verdict']}.** Measured decode {tg} tok/s; "
            f"ceiling {sig3(result.get('decode_ceiling_tok_s') or 0)} tok/s; expected "
            f"{sig3(result.get('expected_tok_s_low') or 0)}-{sig3(result.get('expected_tok_s_high') or 0)} tok/s "
            f"({private(str(result.get('expected_basis') or ''))}).",
        ]
    for f in d["findings"]:
        lines += ["", f"- **{f.get('severity')} `{private(str(f.get('code')))}`:** {private(str(f.get('title')))}"]
        if f.get("expected") or f.get("observed"):
            lines.append(f"  - expected {private(str(f.get('expected')))}; observed {private(str(f.get('observed')))}")
        lines += [f"  - {private(str(e))}" for e in f.get("evidence") or []]
        lines += [f"  - cause: {private(str(c))}" for c in f.get("causes") or []]
        if f.get("next_step"):
            lines.append(f"  - next: {private(str(f['next_step']))}")
    lines += ["", f"<sub>ggprof {d['ggprof_version'] or __version__}, run {run.id} of {run.created_at}</sub>"]
    return "\n".join(lines)

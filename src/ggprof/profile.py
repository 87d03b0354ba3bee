"""`ggprof profile` and `ggprof check`: the pipeline inspect -> host -> predict -> bench -> judge.

profile measures here and judges each depth it ran; check judges a number someone
reported, running nothing. Both build a JudgeCase per measurement and ask the plugins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ggprof.backend import Device
from ggprof.bench.context import RunContext
from ggprof.bench.results import BenchParams, BenchResult, BenchRow
from ggprof.bench.runner import ProgressFn, run_bench
from ggprof.errors import BadInputError
from ggprof.host import HostReport, describe_host
from ggprof.judge import JudgeCase, Verdict, judge, worst
from ggprof.model import ModelSpec
from ggprof.predict import PredictInputs, Prediction, predict
from ggprof.target import Target, efficiency_band, resolve_target


@dataclass(frozen=True)
class Judged:
    """One measurement (a depth of a profile run, or one reported number) and its verdict."""

    label: str
    depth: int
    prediction: Prediction | None
    tg: float | None
    pp: float | None
    verdict: Verdict
    tg_row: BenchRow | None = None
    pp_row: BenchRow | None = None
    source: str = "measured"  # or "reported" (ggprof check)

    @property
    def efficiency(self) -> float | None:
        if self.prediction is None or self.tg is None:
            return None
        return self.tg / self.prediction.decode_ceiling_tok_s


@dataclass(frozen=True)
class ProfileReport:
    model: ModelSpec
    host: HostReport | None
    device: Device | None
    device_note: str
    bench: BenchResult | None
    judged: tuple[Judged, ...]

    @property
    def severity(self) -> str:
        return worst([j.verdict for j in self.judged])


def probe_threads(n_threads: int) -> int | None:
    """Half the threads: one doubling, the step PARALLEL_EFFICIENCY was calibrated on."""
    return max(n_threads // 2, 1) if n_threads >= 2 else None


def run_profile(
    spec: ModelSpec,
    params: BenchParams,
    device_id: str | None = None,
    bandwidth: str | None = None,
    flops: str | None = None,
    progress: ProgressFn | None = None,
) -> ProfileReport:
    """Measure the host (or reuse its cached measurement), run the benchmark, judge every depth."""
    host = describe_host(measure=True, quick=True)
    params = replace(params, probe_threads=probe_threads(params.n_threads))
    result = run_bench(params, progress=progress)
    backend = backend_of(result.context)
    target = _device_for(backend, host, device_id, bandwidth, flops)
    judged = []
    for depth in params.n_depth:
        tg_row, pp_row = result.row("tg", depth), result.row("pp", depth)
        inputs = PredictInputs(depth=depth, prompt=params.n_prompt[0], gen=params.n_gen[0],
                               ctx=depth + params.n_prompt[0] + params.n_gen[0] + 1, cache_type_k=params.type_k,
                               cache_type_v=params.type_v, n_gpu_layers=params.n_gpu_layers)  # fmt: skip
        prediction = _predict(spec, target, inputs)
        case = JudgeCase(spec, backend, prediction, tg_row.avg_ts if tg_row else None,
                         pp_row.avg_ts if pp_row else None, params.n_prompt[0], depth,
                         tg_row.cv if tg_row else None, pp_row.cv if pp_row else None, result.context,
                         tg_row.probe if tg_row else None,
                         tuple(tg_row.samples_ts) if tg_row else ())  # fmt: skip
        judged.append(Judged(f"depth {depth:,}", depth, prediction, case.measured_tg_tok_s, case.measured_pp_tok_s,
                             judge(case), tg_row, pp_row))  # fmt: skip
    return ProfileReport(spec, host, target.device if target else None, target.description if target else "",
                         result, tuple(judged))  # fmt: skip


def backend_of(context: RunContext) -> str:
    """The backend that did the work: the plugins say whether a run used them (an accelerator
    before the CPU, which always holds the input embedding)."""
    from ggprof.plugins import backends

    used = [name for name, b in backends().items() if b.used_by(context)]
    return next((n for n in used if n != "cpu"), used[0] if used else context.backends_used[0])


def _device_for(
    backend: str, host: HostReport, device_id: str | None, bandwidth: str | None, flops: str | None
) -> Target | None:
    """The device the run used: a given profile or figures, else this host's device of that backend."""
    if device_id or bandwidth:
        return resolve_target(device_id, bandwidth, flops, backend=backend)
    device = next((d for d in host.devices if d.backend == backend), None)
    if device is None or device.bandwidth is None:
        return None
    when = "measured now" if not host.from_cache else "cached measurement"
    note = f"this host ({device.id}), bandwidth {device.bandwidth.describe()} ({when})"
    return Target(device, host.cpu if backend != "cpu" else None, note)


def _predict(spec: ModelSpec, target: Target | None, inputs: PredictInputs) -> Prediction | None:
    if target is None or target.device.bandwidth is None:
        return None
    partial = inputs.n_gpu_layers is not None and 0 <= inputs.n_gpu_layers <= spec.n_layers
    if partial and target.device.backend != "cpu" and (target.cpu is None or target.cpu.bandwidth is None):
        return None
    return predict(spec, target.device, inputs, efficiency_band(spec, target.device), target.cpu)


# -- check: judge reported numbers without running anything ------------------------------------
def check_reported(
    spec: ModelSpec,
    tg: float | None,
    pp: float | None,
    depth: int = 0,
    n_prompt: int = 512,
    device_id: str | None = None,
    bandwidth: str | None = None,
    flops: str | None = None,
    backend: str | None = None,
    n_gpu_layers: int | None = None,
    cv: float | None = None,
    label: str = "reported",
) -> Judged:
    try:
        target: Target | None = resolve_target(
            device_id, bandwidth, flops, backend=backend, need_host_cpu=_is_partial(spec, n_gpu_layers)
        )
    except BadInputError as e:
        if "no bandwidth is known" not in str(e):
            raise
        target = None
    used = backend or (target.device.backend if target else "cpu")
    inputs = PredictInputs(
        depth=depth, prompt=n_prompt, gen=1, ctx=max(depth + n_prompt + 1, 1), n_gpu_layers=n_gpu_layers
    )
    prediction = _predict(spec, target, inputs)
    case = JudgeCase(spec, used, prediction, tg, pp, n_prompt, depth, cv, source="reported")
    return Judged(label, depth, prediction, tg, pp, judge(case), source="reported")


def _is_partial(spec: ModelSpec, n_gpu_layers: int | None) -> bool:
    return n_gpu_layers is not None and 0 <= n_gpu_layers <= spec.n_layers


# llama-bench's "backends" field -> ggprof backend names
_LLAMA_BENCH_BACKENDS = {
    "cpu": "cpu",
    "cuda": "cuda",
    "metal": "metal",
    "mtl": "metal",
    "vulkan": "vulkan",
    "rocm": "rocm",
    "hip": "rocm",
}


def llama_bench_backend(field: str) -> str:
    """The first compute backend of a llama-bench row ("CUDA", "Metal,BLAS", "CPU")."""
    for part in str(field).replace(";", ",").split(","):
        name = _LLAMA_BENCH_BACKENDS.get(part.strip().lower())
        if name:
            return name
    return str(field).split(",")[0].strip().lower() or "cpu"


def check_llama_bench_row(
    spec: ModelSpec,
    row: dict[str, Any],
    device_id: str | None,
    bandwidth: str | None,
    flops: str | None,
    backend: str | None,
) -> Judged:
    """One row of `llama-bench -o json`: pp rows judge prefill, tg rows judge decode."""
    n_prompt, n_gen = int(row.get("n_prompt", 0)), int(row.get("n_gen", 0))
    avg = float(row["avg_ts"])
    cv = float(row.get("stddev_ts", 0.0)) / avg if avg else None
    ngl = row.get("n_gpu_layers")
    used = backend or llama_bench_backend(row.get("backends", "CPU"))
    label = f"{'pp' if n_prompt else 'tg'}{n_prompt or n_gen}" + (f" @ d{row['n_depth']}" if row.get("n_depth") else "")
    return check_reported(spec, avg if n_gen and not n_prompt else None, avg if n_prompt and not n_gen else None,
                          int(row.get("n_depth", 0)), n_prompt or 512, device_id, bandwidth, flops, used,
                          None if used == "cpu" or ngl is None else int(ngl), cv, label)  # fmt: skip


def read_llama_bench_rows(path: str) -> list[dict[str, Any]]:
    """Rows of llama-bench's -o json (a list) or -o jsonl (one object a line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BadInputError(f"{path}: not llama-bench JSON (not UTF-8 text)") from None
    except OSError as e:
        raise BadInputError(f"{path}: {e.strerror or e}") from None
    try:
        data = json.loads(text)
        rows = data if isinstance(data, list) else [data]
    except ValueError:
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as e:
            raise BadInputError(f"{path}: not llama-bench JSON or JSONL output ({e})") from None
    if not rows or not all(isinstance(r, dict) and "avg_ts" in r for r in rows):
        raise BadInputError(f"{path}: no llama-bench rows (objects with avg_ts) found")
    return rows

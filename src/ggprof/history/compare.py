"""Compare two runs test by test, as llama.cpp's compare-llama-bench script does, and say whether
each difference is larger than the runs' own noise.

A difference is real when Welch's t-test on the two runs' repetitions rejects "same mean"
at the 5% level (two-sided): t = (mean_B - mean_A) / sqrt(s_A^2/n_A + s_B^2/n_B), with the
Welch-Satterthwaite degrees of freedom. With a single repetition on either side there is
no noise estimate, and the comparison says so instead of guessing.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from ggprof.errors import BadInputError
from ggprof.llamacpp import test_name
from ggprof.runfacts import FACTS as RUN_FACTS
from ggprof.runfacts import from_json
from ggprof.stats import t_critical
from ggprof.units import MAX_TOK_S, clean_name

# Fields of a row that change what was measured; a difference there is named beside the table.
SETTINGS = (
    ("cpu_info", "CPU"),
    ("gpu_info", "GPU"),
    ("backends", "backend"),
    ("engine", "engine"),
    ("build_commit", "llama.cpp build"),
    ("llama_cpp_python_version", "llama-cpp-python"),
)  # and every run fact (ggprof.runfacts), named and spelled as llama.cpp spells it


@dataclass(frozen=True, kw_only=True)
class Stats:
    mean: float
    sd: float
    n: int


def stats_of(row: dict[str, Any]) -> Stats:
    samples = [float(x) for x in row.get("samples_ts") or [] if isinstance(x, (int, float))]
    if len(samples) >= 2:
        return Stats(mean=statistics.fmean(samples), sd=statistics.stdev(samples), n=len(samples))
    return Stats(mean=float(row["avg_ts"]), sd=float(row.get("stddev_ts") or 0.0), n=max(len(samples), 1))


@dataclass(frozen=True, kw_only=True)
class Difference:
    test: str
    a: Stats
    b: Stats
    t: float | None
    df: float | None
    significant: bool | None  # None: no noise estimate (one repetition)

    @property
    def speedup(self) -> float:
        return self.b.mean / self.a.mean if self.a.mean else math.inf

    @property
    def verdict(self) -> str:
        if self.significant is None:
            return "unknown (one repetition: no noise estimate)"
        if not self.significant:
            return "within noise"
        return "faster" if self.speedup > 1 else "slower"


@dataclass(frozen=True, kw_only=True)
class Comparison:
    a_label: str
    b_label: str
    diffs: tuple[Difference, ...]
    settings: tuple[str, ...]  # what else differs between A and B, in words
    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]


def welch(a: Stats, b: Stats) -> tuple[float | None, float | None, bool | None]:
    if a.n < 2 or b.n < 2:
        return None, None, None
    va, vb = a.sd**2 / a.n, b.sd**2 / b.n
    if va + vb == 0:
        return math.inf if a.mean != b.mean else 0.0, None, a.mean != b.mean
    t = (b.mean - a.mean) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va**2 / (a.n - 1) if va else 0) + (vb**2 / (b.n - 1) if vb else 0))
    return t, df, abs(t) > t_critical(df)


def label_of(row: dict[str, Any]) -> str:
    def count(key: str, default: int = 0) -> int:
        value = row.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    return test_name(count("n_prompt"), count("n_gen"), count("n_depth"), count("n_parallel", 1))


def compare(a_label: str, a_rows: list[dict[str, Any]], b_label: str, b_rows: list[dict[str, Any]]) -> Comparison:
    """Test-by-test comparison of two runs of one model (BadInputError for two models)."""
    if not a_rows or not b_rows:
        raise BadInputError(f"{a_label if not a_rows else b_label}: no llama-bench rows to compare")
    for label, rows in ((a_label, a_rows), (b_label, b_rows)):
        for i, row in enumerate(rows, 1):
            _check_figures(label, i, row)
    _same_model(a_label, a_rows[0], b_label, b_rows[0])
    a, b = _keyed(a_rows), _keyed(b_rows)
    diffs = []
    for key in [k for k in a if k in b]:
        sa, sb = stats_of(a[key]), stats_of(b[key])
        t, df, significant = welch(sa, sb)
        diffs.append(Difference(test=key, a=sa, b=sb, t=t, df=df, significant=significant))
    return Comparison(
        a_label=a_label,
        b_label=b_label,
        diffs=tuple(diffs),
        settings=tuple(_settings(a_rows[0], b_rows[0])),
        only_in_a=tuple(k for k in a if k not in b),
        only_in_b=tuple(k for k in b if k not in a),
    )


def _check_figures(label: str, index: int, row: dict[str, Any]) -> None:
    """A row's speeds as a run can have them (BadInputError naming the row and field): `avg_ts`
    and each of `samples_ts` a finite number above 0 and at most MAX_TOK_S, `stddev_ts` finite and 0
    or more. NaN compared as a speed was accepted, its difference `nan`."""

    def fine(v: object, low_ok: bool) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if isinstance(v, int) and abs(v) >= 1 << 53:
            return False
        return math.isfinite(v) and (v >= 0 if low_ok else 0 < v <= MAX_TOK_S)

    def bad(field: str, wanted: str, v: object) -> BadInputError:
        return BadInputError(f"{label}: row {index}: field {field!r} must be {wanted}, got {clean_name(repr(v), 40)}")

    speed = f"a finite number above 0, at most {MAX_TOK_S:,.0f}"
    if not fine(row.get("avg_ts"), False):
        raise bad("avg_ts", speed, row.get("avg_ts"))
    if row.get("stddev_ts") is not None and not fine(row["stddev_ts"], True):
        raise bad("stddev_ts", "a finite number, 0 or more", row["stddev_ts"])
    samples = row.get("samples_ts")
    if samples is not None:
        if not isinstance(samples, list):
            raise bad("samples_ts", "a list of speeds", samples)
        for v in samples:
            if not fine(v, False):
                raise bad("samples_ts", f"a list of speeds, each {speed}", v)


def _keyed(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    threads = {r.get("n_threads") for r in rows}
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = label_of(r) + (f" t{r.get('n_threads')}" if len(threads) > 1 else "")
        out.setdefault(key, r)
    return out


def _same_model(a_label: str, a: dict[str, Any], b_label: str, b: dict[str, Any]) -> None:
    ka, kb = (a.get("model_size"), a.get("model_n_params")), (b.get("model_size"), b.get("model_n_params"))
    if None not in ka and None not in kb and ka != kb:
        raise BadInputError(
            f"{a_label} and {b_label} ran different models ({a.get('model_type') or '?'}, {ka[0]} bytes vs "
            f"{b.get('model_type') or '?'}, {kb[0]} bytes): compare two runs of one model"
        )


def _settings(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    out = []
    for field, name in SETTINGS:
        va, vb = a.get(field), b.get(field)
        if va is not None and vb is not None and va != vb:
            out.append(f"{name}: {va} vs {vb}")
    fa, fb = from_json(a), from_json(b)
    for fact in RUN_FACTS:
        va, vb = fa.get(fact.name), fb.get(fact.name)
        if va is not None and vb is not None and va != vb:
            out.append(f"{fact.what}: {fact.spell(va)} vs {fact.spell(vb)}")
    return out

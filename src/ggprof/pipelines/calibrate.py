"""Calibration on published results: load the dataset, fit the speed models, judge every row.

A dataset row is one published llama.cpp result (JSON lines): where it was published
(`source`), the device (a profile id: its bandwidth and peak FLOP/s, with their sources),
the backend, the model (`model_ref`, a reference header: ggprof.model.reference), the test
as llama-bench names it (`tg128`, `pp512`, `pp512@d4096`) and the tok/s. Rows that do not
hold up are rejected with their line number, never skipped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from ggprof.calibration import speed_fits
from ggprof.calibration.levels import fit_levels, observed
from ggprof.calibration.regression import Point, regress_backends, residuals
from ggprof.errors import BadInputError
from ggprof.figures import Figure
from ggprof.files import read_text
from ggprof.llamacpp import N_PROMPT
from ggprof.machine.device import BuildFacts, Device, int_dot_ceiling, with_build
from ggprof.machine.profiles import Profile, ProfileDB
from ggprof.machine.target import DeviceChoice, device_from_profile
from ggprof.model.reference import reference_path, split_ref
from ggprof.model.spec import ModelSpec, load_model
from ggprof.physics.expected import ALL, SpeedFits, build_codes, dominant_family
from ggprof.physics.roofline import PredictInputs, predict
from ggprof.pipelines.check import Checker, Reported
from ggprof.pipelines.extensions import Extensions
from ggprof.verdict.finding import RANK, Severity

BACKENDS = ("cpu", "cuda", "metal", "rocm", "sycl", "vulkan")
TEST = re.compile(r"^(pp|tg)(\d{1,6})(?:@d(\d{1,7}))?$")
BANDWIDTH_AGREEMENT = 0.05  # a row's published bandwidth vs its device profile's
MAX_DATASET_BYTES = 16 << 20
REQUIRED = ("source", "hardware", "device", "backend", "model", "model_ref", "test", "tok_s")


@dataclass(frozen=True, kw_only=True)
class ResultRow:
    line: int
    source: str
    hardware: str
    profile: Profile
    backend: str
    model: str
    model_ref: str
    kind: str  # "tg" (decode) or "pp" (prefill)
    n_tokens: int
    depth: int
    tok_s: float
    raw: dict[str, object] = field(repr=False, compare=False)

    @property
    def build(self) -> BuildFacts:
        """The build the row names: its number, date, Vulkan banner and rocBLAS setting, where
        the source gives them."""
        given = self.raw.get("build_facts")
        facts: dict[str, object] = given if isinstance(given, dict) else {}
        number, date = self.raw.get("build_number"), self.raw.get("build_date")
        return BuildFacts(
            number=number if isinstance(number, int) else None,
            date=str(date) if date else None,
            matrix_cores=str(facts["matrix_cores"]) if facts.get("matrix_cores") else None,
            int_dot=bool(facts["int_dot"]) if facts.get("int_dot") in (0, 1) else None,
            vulkan_driver=str(facts["vulkan_driver"]) if facts.get("vulkan_driver") else None,
            rocblas_use_hipblaslt=str(facts["rocblas_use_hipblaslt"]) if facts.get("rocblas_use_hipblaslt") else None,
            sycl_f16=bool(facts["sycl_f16"]) if facts.get("sycl_f16") in (0, 1) else None,
            sycl_reorder=bool(facts["sycl_reorder"]) if facts.get("sycl_reorder") in (0, 1) else None,
            flash_attn=bool(fa) if (fa := self.raw.get("flash_attn")) in (0, 1) else None,
        )

    @property
    def label(self) -> str:
        return f"line {self.line}: {self.hardware} {self.backend} {self.model_ref} {self.raw['test']}"


def load_dataset(path: Path, profiles: ProfileDB) -> list[ResultRow]:
    """Every row, validated; BadInputError naming the first bad row (its line and why)."""
    rows = []
    for i, line in enumerate(read_text(path, MAX_DATASET_BYTES, BadInputError).splitlines(), start=1):
        if line.strip():
            rows.append(parse_row(i, line, profiles))
    if not rows:
        raise BadInputError(f"{path}: no rows")
    return rows


def parse_row(line_no: int, line: str, profiles: ProfileDB) -> ResultRow:
    def bad(why: str) -> BadInputError:
        return BadInputError(f"dataset line {line_no}: {why}")

    try:
        r = json.loads(line)
    except ValueError as e:
        raise bad(f"not JSON ({e})") from None
    if not isinstance(r, dict):
        raise bad("not a JSON object")
    for key in REQUIRED:
        if r.get(key) in (None, ""):
            raise bad(f"no {key!r}: every row says where it was published and what ran")
    source = str(r["source"])
    if not (source.startswith("https://") or source.startswith("docs/")):
        raise bad(f"source {source[:80]!r} is neither a public URL nor a measurement kept in docs/")
    device = str(r["device"])
    if device not in profiles:
        raise bad(f"unknown device {device[:60]!r}: add its profile (with sourced figures) first")
    profile = profiles.get(device)
    backend = str(r["backend"])
    if backend not in BACKENDS or backend not in profile.backends:
        raise bad(f"backend {backend[:20]!r} is not one of {device}'s ({', '.join(profile.backends)})")
    try:
        split_ref(str(r["model_ref"]))
    except BadInputError as e:
        raise bad(str(e)) from None
    m = TEST.match(str(r["test"]))
    if not m:
        raise bad(f"test {str(r['test'])[:20]!r} is not llama-bench's ppN, tgN or ppN@dD")
    tok_s = r["tok_s"]
    if isinstance(tok_s, bool) or not isinstance(tok_s, (int, float)) or not 0 < tok_s < 1e7:
        raise bad(f"tok_s {tok_s!r} is not a positive number")
    published = r.get("bandwidth_gbs")
    if published is not None:
        if not isinstance(published, (int, float)) or published <= 0:
            raise bad(f"bandwidth_gbs {published!r} is not a positive number")
        if abs(published / profile.memory_bandwidth_gbs - 1) > BANDWIDTH_AGREEMENT:
            raise bad(
                f"bandwidth {published} GB/s disagrees with profile {device} ({profile.memory_bandwidth_gbs} GB/s)"
            )
    return ResultRow(
        line=line_no,
        source=source,
        hardware=str(r["hardware"]),
        profile=profile,
        backend=backend,
        model=str(r["model"]),
        model_ref=str(r["model_ref"]),
        kind=m.group(1),
        n_tokens=int(m.group(2)),
        depth=int(m.group(3) or 0),
        tok_s=float(tok_s),
        raw=r,
    )


class References:
    """The reference models' headers, written once into a folder and read once each."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._specs: dict[str, ModelSpec] = {}

    def spec(self, ref: str) -> ModelSpec:
        if ref not in self._specs:
            self._specs[ref] = load_model(reference_path(ref, self.folder))
        return self._specs[ref]


def row_device(row: ResultRow) -> Device:
    """The row's device as its result saw it: its profile on the row's backend, with the
    row's build (a build without matrix cores has its vector units' ceiling)."""
    return with_build(replace(device_from_profile(row.profile), backend=row.backend), row.build)


def ceiling_unknown(row: ResultRow, spec: ModelSpec) -> str | None:
    """Why the row's compute ceiling is not known (None: it is): its build's matrix-core use is
    not (no banner, a build after the kernels; a chip without matrix units has none to use), or,
    without them, its use of the chip's int8 dot-product units on the model's weights is not."""
    chip = device_from_profile(row.profile)
    if row.build.uses_matrix_cores(row.backend) is None and chip.matrix_units_faster:
        return "matrix cores unknown"
    dot = int_dot_ceiling(row_device(row), dominant_family(spec))
    return "int8 dot products unknown" if dot is not None and dot[1] is None else None


def ceiling_known(row: ResultRow, spec: ModelSpec) -> bool:
    return ceiling_unknown(row, spec) is None


def prefill_ceiling_tok_s(spec: ModelSpec, row: ResultRow) -> float | None:
    p = predict(spec, row_device(row), PredictInputs(prompt=row.n_tokens, depth=row.depth, gen=1), None, None)
    return p.prefill_ceiling_tok_s


@dataclass(frozen=True, kw_only=True)
class Points:
    """The dataset's depth-0 rows as fitting points, by backend (built once: each needs the
    model's header and, for prefill, a prediction)."""

    decode: dict[str, list[Point]]
    prefill: dict[str, list[Point]]

    def without(self, device: str) -> Points:
        """The points of every device but `device` (leave one device out)."""
        return Points(
            decode={b: [p for p in pts if p.device != device] for b, pts in self.decode.items()},
            prefill={b: [p for p in pts if p.device != device] for b, pts in self.prefill.items()},
        )


def points_of(rows: list[ResultRow], refs: References) -> Points:
    decode: dict[str, list[Point]] = {}
    prefill: dict[str, list[Point]] = {}
    for row in rows:
        if row.depth:
            continue
        spec = refs.spec(row.model_ref)
        known = Point(
            group=ALL,
            ideal_s=0.0,
            units=1.0,
            measured_s=1.0 / row.tok_s,
            device=row.profile.id,
            architecture=row.profile.architecture,
            device_class=row.profile.device_class,
            codes=build_codes(row.build),
            label=row.label,
        )
        if row.kind == "tg":
            decode.setdefault(row.backend, []).append(
                replace(
                    known,
                    group=dominant_family(spec),
                    ideal_s=spec.decode_bytes_per_token / row.profile.bandwidth_bytes_per_s,
                    units=spec.n_layers,
                    gb=spec.decode_bytes_per_token / 1e9,
                )
            )
        elif ceiling := prefill_ceiling_tok_s(spec, row):
            prefill.setdefault(row.backend, []).append(
                replace(known, ideal_s=1.0 / ceiling, ceiling_known=ceiling_known(row, spec))
            )
    return Points(decode=decode, prefill=prefill)


def regress_all(rows: list[ResultRow], refs: References, dataset: str) -> SpeedFits:
    """One decode and one prefill fit per backend with rows (depth-0 rows only)."""
    return regress_points(points_of(rows, refs), dataset)


def regress_points(points: Points, dataset: str) -> SpeedFits:
    """Each backend's fit (decode by weight family, prefill with one factor for all devices)
    and, on top, the levels of what is known of the device, fitted on the results each fit kept
    (prefill: those whose compute ceiling is known; a result that may or may not have used the
    matrix units would mix two ceilings into one device's effect)."""
    decode, kept_decode = regress_backends("decode", points.decode)
    prefill, kept_prefill = regress_backends("prefill", points.prefill)
    levels = {}
    for kind, fits, kept in (("decode", decode, kept_decode), ("prefill", prefill, kept_prefill)):
        levels[kind] = {
            b: lv
            for b, fit in fits.items()
            if (
                lv := fit_levels(
                    b,
                    kind,
                    [observed(p, r) for p, r in zip(kept[b], residuals(fit, kept[b]), strict=True) if p.ceiling_known],
                )
            )
        }
    return SpeedFits(
        decode=decode,
        prefill=prefill,
        decode_levels=levels["decode"],
        prefill_levels=levels["prefill"],
        dataset=dataset,
    )


@dataclass(frozen=True, kw_only=True)
class RowVerdict:
    row: ResultRow
    slowdown: float
    severity: Severity
    low_tok_s: float | None
    high_tok_s: float | None
    codes: tuple[str, ...]
    level: str  # what the band rested on: device, architecture, generation, class, vendor, or the backend's fit
    causes: tuple[str, ...] = ()  # the causes its findings name


def judge_row(
    row: ResultRow,
    refs: References,
    ext: Extensions,
    slowdown: float = 1.0,
    use_profile: bool = True,
    use_build: bool = True,
) -> RowVerdict:
    """`ggprof check MODEL --tg X (or --pp X) --device ID --backend B`, the row's tok/s divided
    by `slowdown`, with the build the row names (as its llama-bench JSON or log would say;
    without `use_build`, none). Without `use_profile`: `--bandwidth <the profile's GB/s>` and
    `--flops <its peak>`, no device (so nothing known of it)."""
    spec = refs.spec(row.model_ref)
    if use_profile:
        choice = DeviceChoice(device_id=row.profile.id)
    else:
        peak = row.profile.peak_flops
        choice = DeviceChoice(
            bandwidth=Figure(row.profile.bandwidth_bytes_per_s, "user", "published"),
            flops=Figure(peak, "user", "published") if peak else None,
        )
    tok_s = row.tok_s / slowdown
    build = row.build
    reported = Reported(
        tg_tok_s=tok_s if row.kind == "tg" else None,
        pp_tok_s=tok_s if row.kind == "pp" else None,
        depth=row.depth,
        n_prompt=row.n_tokens if row.kind == "pp" else N_PROMPT,
        backend=row.backend,
        label=row.label,
        build=build if use_build and build else None,  # as llama-bench JSON or a log would give it
    )
    judged = Checker(spec, choice, ext).check(reported)
    code_prefix = "DECODE" if row.kind == "tg" else "PREFILL"
    mine = [f for f in judged.verdict.findings if f.code.startswith(code_prefix)]
    severity: Severity = max((f.severity for f in mine), key=lambda s: RANK[s], default="unknown")
    p = judged.prediction
    low = high = None
    if p is not None and row.kind == "tg" and p.expected is not None:
        low, high = p.expected.low_tok_s, p.expected.high_tok_s
    elif p is not None and row.kind == "pp" and p.prefill_band is not None and p.prefill_ceiling_tok_s:
        low, high = p.prefill_band.low * p.prefill_ceiling_tok_s, p.prefill_band.high * p.prefill_ceiling_tok_s
    fits = speed_fits()
    levels = (fits.decode_levels if row.kind == "tg" else fits.prefill_levels).get(row.backend)
    level = levels.level_of(device_from_profile(row.profile)) if levels and use_profile else None
    return RowVerdict(
        row=row,
        slowdown=slowdown,
        severity=severity,
        low_tok_s=low,
        high_tok_s=high,
        codes=tuple(f.code for f in mine),
        level=level or "backend fit",
        causes=tuple(c for f in mine for c in f.causes),
    )

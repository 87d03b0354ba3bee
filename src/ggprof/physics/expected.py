"""Expected speed fitted on published results: the model behind the decode and prefill bands.

Decode time per token is the bytes a token reads at the fraction of bandwidth the kernels of
the model's dominant weight type reach, plus costs that do not scale with the bandwidth
figure: one per layer (kernel launches, synchronisation, graph building, the host round
trip) and one per GB read (memory a device's nominal bandwidth does not deliver at batch 1):

    TPOT = bytes x read_factor[family] / bandwidth + n_layers x layer_s + GB x gb_s

read_factor = 1 / (achievable fraction of bandwidth). The per-layer term dominates when the
bandwidth ceiling is high (small models, fast devices), which is why a flat "x% of the
ceiling" band calls honest results on an H100 or an M2 Ultra suspicious. Prefill has the same
form per prompt token, on the compute ceiling:

    time per prompt token = read_factor / ceiling tok/s + token_s

What is known of the device moves both (`Levels`: its class, its architecture, the device
itself, and the build; llama.cpp's kernels differ by chip generation far more than by weight
type). A band is as wide as the fit's residuals on the published results (their 2nd to 98th
percentile) or, with the device known, as the errors of devices left out of the fit: never a
chosen number. Fitting is least squares on relative error; the fitted parameters are data
(`SpeedFits.load`), refitted by `benchmarks/calibrate.py`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ggprof.errors import BadInputError
from ggprof.figures import Figure
from ggprof.files import read_text
from ggprof.machine.device import (
    BUILD_AGE_FROM,
    OLD_BUILD_NUMBER,
    BuildFacts,
    Device,
    EfficiencyBand,
    int_dot_ceiling,
    unmatrixed_flops,
)
from ggprof.machine.profiles import generation_of
from ggprof.model.spec import ModelSpec

# Weight families: types read by the same kind of kernel (ggml's type names).
FAMILIES = {
    "F32": "f16",
    "F16": "f16",
    "BF16": "f16",
    "Q8_0": "q8_0",
    "Q8_1": "q8_0",
    "Q4_0": "q4_0",
    "Q4_1": "q4_0",
    "Q5_0": "q4_0",
    "Q5_1": "q4_0",
    "IQ4_NL": "q4_0",
    "MXFP4": "q4_0",
}
# How findings name the families (and the group of a backend fitted without architectures).
LABELS = {
    "f16": "F16/BF16",
    "q8_0": "Q8_0",
    "q4_0": "Q4/Q5 blocks",
    "k": "K-quants",
    "iq": "I-quants",
    "all": "all devices",
}
QUANTILES = (0.02, 0.98)  # the band: these percentiles of the fit's residuals (or of left-out errors)
MAX_FITS_BYTES = 1 << 20
# A least-squares fit is not bit-identical across CPUs, BLAS builds and numpy versions (the
# 13th-15th significant digits differ). Stored with 6 significant digits and compared to 1e-5
# (relative): one published row changed by 10% moves the fitted factors by 1e-4 or more.
STORED_DIGITS = 6
FIT_TOLERANCE = 1e-5


def family(ggml_type: str) -> str:
    """The kernel family of a ggml type: f16, q8_0, q4_0 (the legacy blocks), k, iq."""
    if ggml_type in FAMILIES:
        return FAMILIES[ggml_type]
    if ggml_type.endswith("_K"):
        return "k"
    if ggml_type.startswith("IQ") or ggml_type.startswith("TQ"):
        return "iq"
    return "other"


def decode_bytes_by_family(spec: ModelSpec) -> dict[str, float]:
    """The weight bytes one decode step reads, by weight family (the rules of ModelSpec)."""
    out: dict[str, float] = {}
    for t in spec.tensors:
        if spec.is_lookup(t):
            continue  # one row of the input embedding: noise
        f = family(t.ggml_type.name)
        out[f] = out.get(f, 0.0) + float(t.n_bytes * spec.decode_share(t))
    return out


def dominant_family(spec: ModelSpec) -> str:
    by = decode_bytes_by_family(spec)
    return max(by, key=lambda f: by[f]) if by else "other"


# A result more than 4x away from the fit's median residual is left out of the fit and its spread
# (and named by benchmarks/calibrate.py). 4x is the slowdown a prefill band must catch (2.5x for
# decode): a row already that far below the others, kept in, would stretch the band over exactly
# the runs it exists to flag. Such rows are old builds or misconfigured runs (docs/calibration.md).
OUTLIER_FACTOR = 4.0
ALL = "all"  # the group of a device whose architecture has no fitted factor


@dataclass(frozen=True, kw_only=True)
class LinearFit:
    """time = sum_g read_factor_g x ideal_g + per_unit_s x units + per_gb_s x GB.

    For decode the groups are weight families, a unit is a layer, and per_gb_s is a cost per
    GB read whatever the bandwidth (seconds per token). For prefill there is one group (all
    devices) and the unit is the token itself. What is known of the device (its architecture,
    vendor, build) is the `Levels` on top."""

    backend: str
    kind: str  # "decode" or "prefill"
    read_factor: dict[str, float]
    per_unit_s: float
    per_gb_s: float = 0.0
    residual_low: float  # ln(measured / predicted) at the 2nd percentile
    residual_high: float  # ... at the 98th
    spread_source: str  # "own" or "the mean of the other backends' fits (n rows here)"
    n: int
    devices: int
    median_error: float  # median |measured / predicted - 1| on the fitted rows
    left_out: tuple[str, ...] = ()  # results left out of the fit and its spread (OUTLIER_FACTOR)

    def predicted_s(self, group: str | None, ideal_s: float, units: float, gb: float = 0.0) -> tuple[float, float]:
        """(fastest, slowest) predicted time; a group without a factor takes the range of the
        fitted ones."""
        lo, hi = _factor(self.read_factor, group)
        base = units * self.per_unit_s + gb * self.per_gb_s
        return base + lo * ideal_s, base + hi * ideal_s

    def band(
        self,
        group: str | None,
        ideal_s: float,
        units: float,
        gb: float = 0.0,
        levels: tuple[float, float, float, str] | None = None,
    ) -> EfficiencyBand:
        """The band as fractions of the ideal (ceiling) speed, which EfficiencyBand holds:
        this fit's residual spread, or with `levels` (ln offset, ln low, ln high, why) the
        offset and spread of what is known of the device."""
        fast, slow = self.predicted_s(group, ideal_s, units, gb)
        offset, low_ln, high_ln, why = levels or (0.0, self.residual_low, self.residual_high, "")
        high = min(ideal_s / fast * math.exp(offset + high_ln), 1.0)
        low = min(ideal_s / slow * math.exp(offset + low_ln), high)
        missing = group is not None and group not in self.read_factor and len(self.read_factor) > 1
        extra = f"; no published results for {group}: the range of the fitted ones" if missing else ""
        return EfficiencyBand(low=low, high=high, source=why + self.describe() + extra)

    def describe(self) -> str:
        factors = ", ".join(f"{LABELS.get(g, g)} {1 / a:.0%}" for g, a in sorted(self.read_factor.items()))
        if self.kind == "decode":
            model = f"bandwidth reached {factors}"
            costs = [f"{self.per_unit_s * 1e6:.0f} us per layer"] if self.per_unit_s else []
            costs += [f"{self.per_gb_s * 1e3:.2f} ms per GB"] if self.per_gb_s else []
            model += f", plus {' and '.join(costs)}" if costs else ""
        else:
            model = f"compute ceiling reached {factors}"
            model += f", plus {self.per_unit_s * 1e6:.1f} us per token" if self.per_unit_s else ""
        spread = f"{math.exp(self.residual_low) - 1:+.0%}/{math.exp(self.residual_high) - 1:+.0%}"
        src = "" if self.spread_source == "own" else f", taken from {self.spread_source}"
        out = f"; {len(self.left_out)} result(s) over {OUTLIER_FACTOR:g}x off left out" if self.left_out else ""
        return (
            f"fitted on {self.n} public {self.backend} {self.kind} results ({self.devices} devices): {model}; "
            f"residual spread {spread} (2nd-98th percentile{src}){out}"
        )


# What is known of a device, most specific first: the levels a band rests on (Levels).
LEVELS = ("device", "architecture", "generation", "class", "vendor")


def vendor_of_class(device_class: str | None) -> str | None:
    """The vendor of a device class (`amd integrated` -> `amd`): the level above the class,
    which pools a vendor's integrated, discrete and datacenter GPUs (one driver stack, one compiler)."""
    return device_class.split()[0] if device_class else None


# The build terms each test fits where the data has them (a code per result: build_codes):
# `old build` (before OLD_BUILD_*, machine.device) and, for prefill, `build age` (its years
# before BUILD_AGE_FROM, BuildFacts.age_years: llama.cpp's prompt kernels, its matrix-core and
# int8 paths, kept changing after the December 2024 rework, PRs #10597, #12135, #14001, #18749;
# on decode the same term made Vulkan's bands worse, docs/calibration.md). Whether a build used
# the matrix units is not a fitted term but the ceiling itself (Device.vector_flops,
# machine.device.with_build).
BUILD_TERMS = {"decode": ("old build",), "prefill": ("old build", "build age")}
# Matrix-core paths whose prompt speed did not age: the kernels for NVIDIA's
# VK_NV_cooperative_matrix2 (PR #10206, opened November 2024), written at NVIDIA. The same RTX
# 3090 ran Llama 3 8B Q4_0 at 4,279 tok/s on it in May 2025 (PR #13506) and Llama 2 7B Q4_0 at
# 4,666 on b9010 a year later, the same share of its ceiling, where `build age` would have it
# 0.7x then; an RTX 3070 of April 2025 (PR #12833) sits at that share too. A build on such a
# path counts no age (docs/calibration.md; the refit it came with is in git).
UNAGED_MATRIX_CORES = ("NV_coopmat2",)


def level_keys(device: str | None, architecture: str | None, device_class: str | None) -> dict[str, str | None]:
    """A device's key at each level (None where not known): its id, its profile's architecture
    and class, and what they imply (the generation, the vendor)."""
    return {
        "device": device,
        "architecture": architecture,
        "generation": generation_of(architecture),
        "class": device_class,
        "vendor": vendor_of_class(device_class),
    }


def level_offset(effects: dict[str, dict[str, float]], keys: dict[str, str | None]) -> tuple[str | None, float]:
    """(the most specific level whose effects know the device's key, the ln offset there: its
    effect and those of the levels above it); (None, 0) where no level knows it."""
    used = next((i for i, lv in enumerate(LEVELS) if keys.get(lv) in effects.get(lv, {})), None)
    if used is None:
        return None, 0.0
    return LEVELS[used], sum(effects.get(lv, {}).get(keys.get(lv) or "", 0.0) for lv in LEVELS[used:])


def build_codes(build: BuildFacts | None) -> dict[str, float]:
    """Each build term's code for a result: `old build` 1 (a build before OLD_BUILD_*) or 0;
    `build age` its years before BUILD_AGE_FROM (none on UNAGED_MATRIX_CORES). Not known is 0:
    a report without its build is taken as a current one."""
    if build is None:
        return {}
    codes = {"old build": 1.0} if build.old else {}
    age = build.age_years
    if age and build.matrix_cores not in UNAGED_MATRIX_CORES:
        codes["build age"] = round(age, 3)
    return codes


@dataclass(frozen=True, kw_only=True)
class Levels:
    """How far a device's results sit from its backend's fit, by what is known of it (ln of
    speed / the fit's): its vendor, its class within the vendor (integrated, discrete or datacenter), its
    chip generation (shared by a generation's integrated and discrete parts: Xe2's Arc 140V and
    B580), its architecture within the generation, the device itself within its architecture,
    each shrunk toward zero by `shrink_devices` devices' weight, so a level seen on few devices
    moves a prediction little beyond the levels above it; plus the build terms. `spread_low/high`: where a
    device new to the fit lands around its prediction (leave one device out, a t interval)."""

    backend: str
    kind: str
    effects: dict[str, dict[str, float]]  # level -> key -> ln(speed / the fit's), relative to the level above
    devices: dict[str, dict[str, int]]  # level -> key -> devices (results, for the device level) behind it
    terms: dict[str, float]  # build term -> ln(speed) per unit of its code
    spread_low: float  # a device new to the fit
    spread_high: float
    device_spread_low: float  # a device the fit holds (its other results known)
    device_spread_high: float
    shrink_devices: float
    n: int
    n_devices: int

    def keys(self, device: Device | None) -> dict[str, str | None]:
        if device is None:
            return {}
        return level_keys(device.profile_id, device.architecture, device.device_class)

    def level_of(self, device: Device | None) -> str | None:
        """The most specific level that knows the device (None: none does)."""
        return level_offset(self.effects, self.keys(device))[0]

    def offset(self, device: Device | None) -> tuple[float, float, float, str]:
        """(ln offset, ln low, ln high of the spread around it, which level and build terms
        it rests on, as a verdict says it)."""
        keys = self.keys(device)
        used, total = level_offset(self.effects, keys)
        if used is None:
            where = f"{self.backend} with no published results of its class or architecture: the backend's fit"
        else:
            key, n = keys[used] or "", self.devices[used][keys[used] or ""]
            what = {
                "device": f"{key} itself ({n} result{'s' if n != 1 else ''})",
                "architecture": f"the {key} architecture ({n} device{'s' if n != 1 else ''})",
                "generation": f"the {key} generation ({n} device{'s' if n != 1 else ''})",
                "class": f"{key} GPUs ({n} device{'s' if n != 1 else ''})",
                "vendor": f"{key} GPUs of any kind ({n} device{'s' if n != 1 else ''})",
            }[used]
            where = f"{self.backend} on {what}: x{math.exp(total):.2f} the fit's speed"
        build = device.build if device else None
        codes = build_codes(build)
        for term, value in sorted(self.terms.items()):
            if codes.get(term):
                total += value * codes[term]
                years = f" {codes[term]:.1f} years" if term == "build age" else ""
                where += f", {term}{years} x{math.exp(value * codes[term]):.2f}"
        if "build age" in self.terms and build and build.matrix_cores in UNAGED_MATRIX_CORES and build.age_years:
            where += f", no build age on {build.matrix_cores} (its prompt speed held from 2025 on)"
        if self.terms and (build is None or (build.known_number is None and build.date is None)):
            given = build.number if build is not None else None
            why = f"build {given} has no git history" if given is not None else "the build not given"
            newest = BUILD_AGE_FROM if "build age" in self.terms else OLD_BUILD_NUMBER
            where += f" ({why}: taken as b{newest} or later)"
        low, high = self.spread(used)
        spread = f"{math.exp(low) - 1:+.0%}/{math.exp(high) - 1:+.0%}"
        who = "a result of a device the fit holds" if used == "device" else "a device new to the fit"
        return (
            total,
            low,
            high,
            (
                f"{where}; {who} lands {spread} from its prediction ({QUANTILES[0]:.0%}-{QUANTILES[1]:.0%} "
                f"t interval, leaving {'one result' if used == 'device' else 'one device'} out over "
                f"{self.n_devices} devices, levels shrunk by {self.shrink_devices:g} devices); "
            ),
        )

    def spread(self, level: str | None) -> tuple[float, float]:
        """(ln low, ln high) of the band at `level`."""
        if level == "device":
            return self.device_spread_low, self.device_spread_high
        return self.spread_low, self.spread_high


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.{STORED_DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def _differences(a: Any, b: Any, rel: float, path: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}" for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += _differences(a[k], b[k], rel, f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, rel, f"{path}/{i}")]
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return [] if math.isclose(a, b, rel_tol=rel, abs_tol=1e-12) else [f"{path}: {a!r} vs {b!r}"]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def _factor(table: dict[str, float], key: str | None) -> tuple[float, float]:
    if key is not None and key in table:
        return table[key], table[key]
    known = list(table.values()) or [1.0]
    return min(known), max(known)


def _fit(v: dict[str, Any]) -> LinearFit:
    return LinearFit(**{**v, "left_out": tuple(v.get("left_out", ()))})


@dataclass(frozen=True, kw_only=True)
class SpeedFits:
    decode: dict[str, LinearFit] = field(default_factory=dict)  # by weight family
    prefill: dict[str, LinearFit] = field(default_factory=dict)  # one factor for all devices
    decode_levels: dict[str, Levels] = field(default_factory=dict)  # what is known of the device, on top
    prefill_levels: dict[str, Levels] = field(default_factory=dict)
    dataset: str = ""

    def to_json(self) -> str:
        """Rounded to STORED_DIGITS significant digits: the digits a fit on a few hundred
        published results means, and the same file whatever CPU, BLAS or numpy refitted it."""
        return json.dumps(_rounded(asdict(self)), indent=1, sort_keys=True) + "\n"

    def differences(self, other: SpeedFits, rel: float = FIT_TOLERANCE) -> list[str]:
        """Where two fits disagree (a key path each): numbers beyond `rel`, anything else
        exactly. A refit on another machine agrees; a refit after one changed row does not."""
        return _differences(json.loads(self.to_json()), json.loads(other.to_json()), rel, "")

    @classmethod
    def load(cls, path: Path) -> SpeedFits:
        try:
            data = json.loads(read_text(path, MAX_FITS_BYTES, BadInputError))
            return cls(
                decode={k: _fit(v) for k, v in data.get("decode", {}).items()},
                prefill={k: _fit(v) for k, v in data.get("prefill", {}).items()},
                decode_levels={k: Levels(**v) for k, v in data.get("decode_levels", {}).items()},
                prefill_levels={k: Levels(**v) for k, v in data.get("prefill_levels", {}).items()},
                dataset=str(data.get("dataset", "")),
            )
        except (ValueError, TypeError, AttributeError) as e:
            raise BadInputError(f"{path}: not a speed-fits file ({e})") from None

    def decode_band(
        self, backend: str, spec: ModelSpec, bandwidth_bytes_per_s: float, device: Device | None = None
    ) -> EfficiencyBand | None:
        """The weight family's fit, moved and narrowed by what is known of the device (its
        levels and build terms); without a device (a bandwidth given by hand) the fit alone."""
        fit = self.decode.get(backend)
        if fit is None:
            return None
        nbytes = spec.decode_bytes_per_token
        levels = self._levels(self.decode_levels.get(backend), device)
        return fit.band(dominant_family(spec), nbytes / bandwidth_bytes_per_s, spec.n_layers, nbytes / 1e9, levels)

    def prefill_band(
        self, backend: str, spec: ModelSpec, peak_flops: float, device: Device | None = None
    ) -> EfficiencyBand | None:
        """As decode_band, on the compute ceiling (the int8 dot-product units' where the build
        may have run the model's weights on them: machine.device.int_dot_ceiling)."""
        fit = self.prefill.get(backend)
        if fit is None:
            return None
        family = dominant_family(spec)
        dot = int_dot_ceiling(device, family) if device is not None else None
        ceiling = dot[0].value if dot else peak_flops
        ideal = 2.0 * spec.active_params / ceiling  # seconds per prompt token at the peak
        band = fit.band(ALL, ideal, 1.0, levels=self._levels(self.prefill_levels.get(backend), device))
        if dot is not None:
            return band if dot[1] else _int_dot_unknown(band, family, peak_flops, dot[0])
        return _matrix_cores_unknown(band, backend, peak_flops, device)

    @staticmethod
    def _levels(levels: Levels | None, device: Device | None) -> tuple[float, float, float, str] | None:
        if levels is None or device is None or device.device_class is None:
            return None  # a device given by its figures alone: nothing known beyond the backend
        return levels.offset(device)


def _int_dot_unknown(band: EfficiencyBand, family: str, peak_flops: float, dot: Figure) -> EfficiencyBand:
    """Where the build may or may not have run the weights on the chip's int8 dot-product units
    (a Vulkan result without its banner's `int dot` or its build number), the band, on their
    ceiling, reaches down to the ceiling a build without them has, and says why."""
    why = (
        f"int8 dot products not known (llama.cpp's Vulkan int-dot kernels for {family} weights: the "
        "banner's `int dot` and the build number not both given)"
    )
    return _reaching_down(band, peak_flops, dot.value, why, "--int-dot and --build, or the log's banner")


def _matrix_cores_unknown(
    band: EfficiencyBand, backend: str, peak_flops: float, device: Device | None
) -> EfficiencyBand:
    """Where the build may or may not have used the chip's matrix units (a Vulkan result
    without its banner, a SYCL one without its GGML_SYCL_F16, on a chip that has them), the
    band reaches down to the vector units' ceiling too, and says why."""
    if device is None or device.vector_flops is None or not device.matrix_units_faster:
        return band
    if (device.build or BuildFacts()).uses_matrix_cores(backend) is not None:
        return band
    if backend == "sycl":
        why = "GGML_SYCL_F16 not known (a SYCL build multiplies quantized weights on the XMX units only with it)"
        narrow = "--sycl-f16 or the log's `GGML_SYCL_F16` line"
    else:
        why = f"matrix cores not known ({backend}'s device banner not given)"
        narrow = "--matrix-cores or the log's banner"
    lower = unmatrixed_flops(device) or device.vector_flops
    return _reaching_down(band, lower.value, peak_flops, why, narrow)


def _reaching_down(
    band: EfficiencyBand, lower_flops: float, ceiling_flops: float, why: str, narrow: str
) -> EfficiencyBand:
    """The band on `ceiling_flops`, reaching down to what a build on the slower units
    (`lower_flops`) reaches, and saying why and how to narrow it."""
    ratio = lower_flops / ceiling_flops
    return EfficiencyBand(
        low=band.low * ratio,
        high=band.high,
        source=(
            f"{why}: a build without them reaches {lower_flops / 1e12:.1f} of the {ceiling_flops / 1e12:.1f} "
            f"TFLOPS, so the band reaches x{ratio:.2f} lower (pass {narrow} to narrow it); {band.source}"
        ),
    )

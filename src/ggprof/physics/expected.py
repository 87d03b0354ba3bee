"""Expected speed fitted on published results: the model behind the decode and prefill bands.

Decode time per token is the bytes a token reads at the fraction of bandwidth the kernels of
the model's dominant weight type reach, plus costs that do not scale with the bandwidth
figure: one per layer (kernel launches, synchronisation, graph building, the host round
trip) and one per GB read (memory a device's nominal bandwidth does not deliver at batch 1):

    TPOT = bytes x read_factor[family] x arch_factor[architecture] / bandwidth
           + n_layers x layer_s + GB x gb_s

read_factor = 1 / (achievable fraction of bandwidth); arch_factor is used only when the
device (so its chip generation) is known. The per-layer term dominates when the bandwidth
ceiling is high (small models, fast devices), which is why a flat "x% of the ceiling" band
calls honest results on an H100 or an M2 Ultra suspicious. Prefill has the same form per
prompt token, on the compute ceiling:

    time per prompt token = read_factor[architecture] / ceiling tok/s + token_s

(llama.cpp's matrix kernels differ by chip generation far more than by weight type). Both
bands are as wide as the fit's residuals on the published results (their 2nd to 98th
percentile), never a chosen number. Fitting is least squares on relative error; the fitted
parameters are data (`SpeedFits.load`), refitted by `benchmarks/calibrate.py`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ggprof.errors import BadInputError
from ggprof.files import read_text
from ggprof.machine.device import EfficiencyBand
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
QUANTILES = (0.02, 0.98)  # the band: these residual percentiles of the fit
MAX_FITS_BYTES = 1 << 20
# A least-squares fit is not bit-identical across CPUs, BLAS builds and numpy versions (the
# 13th-15th significant digits differ). Stored with 6 significant digits and compared to 1e-5
# (relative): one published row changed by 10% moves the fitted factors by 1e-4 or more.
STORED_DIGITS = 6
FIT_TOLERANCE = 1e-5


# The vendor of each chip generation (profiles' `architecture`). A device whose own generation
# has no published result for a backend is judged by its vendor's: the same drivers, compilers
# and kernel paths, the next-closest evidence (Intel's Vulkan driver is not NVIDIA's).
VENDOR_PREFIXES = (
    ("apple-", "apple"),
    ("xe", "intel"),
    ("rdna", "amd"),
    ("gcn", "amd"),
    ("cdna", "amd"),
    ("pascal", "nvidia"),
    ("volta", "nvidia"),
    ("turing", "nvidia"),
    ("ampere", "nvidia"),
    ("ada", "nvidia"),
    ("hopper", "nvidia"),
    ("blackwell", "nvidia"),
)


def vendor_of(architecture: str | None) -> str | None:
    """apple, intel, amd or nvidia for a known chip generation, else None."""
    if architecture is None:
        return None
    return next((v for prefix, v in VENDOR_PREFIXES if architecture.startswith(prefix)), None)


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
    """time = sum_g read_factor_g x arch_factor x ideal_g + per_unit_s x units + per_gb_s x GB.

    For decode the groups are weight families, a unit is a layer, and per_gb_s is a cost per
    GB read whatever the bandwidth (seconds per token); arch_factor, when fitted, says how
    far each chip generation's kernels stay from the others. For prefill the groups are
    architectures and the unit is the token itself."""

    backend: str
    kind: str  # "decode" or "prefill"
    read_factor: dict[str, float]
    per_unit_s: float
    per_gb_s: float = 0.0
    arch_factor: dict[str, float] = field(default_factory=dict)  # empty: not by architecture
    residual_low: float  # ln(measured / predicted) at the 2nd percentile
    residual_high: float  # ... at the 98th
    spread_source: str  # "own" or "the mean of the other backends' fits (n rows here)"
    n: int
    devices: int
    median_error: float  # median |measured / predicted - 1| on the fitted rows
    left_out: tuple[str, ...] = ()  # results left out of the fit and its spread (OUTLIER_FACTOR)
    # devices behind each architecture (or vendor) factor: decode's arch_factor, prefill's groups
    level_devices: dict[str, int] = field(default_factory=dict)

    def predicted_s(
        self, group: str | None, ideal_s: float, units: float, gb: float = 0.0, arch: str | None = None
    ) -> tuple[float, float]:
        """(fastest, slowest) predicted time; a group (or an architecture) without a factor
        takes the range of the fitted ones."""
        lo, hi = _factor(self.read_factor, group)
        alo, ahi = _factor(self.arch_factor, arch) if self.arch_factor else (1.0, 1.0)
        base = units * self.per_unit_s + gb * self.per_gb_s
        return base + lo * alo * ideal_s, base + hi * ahi * ideal_s

    def band(
        self, group: str | None, ideal_s: float, units: float, gb: float = 0.0, arch: str | None = None
    ) -> EfficiencyBand:
        """The band as fractions of the ideal (ceiling) speed, which EfficiencyBand holds."""
        fast, slow = self.predicted_s(group, ideal_s, units, gb, arch)
        high = min(ideal_s / fast * math.exp(self.residual_high), 1.0)
        low = min(ideal_s / slow * math.exp(self.residual_low), high)
        missing = [x for x, table in ((group, self.read_factor), (arch, self.arch_factor)) if table and x not in table]
        extra = (
            f"; no published results for {'/'.join(m or '?' for m in missing)}: the range of the fitted ones"
            if missing
            else ""
        )
        return EfficiencyBand(
            low=low, high=high, source=self.level(arch if self.kind == "decode" else group) + self.describe() + extra
        )

    def level(self, key: str | None) -> str:
        """Which level of what is known of the device the band rests on, and on how many
        devices of it: `vulkan on the nvidia vendor (5 devices): ` (empty: the backend's)."""
        n = self.level_devices.get(key or "")
        if not key or key == ALL or not n:
            return ""
        kind = "vendor" if key in {v for _, v in VENDOR_PREFIXES} else "architecture"
        return f"{self.backend} on the {key} {kind} ({n} device{'s' if n != 1 else ''}): "

    def describe(self) -> str:
        factors = ", ".join(f"{LABELS.get(g, g)} {1 / a:.0%}" for g, a in sorted(self.read_factor.items()))
        if self.kind == "decode":
            model = f"bandwidth reached {factors}"
            if self.arch_factor:
                archs = ", ".join(f"{a} x{1 / f:.2f}" for a, f in sorted(self.arch_factor.items()))
                by = "vendor" if set(self.arch_factor) <= {v for _, v in VENDOR_PREFIXES} | {ALL} else "architecture"
                model += f" (by {by}: {archs})"
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
    decode: dict[str, LinearFit] = field(default_factory=dict)  # by weight family only
    decode_arch: dict[str, LinearFit] = field(default_factory=dict)  # ... and by the device's architecture
    decode_vendor: dict[str, LinearFit] = field(default_factory=dict)  # ... and by its vendor
    prefill: dict[str, LinearFit] = field(default_factory=dict)  # by the device's architecture
    prefill_vendor: dict[str, LinearFit] = field(default_factory=dict)  # by its vendor
    prefill_any: dict[str, LinearFit] = field(default_factory=dict)  # one factor: architecture unknown
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
                decode_arch={k: _fit(v) for k, v in data.get("decode_arch", {}).items()},
                decode_vendor={k: _fit(v) for k, v in data.get("decode_vendor", {}).items()},
                prefill={k: _fit(v) for k, v in data.get("prefill", {}).items()},
                prefill_vendor={k: _fit(v) for k, v in data.get("prefill_vendor", {}).items()},
                prefill_any={k: _fit(v) for k, v in data.get("prefill_any", {}).items()},
                dataset=str(data.get("dataset", "")),
            )
        except (ValueError, TypeError, AttributeError) as e:
            raise BadInputError(f"{path}: not a speed-fits file ({e})") from None

    def decode_band(
        self, backend: str, spec: ModelSpec, bandwidth_bytes_per_s: float, architecture: str | None = None
    ) -> EfficiencyBand | None:
        """The device's architecture narrows the band where the data has it, else its vendor's;
        without either (a bandwidth given by hand) the weight family alone decides."""
        fit, key = self.decode.get(backend), architecture
        by_arch, by_vendor, vendor = (
            self.decode_arch.get(backend),
            self.decode_vendor.get(backend),
            vendor_of(architecture),
        )
        if by_arch is not None and architecture in by_arch.arch_factor:
            fit = by_arch
        elif by_vendor is not None and vendor in by_vendor.arch_factor:
            fit, key = by_vendor, vendor
        if fit is None:
            return None
        nbytes = spec.decode_bytes_per_token
        return fit.band(dominant_family(spec), nbytes / bandwidth_bytes_per_s, spec.n_layers, nbytes / 1e9, key)

    def prefill_band(
        self, backend: str, spec: ModelSpec, peak_flops: float, architecture: str | None
    ) -> EfficiencyBand | None:
        """By the device's architecture where the data has it, else by its vendor; without
        either (FLOP/s given by hand) the fit with one factor for all."""
        group: str | None = architecture
        fit = self.prefill.get(backend)
        if fit is None or architecture not in fit.read_factor:
            group, fit = vendor_of(architecture), self.prefill_vendor.get(backend)
            if fit is None or group not in fit.read_factor:
                fit = self.prefill_any.get(backend, self.prefill.get(backend))
        if fit is None:
            return None
        ideal = 2.0 * spec.active_params / peak_flops  # seconds per prompt token at the peak
        return fit.band(group if group in fit.read_factor else ALL, ideal, 1.0)

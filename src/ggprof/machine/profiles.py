"""Hardware profiles: one TOML file per device with published figures and their sources.

Built-in profiles ship in the package (profiles/ in the repository); users add their own
in `<user config dir>/profiles` (GGPROF_CONFIG_DIR overrides the config dir); the CLI adds
the folders plugins name through the `profile_dirs` hook.
"""

from __future__ import annotations

import difflib
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import regex

from ggprof.errors import BadInputError, ProfileError
from ggprof.figures import Figure
from ggprof.files import read_text
from ggprof.paths import config_dir
from ggprof.units import clean, clean_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

KINDS = ("cpu-memory", "gpu", "soc")
# The vendor of each chip generation (profiles' `architecture`): the same drivers, compilers and
# kernel paths, the evidence next after the generation itself (Intel's Vulkan driver is not NVIDIA's).
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
# The chip generation of each architecture that shares one with others (profiles' `architecture`
# names the generation and its variant): one generation's shader cores and compiler target across
# its integrated and discrete parts or its consumer and datacenter chips (Xe2: the Arc 140V of
# Lunar Lake and the B580 of Battlemage; RDNA 3: the RX 7900 cards and RDNA 3.5's Strix Halo).
# Every other architecture is a generation of its own. The speed fits' level above the architecture.
GENERATIONS = {
    "xe-lp": "xe",
    "xe-hpg": "xe",
    "xe2-lpg": "xe2",
    "xe2-hpg": "xe2",
    "rdna3.5": "rdna3",
    "gcn5.1": "gcn5",
    "ampere-datacenter": "ampere",
    "blackwell-datacenter": "blackwell",
}
MAX_PROFILE_BYTES = 1 << 20
MAX_PATTERN_CHARS = 200
MAX_DEVICE_NAME_CHARS = 256
MATCH_TIMEOUT_S = 0.05
# Upper bounds of a profile's figures: far above any device, below what breaks arithmetic.
LIMITS = {
    "memory_bandwidth_gbs": 1e5,  # 100 TB/s
    "memory_gb": 1e6,
    "peak_fp16_tflops": 1e5,
    "peak_fp32_tflops": 1e5,
    "peak_int8_tops": 1e5,
    "gpu_cores": 1e6,
    "host_link_gbs": 1e4,
}
_ID = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


VECTOR_FP16_PER_FP32 = 2.0  # packed FP16 (two halves per FP32 lane) on the vector units
# Chip generations whose int8 dot-product instructions (four int8 products summed per lane per
# clock) outpace their packed-FP16 vector rate: int8 ops per FP32 FLOP. AMD RDNA 2's
# V_DOT4_I32_I8 runs at four times the FP32 rate (the Xbox Series X's RDNA 2 GPU: 12.15 TFLOPS
# FP32, 49 TOPS INT8; Microsoft at Hot Chips 32, 2020) and so does Intel Xe's DP4A (Intel
# Architecture Day 2020, Xe-LP: DP4A for 4x the int8 throughput; kept in Xe-HPG and Xe2). Not
# listed: RDNA 3 and later (a dot4 rate no faster than their packed FP16), RDNA 1's Navi 10 (no
# dot4: its banner says `int dot: 0`), Apple (none), NVIDIA (tensor cores from Turing on;
# Pascal's DP4A is its profiles' peak_int8_tops). What llama.cpp runs on them:
# ggprof.machine.device.BuildFacts.vulkan_int_dot.
# AMD's Vega 20 (GCN 5.1: the Instinct MI50 and MI60, Radeon VII) has the same instruction at the
# same rate (the MI50 datasheet: 13.3 TFLOPS FP32, 53.6 TOPS INT8); Vega 10 (GCN 5) has none.
INT8_DOT_PER_FP32 = {"rdna2": 4.0, "gcn5.1": 4.0, "xe-lp": 4.0, "xe-hpg": 4.0, "xe2-lpg": 4.0, "xe2-hpg": 4.0}


@dataclass(frozen=True, kw_only=True)
class Profile:
    id: str
    name: str
    kind: str
    backends: tuple[str, ...]
    memory_bandwidth_gbs: float
    source: str
    memory_gb: float | None = None
    peak_fp16_tflops: float | None = None
    peak_fp32_tflops: float | None = None
    peak_int8_tops: float | None = None  # int8 dot products where no fp16 matrix unit exists (Pascal's DP4A)
    gpu_cores: int | None = None
    match: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # other ids `--device` accepts (apple-m2-ultra-76c for apple-m2-ultra)
    architecture: str | None = None  # the chip generation (ampere, rdna3, apple-m2): kernels differ by it
    # a GPU sharing the host's memory (an iGPU, an SoC); default: kind "soc"
    integrated: bool | None = None
    # a datacenter compute GPU of the HBM line (Tesla P100 and V100, A100, A30, H100, H200, B200,
    # AMD Instinct): peaks built for training batches, which llama.cpp's kernels reach a smaller
    # share of than a graphics card's (the speed fits group them apart: docs/calibration.md)
    datacenter: bool = False
    # the GPU's link to the host (PCIe: lanes x a lane's rate, one direction), GB/s: what weights
    # kept in RAM cross when the GPU computes with them (a prompt's batches, spill)
    host_link_gbs: float | None = None
    sources: dict[str, str] = field(default_factory=dict)
    notes: str | None = None
    path: Path | None = None

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gbs * 1e9

    @property
    def memory_bytes(self) -> int | None:
        """Its memory in bytes: a GPU's is binary (a "24 GB" RTX 3090 holds 24,576 MiB: nvidia-smi,
        rocm-smi), the marketed "GB" a GiB; a memory kit's or an SoC's as written."""
        if not self.memory_gb:
            return None
        return int(self.memory_gb * (1 << 30 if self.kind == "gpu" else 1e9))

    @property
    def vendor(self) -> str | None:
        return vendor_of(self.architecture)

    @property
    def device_class(self) -> str | None:
        """What the speed fits know of a device beyond its architecture: `nvidia discrete`,
        `amd integrated`, `nvidia datacenter` (None: no known vendor)."""
        if not self.vendor:
            return None
        if self.datacenter:
            return f"{self.vendor} datacenter"
        integrated = self.kind == "soc" if self.integrated is None else self.integrated
        return f"{self.vendor} {'integrated' if integrated else 'discrete'}"

    @property
    def peak_flops(self) -> float | None:
        """The highest published dense peak llama.cpp's kernels can use (fp16 tensor cores where
        known, int8 dot products on chips without them), FLOP/s."""
        peaks = [p for p in (self.peak_fp16_tflops, self.peak_fp32_tflops, self.peak_int8_tops) if p]
        return max(peaks) * 1e12 if peaks else None

    @property
    def vector_flops(self) -> float | None:
        """The most its vector (shader) units reach without matrix units, FLOP/s: packed FP16 at
        twice the FP32 rate (AMD RDNA, Intel Xe; NVIDIA's non-tensor FP16 is at most that),
        never above peak_flops. None without an FP32 figure."""
        peak = self.peak_flops
        if not self.peak_fp32_tflops or peak is None:
            return None
        return min(peak, VECTOR_FP16_PER_FP32 * self.peak_fp32_tflops * 1e12)

    @property
    def int_dot_ops(self) -> float | None:
        """Its int8 dot-product units' rate where they outpace its vector units (INT8_DOT_PER_FP32),
        int8 ops/s; None elsewhere."""
        ratio = INT8_DOT_PER_FP32.get(self.architecture or "")
        vector = self.vector_flops
        if ratio is None or not self.peak_fp32_tflops or vector is None:
            return None
        ops = ratio * self.peak_fp32_tflops * 1e12
        return ops if ops > vector else None

    def flops_figures(self) -> tuple[Figure | None, Figure | None, Figure | None]:
        """(peak_flops, vector_flops, int_dot_ops) as figures sourced to this profile (None where
        unknown)."""
        peak, vector, dot = self.peak_flops, self.vector_flops, self.int_dot_ops
        return (
            Figure(peak, "profile", self.id) if peak else None,
            Figure(vector, "profile", f"{self.id}, its vector units") if vector else None,
            Figure(dot, "profile", f"{self.id}, its int8 dot-product units") if dot else None,
        )

    def matches(self, device_name: str) -> int:
        """The length of the longest `match` pattern found in device_name (0: no match).

        Patterns come from user files: each search is bounded in time (a pattern with
        catastrophic backtracking is a ProfileError naming it, never a hang)."""
        best = 0
        name = device_name[:MAX_DEVICE_NAME_CHARS]
        for pattern in self.match:
            SEARCHES.spend(self.path or self.id)
            try:
                m = regex.search(pattern, name, regex.IGNORECASE, timeout=MATCH_TIMEOUT_S)
            except TimeoutError:
                where = clean_name(self.path or self.id)
                raise ProfileError(
                    f"{where}: field 'match': pattern {clean_name(pattern, 60)!r} takes too long on "
                    f"{clean_name(name, 60)!r} (catastrophic backtracking); simplify it"
                ) from None
            if m:
                best = max(best, len(m.group(0)) or 1)
        return best


class SearchBudget:
    """What matching device names against profiles' `match` patterns may take in one command, in
    all: MAX_PATTERN_SEARCHES searches (and compiles) and PATTERN_BUDGET_S seconds spent in them
    (each search also has its own MATCH_TIMEOUT_S). Thousands of quick patterns in a user profile
    end in one error naming the profiles, not a command that runs on. The CLI arms it for each
    command (`arm`); a program using ggprof as a library is not bounded by it."""

    def __init__(self) -> None:
        self.armed = False
        self.count, self.spent_s, self.since = 0, 0.0, 0.0

    def arm(self) -> None:
        self.armed, self.count, self.spent_s = True, 0, 0.0

    def disarm(self) -> None:
        self.armed, self.count, self.spent_s = False, 0, 0.0

    def spend(self, where: object) -> None:
        """Count one search (or compile) and the time since the last, when they follow closely."""
        if not self.armed:
            return
        now = time.monotonic()
        if self.count and now - self.since < 1.0:  # consecutive searches: their time adds up
            self.spent_s += now - self.since
        self.count, self.since = self.count + 1, now
        if self.count > MAX_PATTERN_SEARCHES or self.spent_s > PATTERN_BUDGET_S:
            raise ProfileError(
                f"{clean_name(where)}: the profiles' `match` patterns took more than {MAX_PATTERN_SEARCHES:,} "
                f"searches or {PATTERN_BUDGET_S:g} s in one command; shorten the `match` lists of your profiles"
            )


MAX_PATTERN_SEARCHES = 200_000  # the built-in profiles use ~400 patterns; a command matches a few devices
PATTERN_BUDGET_S = 3.0
SEARCHES = SearchBudget()  # armed by the CLI for each command


_GFX_TARGET = re.compile(r"gfx[0-9a-f]{3,5}")


def with_gfx_target(name: str, target: object) -> str:
    """A device name as profiles match it: an AMD GPU's gfx target (amd-smi's
    `target_graphics_version`, rocm-smi's `GFX Version`, a ROCm log's device line) beside it,
    which names the chip where the name does not ("AMD Radeon Graphics (gfx1151)"). Anything
    but a gfx target is left out."""
    if isinstance(target, str) and _GFX_TARGET.fullmatch(target.strip().lower()):
        return f"{name} ({target.strip().lower()})"
    return name


def vendor_of(architecture: str | None) -> str | None:
    """apple, intel, amd or nvidia for a known chip generation, else None."""
    if architecture is None:
        return None
    return next((v for prefix, v in VENDOR_PREFIXES if architecture.startswith(prefix)), None)


def generation_of(architecture: str | None) -> str | None:
    """The chip generation of an architecture (`xe2-lpg` -> `xe2`, `ada` -> `ada`; GENERATIONS)."""
    return GENERATIONS.get(architecture, architecture) if architecture else None


def builtin_dir() -> Path:
    packaged = Path(str(resources.files("ggprof") / "profiles"))
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "profiles"  # editable install: the repository


def user_dir() -> Path:
    return config_dir() / "profiles"


class ProfileDB:
    """The profiles of some folders, read on first use; a later folder's profile replaces an
    earlier one with the same id. The CLI builds one with the plugins' folders."""

    def __init__(self, dirs: Iterable[Path]) -> None:
        self.dirs = tuple(dirs)
        self._profiles: dict[str, Profile] | None = None

    @classmethod
    def default(cls, extra_dirs: Iterable[Path] = ()) -> ProfileDB:
        """Built-in profiles, then `extra_dirs` (from plugins), then the user's own."""
        return cls([builtin_dir(), *extra_dirs, user_dir()])

    def all(self) -> dict[str, Profile]:
        if self._profiles is None:
            self._profiles = load_from(self.dirs)
        return self._profiles

    def __contains__(self, profile_id: object) -> bool:
        return profile_id in self.all()

    def get(self, profile_id: str) -> Profile:
        """The profile with this id; BadInputError listing the closest ids otherwise."""
        profiles = self.all()
        if profile_id in profiles:
            return profiles[profile_id]
        for p in profiles.values():
            if profile_id in p.aliases:
                return p
        close = difflib.get_close_matches(profile_id.lower(), list(profiles), n=4, cutoff=0.4)
        hint = f"; closest: {', '.join(close)}" if close else "; `ggprof profiles` lists them"
        raise BadInputError(f"unknown device {clean(profile_id)[:80]!r}{hint}")

    def match(
        self, device_name: str, gpu_cores: int | None = None, kinds: tuple[str, ...] = KINDS
    ) -> tuple[Profile | None, str | None]:
        """The profile a detected device name matches, and a note when the match is ambiguous."""
        scored = [(p.matches(device_name), p) for p in self.all().values() if p.kind in kinds]
        top = max((s for s, _ in scored), default=0)
        if top == 0:
            return None, None
        candidates = [p for s, p in scored if s == top]
        if len(candidates) == 1:
            return candidates[0], None
        if gpu_cores is not None:
            by_cores = [p for p in candidates if p.gpu_cores == gpu_cores]
            if by_cores:
                return by_cores[0], None
        base = sorted(candidates, key=lambda p: len(p.id))[0]
        ids = ", ".join(p.id for p in candidates)
        return base, f"{device_name!r} matches {ids}; GPU core count unknown, assumed {base.id}"


def load_from(dirs: Iterable[Path]) -> dict[str, Profile]:
    out: dict[str, Profile] = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.toml")):
            p = parse_profile(path)
            out[p.id] = p
    return out


# -- parsing and validation ------------------------------------------------------------------
def parse_profile(path: Path) -> Profile:
    text = read_text(path, MAX_PROFILE_BYTES, ProfileError)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{clean_name(path)}: invalid TOML: {clean_name(e)}") from None
    except RecursionError:
        raise ProfileError(f"{clean_name(path)}: TOML nested too deeply") from None
    v = _Validator(path, data)
    profile = Profile(
        id=v.string("id", pattern=_ID),
        name=v.string("name"),
        kind=v.choice("kind", KINDS),
        backends=tuple(v.string_list("backends", required=True)),
        memory_bandwidth_gbs=v.positive("memory_bandwidth_gbs", required=True) or 0.0,
        source=v.string("source"),
        memory_gb=v.positive("memory_gb"),
        peak_fp16_tflops=v.positive("peak_fp16_tflops"),
        peak_fp32_tflops=v.positive("peak_fp32_tflops"),
        peak_int8_tops=v.positive("peak_int8_tops"),
        gpu_cores=v.integer("gpu_cores"),
        match=tuple(v.regex_list("match")),
        aliases=tuple(v.string_list("aliases")),
        architecture=v.optional_string("architecture"),
        integrated=v.optional_bool("integrated"),
        datacenter=bool(v.optional_bool("datacenter")),
        host_link_gbs=v.positive("host_link_gbs"),
        sources=v.string_table("sources"),
        notes=v.optional_string("notes"),
        path=path,
    )
    v.no_unknown_fields()
    if profile.datacenter and profile.integrated:
        raise v.error("datacenter", "a datacenter GPU has its own memory: not with integrated = true")
    return profile


class _Validator:
    """Reads one field at a time; the first bad field is one ProfileError naming file and field."""

    FIELDS = frozenset(Profile.__dataclass_fields__) - {"path"}

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path, self.data = path, data

    def error(self, name: str, problem: str) -> ProfileError:
        return ProfileError(f"{clean_name(self.path)}: field {clean_name(name, 60)!r}: {problem}")

    @staticmethod
    def shown(value: object) -> str:
        return clean_name(repr(value), 60)

    def string(self, name: str, pattern: re.Pattern[str] | None = None) -> str:
        value = self.data.get(name)
        if not isinstance(value, str) or not value.strip():
            raise self.error(name, "required, a non-empty string")
        if pattern and not pattern.match(value):
            raise self.error(name, f"{self.shown(value)} must be lowercase letters, digits, '-' and '.'")
        return value

    def optional_string(self, name: str) -> str | None:
        value = self.data.get(name)
        if value is not None and not isinstance(value, str):
            raise self.error(name, "must be a string")
        return value

    def optional_bool(self, name: str) -> bool | None:
        value = self.data.get(name)
        if value is not None and not isinstance(value, bool):
            raise self.error(name, "must be true or false")
        return value

    def choice(self, name: str, options: tuple[str, ...]) -> str:
        value = self.string(name)
        if value not in options:
            raise self.error(name, f"{self.shown(value)} is not one of {', '.join(options)}")
        return value

    def positive(self, name: str, required: bool = False) -> float | None:
        value = self.data.get(name)
        if value is None and not required:
            return None
        top = LIMITS[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= top:
            raise self.error(name, f"must be a positive number up to {top:g}, got {self.shown(value)}")
        return float(value)

    def integer(self, name: str) -> int | None:
        value = self.data.get(name)
        if value is None:
            return None
        top = LIMITS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= top:
            raise self.error(name, f"must be a positive integer up to {top:g}, got {self.shown(value)}")
        return value

    def string_list(self, name: str, required: bool = False) -> list[str]:
        value = self.data.get(name, None if required else [])
        if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value) or (required and not value):
            raise self.error(name, "must be a list of non-empty strings")
        return value

    def regex_list(self, name: str) -> list[str]:
        patterns = self.string_list(name)
        for p in patterns:
            if len(p) > MAX_PATTERN_CHARS:
                raise self.error(name, f"a pattern longer than {MAX_PATTERN_CHARS} characters")
            SEARCHES.spend(self.path)  # compiling one counts as a search: thousands cost seconds
            try:
                regex.compile(p)
            except regex.error as e:
                raise self.error(name, f"bad pattern {self.shown(p)}: {clean_name(e, 80)}") from None
        return patterns

    def string_table(self, name: str) -> dict[str, str]:
        value = self.data.get(name, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self.error(name, "must be a table of strings")
        return dict(value)

    def no_unknown_fields(self) -> None:
        unknown = sorted(map(str, set(self.data) - self.FIELDS))
        if unknown:
            raise self.error(unknown[0], "unknown field")

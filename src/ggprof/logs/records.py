"""What a log's lines hold, as read: facts and speeds each with the line it came from, the
devices named, the runs a log holds; and the numbers as llama.cpp prints them (bounded)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ggprof.logs import figures
from ggprof.logs.text import Line
from ggprof.units import parse_bytes

MAX_RUNS = 64  # a log with more model loads keeps the last ones
MAX_SPEEDS = 2000  # per run: the rest are counted, not kept
# in all: a judged speed takes 4-10 KB (its verdict, findings, lines, JSON), so earlier runs are left
# out past this many (64 runs of 2,000 took 9 s and 1.1 GB, as JSON 18 s and 2.4 GB)
MAX_SPEEDS_IN_ALL = 4000
MAX_LISTED = 64  # a run's warnings and re-processed prompts kept (the rest counted)
MAX_DEVICES = 16
MAX_DRAFT_POSITIONS = 1024  # llama-server's `acc per pos` shares kept (its --spec-draft-n-max at most)
MAX_TOKENS = 1 << 31  # a count above this is not a count (absurd numbers are dropped)
MAX_MS = 1e11  # three years
MAX_BYTES = 1 << 50
MAX_PY_META_CHARS = 20000
SIMILAR_PROMPT = 0.9  # a slot this similar to the new prompt had its tokens cached
REPROCESS_MIN_TOKENS = 256  # a prompt this long evaluated again is worth naming

Kind = Literal["prefill", "decode"]
_KINDS: tuple[Kind, Kind] = ("prefill", "decode")


@dataclass(frozen=True)
class Fact:
    value: Any
    line: int
    text: str


@dataclass(frozen=True)
class Speed:
    kind: Kind
    tok_s: float
    n_tokens: int | None
    line: int
    text: str
    source: str  # which printer: "llama.cpp timings", "llama-server", "ollama --verbose", "llama-bench"
    depth: int = 0  # tokens already in the KV cache when it started (decode: on average)
    sample_ms: float | None = None  # sampling time of the same decode (llama_print_timings)
    eval_ms: float | None = None
    cv: float | None = None  # llama-bench's stddev / mean
    backend: str | None = None  # llama-bench's backend column
    n_gpu_layers: int | None = None  # llama-bench's ngl column
    n_prompt: int | None = None  # llama-bench's pp size
    flash_attn: bool | None = None  # llama-bench's fa column (1 or 0)
    n_ubatch: int | None = None  # llama-bench's physical batch: its n_ubatch column, at most n_batch (512 without)
    facts: tuple[tuple[str, Any], ...] = ()  # a llama-bench row's run-fact columns (-ncmoe, -ot...), read by the table


@dataclass(frozen=True)
class LogDevice:
    index: int
    name: str
    backend: str
    line: int
    text: str
    memory_bytes: int | None = None
    compute: str | None = None  # CUDA compute capability, a gfx target, SYCL's capability
    uma: bool | None = None
    fp16: bool | None = None
    int_dot: bool | None = None
    matrix_cores: str | None = None  # Vulkan: KHR_coopmat, NV_coopmat2, none
    driver: str | None = None  # Vulkan: the driver's name the banner gives (radv, AMD open-source driver)


@dataclass
class LogRun:
    facts: dict[str, Fact] = field(default_factory=dict)
    speeds: list[Speed] = field(default_factory=list)
    devices: list[LogDevice] = field(default_factory=list)
    model_buffers: dict[str, Fact] = field(default_factory=dict)  # buffer -> bytes
    kv_buffers: dict[str, Fact] = field(default_factory=dict)
    # --fit's choice per device: (its words, layers, overflowing layers, MiB used, MiB free)
    fit_devices: dict[str, Fact] = field(default_factory=dict)
    # the memory breakdown after the load, per device (and Host): (self, model, context, compute) MiB
    memory_breakdown: dict[str, Fact] = field(default_factory=dict)
    type_counts: dict[str, int] = field(default_factory=dict)
    warnings: list[Fact] = field(default_factory=list)
    full_reprocess: list[Fact] = field(default_factory=list)  # server prompts evaluated from token 0
    reprocessed: int = 0  # all of them, kept or not
    speeds_dropped: int = 0
    first_line: int = 0

    def set(self, key: str, value: Any, line: Line) -> None:
        if value is None:
            return
        self.facts[key] = Fact(value, line.number, line.text)

    def setdefault(self, key: str, value: Any, line: Line) -> None:
        if key not in self.facts:
            self.set(key, value, line)

    def value(self, key: str) -> Any:
        f = self.facts.get(key)
        return f.value if f is not None else None

    def add_reprocess(self, f: Fact) -> None:
        self.reprocessed += 1
        first_similar = f.value[1] == "similar" and all(x.value[1] != "similar" for x in self.full_reprocess)
        if len(self.full_reprocess) < MAX_LISTED or first_similar:
            self.full_reprocess.append(f)

    def add_speed(self, s: Speed) -> None:
        if len(self.speeds) < MAX_SPEEDS:
            self.speeds.append(s)
        else:
            self.speeds_dropped += 1


@dataclass
class ParsedLog:
    runs: list[LogRun]
    formats: list[str]  # the printers recognised, in the order first seen
    runs_dropped: int = 0


# -- numbers ------------------------------------------------------------------------------------
def num(text: str | None) -> float | None:
    """A number as llama.cpp or a locale printed it (`602,64` is 602.64); None when absurd."""
    if text is None:
        return None
    t = text.strip()
    if "," in t and "." not in t:
        t = t.replace(",", ".")
    t = t.replace(",", "")
    try:
        v = float(t)
    except ValueError:
        return None
    return v if math.isfinite(v) and abs(v) < 1e18 else None


def count(text: str | None) -> int | None:
    v = num(text)
    return int(v) if v is not None and 0 <= v < MAX_TOKENS and v == int(v) else None


_SCALE = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def params_of(text: str) -> int | None:
    m = re.match(r"\s*([\d.,]+)\s*([KMBGT]?)\b", text)
    if not m or (v := num(m[1])) is None:
        return None
    n = v * _SCALE[m[2]]
    return int(n) if 0 < n < 1e15 else None


def bytes_of(text: str) -> int | None:
    """A size a log prints with its unit (`3.56 GiB`, `5.6 GiB`, `511.43 MiB`), bounded."""
    n = parse_bytes(text, require_unit=True)
    return int(n) if n is not None and math.isfinite(n) and 0 <= n < MAX_BYTES else None


_GO_PART = re.compile(r"([\d.]+)(h|ms|µs|us|ns|m|s)")
_GO_UNIT = {"h": 3.6e6, "m": 6e4, "s": 1e3, "ms": 1.0, "µs": 1e-3, "us": 1e-3, "ns": 1e-6}


def go_duration_ms(text: str) -> float | None:
    """A Go duration (`2m7.682s`, `69ms`, `4.876787s`) in milliseconds."""
    t = text.strip()
    parts = _GO_PART.findall(t)
    if not parts or "".join(a + b for a, b in parts) != t.replace(" ", ""):
        return None
    total = 0.0
    for value, unit in parts:
        v = num(value)
        if v is None:
            return None
        total += v * _GO_UNIT[unit]
    return total if 0 < total < MAX_MS else None


def _timed(line: Line, n_text: str, ms_text: str, unit_ms: float, rate_text: str | None) -> tuple[float | None, int]:
    """(tokens a second, tokens) of a line that times `n_text` tokens in `ms_text` x `unit_ms` ms
    and may print its rate (ggprof.logs.figures.rate); a figure no run can have is refused."""
    n = figures.tokens(n_text, line)
    ms = figures.duration_ms(ms_text, line, unit_ms)
    if not n or ms is None:  # nothing timed, or no figures (`xx.xx ms`: a guide's placeholder)
        return None, 0
    return figures.rate(line, n, ms, rate_text), n


# a GGUF's `ARCH.*` metadata keys a log prints (llama.cpp's loader, llama-cpp-python's dict),
# and the run facts they give
METADATA_FACTS = {
    "context_length": "n_ctx_train",
    "embedding_length": "n_embd",
    "block_count": "n_layers",
    "feed_forward_length": "n_ff",
    "attention.head_count": "n_heads",
    "attention.head_count_kv": "n_kv_heads",
    "attention.key_length": "head_dim_k",
    "attention.value_length": "head_dim_v",
    "expert_count": "n_experts",
    "expert_used_count": "n_experts_used",
    "attention.sliding_window": "sliding_window",
    "vocab_size": "n_vocab",
    "expert_feed_forward_length": "n_ff_exp",
}

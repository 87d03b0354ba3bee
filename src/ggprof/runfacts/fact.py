"""A run fact: one setting of a llama.cpp run, how its programs spell it and read its values."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_COUNT = 2**31 - 1  # llama.cpp's int32 counts
MAX_SPLIT_DEVICES = 16  # llama_max_devices() on the builds of 2025-2026

# llama.cpp's llama_flash_attn_type: its words and the numbers llama-bench's JSON writes
FLASH_ATTN_TYPES = {"auto": -1, "off": 0, "on": 1}


@dataclass(frozen=True, kw_only=True)
class RunFact:
    """One setting of a llama.cpp run, as llama.cpp's programs spell it."""

    name: str  # ggprof's name everywhere: llama-bench's JSON key where it has one
    what: str  # in words, as reports name it
    unit: str  # of its value: "tokens", "threads", "layers", "" (none)
    kind: str  # "count", "switch" (on/off/auto), "bool" (0/1), "type" (one of `values`), "shares", "path",
    # "number" (a float), "names" (a list of words: the sampler chain), "overrides" (-ot's
    # pattern=buffer pairs, every occurrence's added), "devices" (llama.cpp's backend device names:
    # CUDA0, Vulkan1, RPC0[host:port]; `none`: no device)
    default: Any  # llama.cpp's default (llama-bench's cmd_params_defaults; None: the machine's)
    flags: tuple[str, ...]  # a command line's spellings, short first (llama-server, llama-cli)
    bench_flags: tuple[str, ...] = ()  # llama-bench's, where they differ from `flags`
    bench: bool = True  # llama-bench takes it (its flags, JSON key and column)
    column: str | None = None  # llama-bench's markdown head (None: its JSON key, as llama-bench does)
    log_keys: tuple[str, ...] = ()  # the keys of the load log's `llama_context: KEY = VALUE` lines, older too
    low: int = 0  # a count's least value
    high: int = MAX_COUNT  # ... and its most
    values: tuple[str, ...] = field(default=())  # the words a switch or type takes
    bench_words: Mapping[Any, str] = field(default_factory=dict)  # values llama-bench spells its own way
    always: bool = False  # given to llama-bench even at its default (defaults changed across builds)
    placement: bool = False  # says where weights or cache live: a prediction's input (PredictInputs' field)
    drafting: bool = False  # says how a run drafted tokens (speculative decoding)
    multi_device: bool = False  # says how several devices share the model (-sm, -ts, -mg, -dev)
    old_flags: tuple[str, ...] = ()  # spellings of older builds, still accepted
    aliases: Mapping[str, str] = field(default_factory=dict)  # older words for a value
    set_by: Mapping[str, Any] = field(default_factory=dict)  # flags that set it without a value (--no-repack)
    props: tuple[str, ...] = ()  # where llama-server's /props states it (keys, outermost first)
    sampling: bool = False  # a parameter of the sampler chain (per request on a server)

    @property
    def flag(self) -> str:
        """The spelling a report prints: llama.cpp's short flag."""
        return self.flags[0] if self.flags else self.name

    @property
    def bench_flag(self) -> str:
        return (self.bench_flags or self.flags)[0]

    @property
    def head(self) -> str:
        """llama-bench's markdown column head."""
        return self.column or self.name

    def spell(self, value: Any) -> str:
        """`value` as a llama.cpp command line writes it today (`auto`, `q8_0`, `3,1`)."""
        if self.kind == "shares":
            return ",".join(f"{v:g}" for v in value)
        if self.kind == "names":
            return ";".join(value)
        if self.kind in ("overrides", "devices"):
            return ",".join(f"{p}={b}" for p, b in value) if self.kind == "overrides" else ",".join(value)
        if self.kind == "number":
            return f"{value:g}"
        if self.kind == "bool":
            return "1" if value else "0"
        return str(value)

    def spelled(self, value: Any) -> str:
        """The flag and its value: `-fa auto`, `-ub 512` (a flag that takes no value: itself,
        `--no-cache-prompt`)."""
        bare = next((flag for flag, v in self.set_by.items() if v == value), None)
        if bare is not None and not self.bench:
            return bare
        return f"{self.flag} {self.spell(value)}"

    def bench_argument(self, value: Any) -> str:
        """`value` as llama-bench's flag takes it (its lists are separated by `/` for shares)."""
        if value in self.bench_words:
            return self.bench_words[value]
        if self.kind == "shares":
            return "/".join(f"{v:g}" for v in value)
        if self.kind == "devices":  # llama-bench: `/` between one run's devices (`,` separates runs)
            return "/".join(value)
        if self.kind == "switch":
            return {"on": "1", "off": "0"}.get(value, str(value))  # 0/1 every build reads; `auto` by name
        if self.kind == "overrides":  # one run's list: `;` between pairs (`,` separates runs)
            return ";".join(f"{p}={b}" for p, b in value)
        return self.spell(value)

    def read(self, raw: object) -> Any:
        """A value from llama.cpp's output (llama-bench JSON or CSV, a table cell, a log line),
        as ggprof keeps it; None for what is missing or cannot be this fact's value."""
        if raw is None:
            return None
        if self.kind == "count":
            value = _whole(raw)
            return value if value is not None and self.low <= value <= self.high else None
        if self.kind == "switch":
            word = _switch(raw)
            return word if not self.values or word in self.values else None
        if self.kind == "bool":
            flag = _switch(raw)
            return None if flag in (None, "auto") else flag == "on"
        if self.kind == "type":
            text = str(raw).strip().lower()
            text = self.aliases.get(text, text)
            return text if text in self.values else None
        if self.kind == "path":
            text = str(raw).strip()
            return text if 0 < len(text) <= 4096 and text.isprintable() else None
        if self.kind == "shares":
            return _shares(raw)
        if self.kind == "number":
            return _number(raw)
        if self.kind == "names":
            return _names(raw)
        if self.kind == "overrides":
            return _overrides(raw)
        if self.kind == "devices":
            return device_list(raw)
        raise ValueError(f"unknown kind of run fact: {self.kind}")


def _whole(raw: object) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        return int(raw) if raw.is_integer() else None
    text = str(raw).strip()
    return int(text) if text.lstrip("-").isdigit() and len(text) <= 11 else None


def _switch(raw: object) -> str | None:
    """llama.cpp's on/off/auto from what its programs print: a word, 1/0/-1 (llama-bench's JSON
    since the auto setting), true/false (older llama-bench), `enabled`/`disabled` (the load log)."""
    if isinstance(raw, bool):
        return "on" if raw else "off"
    if isinstance(raw, int):
        return {1: "on", 0: "off", -1: "auto"}.get(raw)
    text = str(raw).strip().lower()
    words = {"1": "on", "true": "on", "enabled": "on", "0": "off", "false": "off", "disabled": "off", "-1": "auto"}
    return text if text in FLASH_ATTN_TYPES else words.get(text)


def _shares(raw: object) -> tuple[float, ...] | None:
    parts: Iterable[object] = raw if isinstance(raw, (list, tuple)) else str(raw).replace("/", ",").split(",")
    try:
        values = tuple(float(str(v).strip()) for v in parts if str(v).strip())
    except ValueError:
        return None
    if not values or len(values) > MAX_SPLIT_DEVICES or not all(math.isfinite(v) and 0 <= v < 1e6 for v in values):
        return None
    while len(values) > 1 and values[-1] == 0:  # llama-bench pads its list with zeros
        values = values[:-1]
    return values if sum(values) > 0 else None


def _number(raw: object) -> float | None:
    if isinstance(raw, bool):
        return None
    try:
        value = float(raw) if isinstance(raw, (int, float)) else float(str(raw).strip()[:40])
    except ValueError:
        return None
    # /props writes a float32 parameter in full (0.800000011920929): kept to its 7 digits
    return float(f"{value:.7g}") if math.isfinite(value) and abs(value) < 1e9 else None


MAX_SAMPLERS = 32


def _names(raw: object) -> tuple[str, ...] | None:
    """A sampler chain: a JSON list of names (/props) or names separated by `;` (--samplers)."""
    parts = raw if isinstance(raw, (list, tuple)) else str(raw).split(";")
    names = tuple(str(p).strip().lower() for p in parts if str(p).strip())
    ok = len(names) <= MAX_SAMPLERS and all(
        len(n) <= 32 and n.replace("_", "").replace("-", "").isalnum() for n in names
    )
    return names if ok else None


MAX_OVERRIDES = 64  # -ot pairs kept; llama.cpp tries each pattern on every tensor's name
MAX_PATTERN_CHARS = 256


def _overrides(raw: object) -> tuple[tuple[str, str], ...] | None:
    """-ot's `PATTERN=BUFFER` pairs, separated by `,` (llama-server, llama-cli) or `;` (one
    llama-bench run, its JSON's `tensor_buft_overrides`); `none`: no override. Each pattern must
    compile (as llama.cpp's std::regex must) and each buffer be a short name (CPU, CUDA0)."""
    text = str(raw).strip()
    if text in ("", "none"):
        return ()
    pairs: list[tuple[str, str]] = []
    for part in re.split(r"[,;]", text):
        pattern, eq, buffer = part.strip().rpartition("=")
        if not eq or not pattern or len(pattern) > MAX_PATTERN_CHARS or len(pairs) >= MAX_OVERRIDES:
            return None
        if not (0 < len(buffer) <= 64 and buffer.isprintable() and pattern.isprintable()):
            return None
        try:
            re.compile(pattern)
        except re.error:
            return None
        pairs.append((pattern, buffer))
    return tuple(pairs)


# A llama.cpp backend device's name, as ggml's backends register them (ggml_backend_dev_name):
# CUDA0, ROCm1, Vulkan0, SYCL0, MTL0 or Metal, OpenCL, CANN0, MUSA0, BLAS, and an RPC server's
# RPC0[host:port] (older builds: RPC[host:port]); none (no device, every layer on the CPU)
DEVICE_NAME = re.compile(
    r"(?:(?:CUDA|ROCm|HIP|Vulkan|SYCL|MTL|Metal|OpenCL|CANN|MUSA|BLAS|ZenDNN)\d{0,2}|RPC\d{0,2}(?:\[[^\]\s,/]{1,256}\])?)"
)


def device_list(raw: object) -> tuple[str, ...] | None:
    """llama.cpp's device list: `CUDA0,CUDA1` (llama-server, llama-cli), `CUDA0/CUDA1` (llama-bench's
    -dev and JSON), `auto` (llama.cpp's choice: ()), `none` (("none",)); None where an entry is
    no backend device's name."""
    text = str(raw).strip() if not isinstance(raw, (list, tuple)) else ",".join(str(v) for v in raw)
    if text in ("", "auto"):
        return ()
    if text == "none":
        return ("none",)
    names = tuple(n.strip() for n in re.split(r"[,/]", text))
    if len(names) > MAX_SPLIT_DEVICES or not all(DEVICE_NAME.fullmatch(n) for n in names):
        return None
    return names

"""A run's facts, one row each: the settings of a llama.cpp run that change what it measures,
with every spelling llama.cpp's programs give them.

A row says what the fact is (its name, unit and llama.cpp's default), how a command line
spells it (common/arg.cpp for llama-server and llama-cli; tools/llama-bench/llama-bench.cpp,
whose flags take comma lists), how llama-bench's JSON and CSV key it and its markdown table
heads it (`get_field_display_name`), what the load log prints (`llama_context: n_ubatch =
512`), and llama.cpp's words for its values (`-fa auto`). Options, llama-bench's argument
list, what is read back from its output, the settings `compare` names and the command line a
report prints come from these rows; adding a fact is a row here plus the physics that uses it.

Values are kept as ggprof keeps them: counts as ints, types as ggml's names, a switch as
llama.cpp's word (`on`, `off`, `auto`), a list of shares as a tuple of floats, a number
(a sampler's parameter) as a float, a list of names (the sampler chain) as a tuple of words.

A server's own settings are rows too (its context, slots, batch threads, prompt cache and
sampler chain): llama-bench takes none of them (`bench=False`); llama-server's /props
states some (`props`, the path to the value in its answer).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ggprof.llamacpp import CACHE_TYPE, GGML_MAX_N_THREADS, N_BATCH, N_UBATCH

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
    # pattern=buffer pairs, every occurrence's added)
    default: Any  # llama.cpp's default (llama-bench's cmd_params_defaults; None: the machine's)
    flags: tuple[str, ...]  # a command line's spellings, short first (llama-server, llama-cli)
    bench_flags: tuple[str, ...] = ()  # llama-bench's, where they differ from `flags`
    bench: bool = True  # llama-bench takes it (its flags, JSON key and column)
    column: str | None = None  # llama-bench's markdown head (None: its JSON key, as llama-bench does)
    log_key: str | None = None  # the key of the load log's `llama_context: KEY = VALUE` line
    low: int = 0  # a count's least value
    high: int = MAX_COUNT  # ... and its most
    values: tuple[str, ...] = field(default=())  # the words a switch or type takes
    bench_words: Mapping[Any, str] = field(default_factory=dict)  # values llama-bench spells its own way
    always: bool = False  # given to llama-bench even at its default (defaults changed across builds)
    placement: bool = False  # says where weights or cache live: a prediction's input (PredictInputs' field)
    drafting: bool = False  # says how a run drafted tokens (speculative decoding)
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
        if self.kind == "overrides":
            return ",".join(f"{p}={b}" for p, b in value)
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
            return _switch(raw)
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


# KV cache types llama.cpp accepts for --cache-type-k/-v (common/arg.cpp kv_cache_types)
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

# llama.cpp's --spec-type values (common/speculative.cpp); older builds and posts write `mtp`
SPEC_TYPES = (
    "none",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)

FACTS: tuple[RunFact, ...] = (
    RunFact(
        name="n_threads",
        what="threads",
        unit="threads",
        kind="count",
        default=None,  # the machine's math cores (common_cpu_get_num_math)
        flags=("-t", "--threads"),
        column="threads",
        log_key="n_threads",
        low=1,
        high=GGML_MAX_N_THREADS,
    ),
    RunFact(
        name="n_gpu_layers",
        what="layers offloaded",
        unit="layers",
        kind="count",
        default=-1,  # every layer (llama-bench's -1; 99 on older builds)
        flags=("-ngl", "--n-gpu-layers", "--gpu-layers"),
        column="ngl",
        low=-1,
        bench_words={-1: "999"},  # every layer, on every build
        always=True,
        placement=True,
    ),
    RunFact(
        name="n_cpu_moe",
        what="layers whose experts stay in RAM",
        unit="layers",
        kind="count",
        default=0,
        flags=("-ncmoe", "--n-cpu-moe"),
        set_by={"-cmoe": MAX_COUNT, "--cpu-moe": MAX_COUNT},  # every layer's experts (llama-server's switch)
        placement=True,
    ),
    RunFact(
        name="tensor_buft_overrides",
        what="tensors placed by name (pattern=buffer, the first match wins)",
        unit="",
        kind="overrides",
        default=(),
        flags=("-ot", "--override-tensor"),
        column="ot",
        placement=True,
    ),
    RunFact(
        name="n_batch",
        what="logical batch",
        unit="tokens",
        kind="count",
        default=N_BATCH,
        flags=("-b", "--batch-size"),
        log_key="n_batch",
        low=1,
    ),
    RunFact(
        name="n_ubatch",
        what="physical batch",
        unit="tokens",
        kind="count",
        default=N_UBATCH,
        flags=("-ub", "--ubatch-size"),
        log_key="n_ubatch",
        low=1,
    ),
    RunFact(
        name="flash_attn",
        what="flash attention",
        unit="",
        kind="switch",
        default="auto",
        flags=("-fa", "--flash-attn"),
        column="fa",
        log_key="flash_attn",
        values=tuple(FLASH_ATTN_TYPES),
    ),
    RunFact(
        name="type_k",
        what="K cache type",
        unit="",
        kind="type",
        default=CACHE_TYPE,
        flags=("-ctk", "--cache-type-k"),
        values=KV_CACHE_TYPES,
    ),
    RunFact(
        name="type_v",
        what="V cache type",
        unit="",
        kind="type",
        default=CACHE_TYPE,
        flags=("-ctv", "--cache-type-v"),
        values=KV_CACHE_TYPES,
    ),
    RunFact(
        name="repack",
        what="weight repacking",
        unit="",
        kind="bool",
        default=True,  # llama_model_default_params().use_extra_bufts
        flags=("--repack",),
        column="rpk",
        set_by={"--repack": True, "-nr": False, "--no-repack": False},  # llama-server's, without a value
    ),
    RunFact(
        name="split_mode",
        what="split mode",
        unit="",
        kind="type",
        default="layer",
        flags=("-sm", "--split-mode"),
        column="sm",
        values=("none", "layer", "row", "tensor"),
    ),
    RunFact(
        name="main_gpu",
        what="main GPU",
        unit="",
        kind="count",
        default=0,
        flags=("-mg", "--main-gpu"),
    ),
    RunFact(
        name="no_kv_offload",
        what="KV cache kept in RAM",
        unit="",
        kind="bool",
        default=False,
        flags=("-nkvo", "--no-kv-offload"),
        set_by={"-nkvo": True, "--no-kv-offload": True},  # llama-server's switch; llama-bench's takes 0|1
        column="nkvo",
        placement=True,
    ),
    RunFact(
        name="spec_type",
        what="speculative decoding",
        unit="",
        kind="type",
        default="none",
        flags=("--spec-type",),
        values=SPEC_TYPES,
        aliases={"mtp": "draft-mtp", "nextn": "draft-mtp", "draft": "draft-simple", "eagle3": "draft-eagle3"},
        drafting=True,
        bench=False,
        props=("default_generation_settings", "params", "speculative.types"),
    ),
    RunFact(
        name="spec_draft_n_max",
        what="tokens drafted a step at most",
        unit="tokens",
        kind="count",
        default=3,  # common/common.h: speculative.draft.n_max
        flags=("--spec-draft-n-max",),
        old_flags=("--draft-max", "--draft", "--draft-n"),
        high=1024,
        drafting=True,
        bench=False,
    ),
    RunFact(
        name="model_draft",
        what="draft model",
        unit="",
        kind="path",
        default=None,
        flags=("-md", "--model-draft", "--spec-draft-model"),
        drafting=True,
        bench=False,
    ),
    RunFact(
        name="tensor_split",
        what="tensor split",
        unit="",
        kind="shares",
        default=(),
        flags=("-ts", "--tensor-split"),
        column="ts",
    ),
)

# A server's own settings: llama-server's (common/arg.cpp, tools/server), none of them llama-bench's
_GENERATION = ("default_generation_settings", "params")
SERVER_FACTS: tuple[RunFact, ...] = (
    RunFact(
        name="n_threads_batch",
        what="prompt threads",
        unit="threads",
        kind="count",
        default=None,  # the decode's threads (-t)
        flags=("-tb", "--threads-batch"),
        log_key="n_threads_batch",
        low=1,
        high=GGML_MAX_N_THREADS,
        bench=False,
    ),
    RunFact(
        name="n_ctx",
        what="context",
        unit="tokens",
        kind="count",
        default=0,  # the model's training context
        flags=("-c", "--ctx-size"),
        log_key="n_ctx",
        bench=False,
    ),
    RunFact(
        name="n_slots",
        what="slots",
        unit="slots",
        kind="count",
        default=-1,  # auto: 4, their KV cache unified
        flags=("-np", "--parallel"),
        low=-1,
        bench=False,
        props=("total_slots",),
    ),
    RunFact(
        name="n_ctx_slot",
        what="context per slot",
        unit="tokens",
        kind="count",
        default=None,  # -c over the slots (all of it, the KV cache unified)
        flags=(),  # what -c, -np and -kvu make of it: /props and /slots state it
        bench=False,
        props=("default_generation_settings", "n_ctx"),
    ),
    RunFact(
        name="kv_unified",
        what="one KV cache for every slot",
        unit="",
        kind="bool",
        default=False,  # on where the slots are auto (-np -1)
        flags=("-kvu", "--kv-unified"),
        set_by={"-kvu": True, "--kv-unified": True, "-no-kvu": False, "--no-kv-unified": False},
        bench=False,
    ),
    RunFact(
        name="cache_prompt",
        what="prompt cache",
        unit="",
        kind="bool",
        default=True,
        flags=("--cache-prompt",),
        set_by={"--cache-prompt": True, "--no-cache-prompt": False},
        bench=False,
    ),
    RunFact(
        name="samplers",
        what="sampler chain",
        unit="",
        kind="names",
        default=("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"),
        flags=("--samplers",),
        bench=False,
        sampling=True,
        props=(*_GENERATION, "samplers"),
    ),
    *(
        RunFact(
            name=name,
            what=what,
            unit="tokens" if kind == "count" else "",
            kind=kind,
            default=default,
            flags=flags,
            low=-1,
            bench=False,
            sampling=True,
            props=(*_GENERATION, key),
        )
        for name, what, kind, default, flags, key in (
            ("temp", "temperature", "number", 0.8, ("--temp", "--temperature"), "temperature"),
            ("top_k", "top-k", "count", 40, ("--top-k",), "top_k"),
            ("top_p", "top-p", "number", 0.95, ("--top-p",), "top_p"),
            ("min_p", "min-p", "number", 0.05, ("--min-p",), "min_p"),
            ("typical_p", "typical-p", "number", 1.0, ("--typical", "--typical-p"), "typical_p"),
            ("top_n_sigma", "top-n-sigma", "number", -1.0, ("--top-nsigma", "--top-n-sigma"), "top_n_sigma"),
            ("xtc_probability", "XTC probability", "number", 0.0, ("--xtc-probability",), "xtc_probability"),
            ("repeat_penalty", "repeat penalty", "number", 1.0, ("--repeat-penalty",), "repeat_penalty"),
            ("repeat_last_n", "tokens the penalties look back", "count", 64, ("--repeat-last-n",), "repeat_last_n"),
            ("presence_penalty", "presence penalty", "number", 0.0, ("--presence-penalty",), "presence_penalty"),
            ("frequency_penalty", "frequency penalty", "number", 0.0, ("--frequency-penalty",), "frequency_penalty"),
            ("dry_multiplier", "DRY multiplier", "number", 0.0, ("--dry-multiplier",), "dry_multiplier"),
            ("mirostat", "Mirostat", "count", 0, ("--mirostat",), "mirostat"),
        )
    ),
)
FACTS = (*FACTS, *SERVER_FACTS)
BY_NAME: Mapping[str, RunFact] = {f.name: f for f in FACTS}
DRAFTING = tuple(f.name for f in FACTS if f.drafting)  # how a run drafted: `check` takes them
PLACEMENT = tuple(f.name for f in FACTS if f.placement)  # what `predict` and `check` take and predict on
BY_HEAD: Mapping[str, RunFact] = {f.head: f for f in FACTS}
SAMPLING = tuple(f.name for f in FACTS if f.sampling)  # the sampler chain and its parameters
BENCH = tuple(f.name for f in FACTS if f.bench)  # what llama-bench takes


def command_line(values: Mapping[str, Any], names: Iterable[str] | None = None) -> str:
    """The facts given, as a llama.cpp command line spells them (`-t 8 -ngl 99 -fa auto`), in
    the table's order; facts without a value, or without a flag of their own, are left out."""
    wanted = set(names) if names is not None else None
    return " ".join(
        f.spelled(values[f.name])
        for f in FACTS
        if f.flags and (wanted is None or f.name in wanted) and values.get(f.name) not in (None, ())
    )


def from_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """The facts a llama-bench JSON (or CSV) row states, as ggprof keeps them; one it states in
    a form that cannot be its value is left out (None)."""
    return {f.name: f.read(row.get(f.name)) for f in FACTS if f.name in row}


def placement_of(values: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The placement facts among `values` (those given), beyond -ngl (which every command has
    its own way), as a prediction takes them: (name, value) pairs in the table's order."""
    return tuple((n, values[n]) for n in PLACEMENT if n != "n_gpu_layers" and values.get(n) is not None)


def bench_arguments(values: Mapping[str, Any]) -> list[str]:
    """llama-bench's flags for the facts that differ from its defaults, in the table's order
    (a default left out: older builds lack some flags)."""
    out: list[str] = []
    for f in FACTS:
        value = values.get(f.name)
        if not f.bench or value is None or (value == f.default and not f.always) or (f.kind == "shares" and not value):
            continue
        out += [f.bench_flag, f.bench_argument(value)]
    return out


def from_props(props: Mapping[str, Any]) -> dict[str, Any]:
    """The facts llama-server's /props states (its slots, their context, the sampler chain and
    its parameters, how it drafts), as ggprof keeps them; one it states in a form that cannot be
    its value is left out."""
    out: dict[str, Any] = {}
    for f in FACTS:
        if not f.props:
            continue
        value: Any = props
        for key in f.props:
            value = value.get(key) if isinstance(value, Mapping) else None
        if (read := f.read(value)) is not None:
            out[f.name] = read
    return out


def facts_from_argv(argv: list[str], names: Iterable[str]) -> tuple[tuple[str, Any], ...]:
    """The facts `names` a llama.cpp command line sets (`--spec-type ngram-mod`, `-md=PATH`,
    `--no-cache-prompt`, any of each fact's spellings, older ones too), as ggprof keeps them, in
    the table's order; a value that cannot be the fact's is left out."""
    wanted = set(names)
    found: dict[str, Any] = {}
    for f in FACTS:
        if f.name not in wanted:
            continue
        spellings = (*f.flags, *f.old_flags)
        for i, arg in enumerate(argv):
            flag, eq, inline = arg.partition("=")
            if arg in f.set_by:
                # a switch (llama-server's `-nkvo`), unless a value follows where the flag takes one
                # (llama-bench's `-nkvo 0`)
                after = f.read(argv[i + 1]) if flag in spellings and i + 1 < len(argv) else None
                found[f.name] = f.set_by[arg] if after is None else after
                continue
            if flag not in spellings:
                continue
            raw = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            value = f.read(raw)
            if value is not None and f.kind == "overrides":
                found[f.name] = (*found.get(f.name, ()), *value)[:MAX_OVERRIDES]  # each -ot adds its pairs
            elif value is not None:
                found[f.name] = value  # the last one given wins, as llama.cpp's parser does
    return tuple((n, found[n]) for n in (f.name for f in FACTS) if n in found)

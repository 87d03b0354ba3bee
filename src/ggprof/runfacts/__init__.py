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

from collections.abc import Iterable, Mapping
from typing import Any

from ggprof.runfacts.fact import (
    FLASH_ATTN_TYPES,
    MAX_COUNT,
    MAX_OVERRIDES,
    MAX_SPLIT_DEVICES,
    RunFact,
    device_list,
)
from ggprof.runfacts.table import (
    BENCH,
    BY_HEAD,
    BY_LOG_KEY,
    BY_NAME,
    DRAFTING,
    FACTS,
    KV_CACHE_TYPES,
    MULTI_DEVICE,
    PLACEMENT,
    SAMPLING,
    SERVER_FACTS,
    SPEC_TYPES,
)

__all__ = [
    "BENCH",
    "BY_HEAD",
    "BY_LOG_KEY",
    "BY_NAME",
    "DRAFTING",
    "FACTS",
    "FLASH_ATTN_TYPES",
    "KV_CACHE_TYPES",
    "MAX_COUNT",
    "MAX_SPLIT_DEVICES",
    "MULTI_DEVICE",
    "PLACEMENT",
    "SAMPLING",
    "SERVER_FACTS",
    "SPEC_TYPES",
    "RunFact",
    "bench_arguments",
    "command_line",
    "device_list",
    "facts_from_argv",
    "from_json",
    "from_props",
    "placement_of",
]


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
    return tuple(
        (n, values[n])
        for n in PLACEMENT
        if n != "n_gpu_layers"
        and values.get(n) is not None
        and not (n in MULTI_DEVICE and values[n] == BY_NAME[n].default)  # one device, as llama.cpp's default
    )


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

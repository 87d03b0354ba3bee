"""The facts and speeds in a log's lines, each kept with the line it came from.

Formats, each recognised by its own lines (old and new spellings of llama.cpp's):
llama-cli / llama-server / llama-cpp-python (`llm_load_print_meta:` and `print_info:`,
`llama_model_loader:`, `load_tensors:`, `llama_context:`, `system_info:`, `llama_print_timings:`
and `llama_perf_context_print:`, the server's `slot print_timing`), llama-bench's markdown
table, Ollama's server log (`msg="inference compute"`, `msg=offload`, `starting llama server`)
and `ollama run --verbose` statistics; device lines of CUDA, ROCm, Vulkan, Metal and SYCL.
A new run starts where a model is loaded again after speeds were seen.

Each family of lines has its reader (logs/loadlog.py, logs/servers.py, logs/benchtable.py), the
patterns one home (logs/patterns.py), what is read one shape (logs/records.py).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable
from typing import Any

from ggprof.logs.benchtable import (
    BenchTable,
)
from ggprof.logs.loadlog import (
    LoadLog,
)
from ggprof.logs.patterns import (
    _COMMAND,
)
from ggprof.logs.records import (
    ParsedLog,
    Speed,
)
from ggprof.logs.servers import (
    ServerLines,
)
from ggprof.logs.text import Line
from ggprof.runfacts import BY_LOG_KEY, FACTS, facts_from_argv


class _Parser(LoadLog, ServerLines, BenchTable):
    """Every family's reader; a line is offered only to the readers its words could be for."""

    def feed(self, line: Line) -> None:
        t = line.text
        if not self.run.first_line:
            self.run.first_line = line.number
        if self.bench_columns is not None:
            if self._bench_row(line):
                return
            self.bench_columns = None
        if "|" in t and "model" in t and ("t/s" in t or "test" in t) and self._bench_header(t):
            return
        command = _COMMAND.search(t) if " -m " in t else None
        if command or t.startswith(
            ("llama_model_loader: loaded meta", "llama_model_load_internal: format", "Log start")
        ):
            self.new_run_if_measured(line)
        if command:
            said = t[command.start() :].strip()[:MAX_COMMAND_CHARS]
            self.run.set("command", said[:300], line)
            # every setting the command line gives, in any of llama.cpp's spellings (ggprof.runfacts)
            self.run.set("command_facts", facts_from_argv(_argv(said), FACT_NAMES), line)
        colon = t.find(":", 0, 48)
        head = t[:colon] if colon > 0 else ""
        routed = _ROUTES.get(head) if head else None
        if routed is None and head.startswith("time="):
            routed = _OLLAMA_ROUTE
        if routed is None:
            wanted: set[int] = set()
            for m in _KEYWORDS.findall(t):
                wanted.update(_HANDLER_OF[m])
            routed = tuple(sorted(wanted))
        for i in routed:
            if self.handlers[i][1](self, line):
                return

    # -- one handler per family of lines; each returns True when the line was its own -----------

    # each handler with the substrings one of which its lines hold: a line is offered only to
    # the handlers it could be for (a cheap test in C before any pattern runs)
    handlers: tuple[tuple[tuple[str, ...], Callable[[Any, Line], bool]], ...] = (
        (("llm_load_print_meta", "print_info", "llama_model_load_internal"), LoadLog.model_meta),
        (("llama_model_loader",), LoadLog.loader),
        (("layers to GPU", "buffer size", "VRAM used"), LoadLog.tensors),
        (("params_fit", "fit_params", "memory_breakdown_print"), LoadLog.fit),
        (
            (
                "eval time",
                "sample time",
                "sampling time",
                "n_decoded",
                "n_gen",
                "new prompt",
                "[0, end)",
                "draft",
                "per pos",
                "LCP similarity",
                "Generation:",
            ),
            ServerLines.timings,
        ),
        (("eval count", "eval duration", "eval rate"), ServerLines.ollama_verbose),
        ((*BY_LOG_KEY, "K (", "Flash Attention"), LoadLog.context),
        (
            (
                "Device ",
                "found ",
                "vulkan",
                "Vulkan",
                "ggml_metal",
                "recommendedMaxWorkingSetSize",
                "using device",
                "|",
            ),
            LoadLog.devices,
        ),
        (("msg=",), ServerLines.ollama_server),
        (("Model metadata",), ServerLines.python_meta),
        (('"eval_count"', '"predicted_n"'), ServerLines.api_json),
        (("% CPU", "% GPU"), ServerLines.ollama_ps),
        (
            (
                "n_threads",
                "build",
                "version:",
                "GPU",
                "load_backend",
                "-ngl",
                "gpu-layers",
                "gpu_layers",
                "-t ",
                "--threads",
                "GGML_SYCL_F16",
                "GGML_SYCL_DISABLE_OPT",
                "GGML_SYCL_ENABLE_OPT",
            ),
            LoadLog.system,
        ),
    )


# One pass over a line finds every keyword of every handler (one pattern of literal words).
_KEYWORD_LIST = sorted({g for guards, _ in _Parser.handlers for g in guards}, key=len, reverse=True)
_KEYWORDS = re.compile("|".join(re.escape(g) for g in _KEYWORD_LIST))
_HANDLER_OF = {g: {i for i, (guards, _) in enumerate(_Parser.handlers) if g in guards} for g in _KEYWORD_LIST}


def _route(*names: str) -> tuple[int, ...]:
    index = {h.__name__: i for i, (_, h) in enumerate(_Parser.handlers)}
    return tuple(sorted(index[n] for n in names))


# The printers whose lines start with their own name: the handlers each one's lines are for
_ROUTES: dict[str, tuple[int, ...]] = {
    **dict.fromkeys(("llm_load_print_meta", "print_info", "llama_model_load_internal"), _route("model_meta", "system")),
    "llama_model_loader": _route("loader"),
    **dict.fromkeys(
        (
            "common_params_fit_impl",
            "llama_params_fit_impl",
            "common_fit_params",
            "llama_params_fit",
            "common_memory_breakdown_print",
            "llama_memory_breakdown_print",
        ),
        _route("fit"),
    ),
    **dict.fromkeys(("llm_load_tensors", "load_tensors"), _route("tensors", "system")),
    **dict.fromkeys(
        ("llama_new_context_with_model", "llama_context", "llama_init_from_model"), _route("context", "tensors")
    ),
    **dict.fromkeys(
        ("llama_kv_cache_init", "llama_kv_cache_unified", "llama_kv_cache", "llama_kv_cache_iswa"),
        _route("tensors", "context"),
    ),
    # the scheduler's reservation: only what `-fa auto` resolved to is read (`Flash Attention ...`)
    **dict.fromkeys(("sched_reserve", "resolve_fused_ops"), _route("context")),
    **dict.fromkeys(
        ("prompt eval count", "prompt eval duration", "prompt eval rate", "eval count", "eval duration", "eval rate"),
        _route("ollama_verbose"),
    ),
    **dict.fromkeys(("llama_print_timings", "llama_perf_context_print", "llama_perf_sampler_print"), _route("timings")),
    **dict.fromkeys(
        ("system_info", "load_backend", "main", "build", "build_info", "version"), _route("system", "devices")
    ),
    **dict.fromkeys(
        (
            "ggml_cuda_init",
            "ggml_init_cublas",
            "ggml_vulkan",
            "ggml_metal_init",
            "ggml_metal_device_init",
            "ggml_init_sycl",
            "ggml_sycl_init",
            "ggml_check_sycl",
            "llama_model_load_from_file_impl",
        ),
        _route("devices", "system"),
    ),
    **dict.fromkeys(
        (
            "slot print_timing",
            "slot update_slots",
            "slot launch_slot_",
            "slot      release",
            "slot   operator()",
            "slot get_availabl",
        ),
        _route("timings", "system"),
    ),
    **dict.fromkeys(
        (
            "load",
            "llm_load_vocab",
            "llama_model_load",
            "sampling",
            "sampler",
            "generate",
            "sampler chain",
            "srv  log_server_r",
            "srv  update_slots",
            "que    start_loop",
            "create_tensor",
            "llama_graph_n_input_tensors",
            "graph_reserve",
            "total duration",
            "load duration",
            "init_tokenizer",
            "set_abort_callback",
        ),
        (),
    ),
}
_OLLAMA_ROUTE = _route("ollama_server", "tensors", "devices", "system")


def parse_lines(lines: Iterable[Line]) -> ParsedLog:
    p = _Parser()
    for line in lines:
        p.feed(line)
    runs = [r for r in p.runs if r.speeds or r.facts or r.devices] or [p.runs[-1]]
    # a server's progress lines are its decode speed where no final timing line came
    for r in runs:
        prog = r.facts.get("server_progress")
        if prog is not None and not any(s.kind == "decode" for s in r.speeds):
            n, tok_s = prog.value
            if n and tok_s:
                r.add_speed(Speed("decode", tok_s, n, prog.line, prog.text, "llama-server progress", depth=n // 2))
    return ParsedLog(runs=runs, formats=p.formats, runs_dropped=p.dropped)


MAX_COMMAND_CHARS = 4096  # a pasted command line read for its settings
FACT_NAMES = tuple(f.name for f in FACTS)


def _argv(command: str) -> list[str]:
    """A pasted command line's words, as a shell splits them (quotes kept together: `-ot "exps=CPU"`),
    or split at spaces where its quoting does not close."""
    try:
        return shlex.split(command)[:512]
    except ValueError:
        return command.split()[:512]

"""The facts and speeds in a log's lines, each kept with the line it came from.

Formats, each recognised by its own lines (old and new spellings of llama.cpp's):
llama-cli / llama-server / llama-cpp-python (`llm_load_print_meta:` and `print_info:`,
`llama_model_loader:`, `load_tensors:`, `llama_context:`, `system_info:`, `llama_print_timings:`
and `llama_perf_context_print:`, the server's `slot print_timing`), llama-bench's markdown
table, Ollama's server log (`msg="inference compute"`, `msg=offload`, `starting llama server`)
and `ollama run --verbose` statistics; device lines of CUDA, ROCm, Vulkan, Metal and SYCL.
A new run starts where a model is loaded again after speeds were seen.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ggprof.llamacpp import N_UBATCH, physical_batch
from ggprof.logs import figures
from ggprof.logs.text import Line
from ggprof.units import clean_name, parse_bytes

MAX_RUNS = 64  # a log with more model loads keeps the last ones
MAX_SPEEDS = 2000  # per run: the rest are counted, not kept
# in all: a judged speed takes 4-10 KB (its verdict, findings, lines, JSON), so earlier runs are left
# out past this many (64 runs of 2,000 took 9 s and 1.1 GB, as JSON 18 s and 2.4 GB)
MAX_SPEEDS_IN_ALL = 4000
MAX_LISTED = 64  # a run's warnings and re-processed prompts kept (the rest counted)
MAX_DEVICES = 16
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


# -- the patterns ---------------------------------------------------------------------------------
_META = re.compile(r"^(?:llm_load_print_meta|print_info|llama_model_load_internal):\s+(\w[\w .]*?)\s*=\s*(.*)$")
_KV = re.compile(r"^llama_model_loader: - kv\s+\d+:\s+(\S+)\s+(\S+)\s+=\s+(.*)$")
_TYPE = re.compile(r"^llama_model_loader: - type\s+(\w+):\s+(\d+) tensors")
_LOADED = re.compile(
    r"^llama_model_loader: loaded meta data with (\d+) key-value pairs and (\d+) tensors from (.+?)(?: \(version .*)?$"
)
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_OFFLOADING = re.compile(r"offloading (\d+) repeating layers to GPU")
_BUFFER = re.compile(r"^(?:llm_)?load_tensors:\s+(\S+?)(?: model)? buffer size =\s+([\d.,]+) MiB")
_KV_BUFFER = re.compile(r"^llama_kv_cache\w*:\s+(\S+) KV buffer size =\s+([\d.,]+) MiB")
_KV_TYPE = re.compile(r"K \((\w+)\):\s+[\d.]+ MiB, V \((\w+)\)")
_CTX = re.compile(
    r"^(?:llama_new_context_with_model|llama_context|llama_init_from_model):\s+(n_ctx|n_batch|n_ubatch|flash_attn|n_ctx_per_seq|n_seq_max)\s+=\s+(\S+)"
)
_THREADS = re.compile(r"system_info: n_threads = (\d+)(?: \(n_threads_batch = (\d+)\))? / (\d+)")
_THREADS2 = re.compile(r"system info: n_threads = (\d+), n_threads_batch = (-?\d+), total_threads = (\d+)")
_THREADS_JSON = re.compile(r'"n_threads":\s*(\d+).*?"total_threads":\s*(\d+)')
_BUILD = re.compile(r"\bbuild(?: =|:) (\d+) \(([0-9a-f]{6,40})\)")
_BUILD_INFO = re.compile(r"^build_info: b(\d+)-([0-9a-f]{6,40})")
_BUILD_BENCH = re.compile(r"^build: ([0-9a-f]{6,40}) \((\d+)\)$")  # llama-bench's: commit first
_VERSION = re.compile(r"^version: (\d+) \(([0-9a-f]{6,40})\)")
_BUILD_JSON = re.compile(r'"build":\s*(\d+),\s*"commit":\s*"([0-9a-f]{6,40})"')
_FOUND = re.compile(r"found (\d+) (CUDA|ROCm|MUSA|SYCL|Vulkan) devices")
_DEVICE = re.compile(
    r"^\s*Device (\d+): (.+?),\s*(?:(gfx\w+) \(0x\w+\)|compute capability ([\d.]+))(?:.*?VRAM: (\d+) MiB)?"
)
_SYCL_F16 = re.compile(r"\bGGML_SYCL_F16:\s*(yes|no)\b")  # a SYCL build's `Build with Macros` (older: ggml_check_sycl)
# a SYCL run's `Running with Environment Variables` block: its reorder optimizations, on by
# `GGML_SYCL_ENABLE_OPT: 1` (current builds) or `GGML_SYCL_DISABLE_OPT: 0` (from February 2025)
_SYCL_OPT = re.compile(r"\bGGML_SYCL_(DISABLE|ENABLE)_OPT:\s*(\d{1,3})\b")
# llama.cpp resolving `-fa auto`: `Flash Attention was auto, set to enabled` (from September 2025),
# later `llama_context: Flash Attention enabled` or `... not supported, set to disabled`
_FA_RESOLVED = re.compile(
    r": Flash Attention (?:(enabled)$|was auto, set to (enabled|disabled)|not supported, set to disabled)"
)
_SYCL_ROW = re.compile(r"^\|\s*(\d+)\|\s*\[([\w]+):(gpu|cpu|acc):\d+\]\|\s*(.+?)\|\s*([\d.]+)\|.*\|\s*(\d+)\|?\s*$")
_VULKAN = re.compile(r"(?:ggml_vulkan: (\d{1,4}) = |Vulkan(\d{1,4}): |ggml_vulkan: Using )(.+?) \| uma: (\d)(.*)$")
_METAL_NAME = re.compile(r"^ggml_metal(?:_device)?_init: (?:found device: |GPU name:\s+)(.+)$")
_METAL_WS = re.compile(r"recommendedMaxWorkingSetSize\s*=\s*([\d.,]+) MB")
# `using device SYCL0 (Intel(R) Arc(TM) A770 Graphics) - 15473 MiB free`: a name may hold one level
# of parentheses (Intel's (R) and (TM), Asahi's `Apple M2 (G14G B0)`, then ` (unknown id)`)
_USING_DEVICE = re.compile(
    r"using device (\w+?)(\d*) \(((?:[^()]|\([^()]*\)){1,200})\)(?: \([^()]{0,80}\))?(?: - (\d+) MiB free)?"
)
_LOAD_BACKEND = re.compile(r"^load_backend: loaded (\w+) backend")
_NO_GPU = re.compile(r"(not compiled with GPU offload support|no usable GPU found)")
_NGL = re.compile(r"(?:(?:^|\s)(?:-ngl|--n-gpu-layers|--gpu-layers)[ =]|\bn_gpu_layers[:=]\s*)(-?\d+)\b")
_THREADS_ARG = re.compile(r"(?:^|\s)(?:-t|--threads)[ =](\d+)\b")
# a speed's figures are whole tokens, checked by ggprof.logs.figures (`1e308`, `-5`, `inf`)
_TIMING = re.compile(
    r"(?:(prompt) )?eval time =\s*(\S+) ms /\s*(\S+) (?:tokens|runs)"
    r"(?:\s*\(\s*\S+ ms per token(?:,\s*(\S+) tokens per second)?)?"
)
_SAMPLE = re.compile(r"(?:sample|sampling) time =\s*([\d.,]+) ms /\s*(\d+) runs")
_PROGRESS = re.compile(r"n_(?:decoded|gen) =\s*(\S+), tg =\s*(\S+) t/s")
_NEW_PROMPT = re.compile(r"new prompt, n_ctx_slot = \d+, n_keep = \d+, (?:n_prompt_tokens|task\.n_tokens) = (\d+)")
_DRAFT = re.compile(
    r"draft acceptance(?: rate)? = ([\d.]+)|(?:^|\s)(?:--model-draft|-md|--spec-type|--draft-max)[ =]\S"
)
_JSON_NUM = r'"{}"\s*:\s*([^\s,}}\]]+)'
_API_FIELDS = {  # a server's answer pasted as JSON: (count, duration, unit in ms) per kind
    "ollama": (("prompt_eval_count", "prompt_eval_duration", 1e-6, ""), ("eval_count", "eval_duration", 1e-6, "")),
    "llama-server": (
        ("prompt_n", "prompt_ms", 1.0, "prompt_per_second"),
        ("predicted_n", "predicted_ms", 1.0, "predicted_per_second"),  # its own rate: n - 1 tokens timed
    ),
}
_LCP = re.compile(r"selected slot by LCP similarity, f_sim_best = ([\d.]+)")
_FULL_RM = re.compile(r"(?:kv cache rm|memory_seq_rm) \[0, end\)")
_OLLAMA = re.compile(
    r"^(prompt eval count|prompt eval duration|prompt eval rate|eval count|eval duration|eval rate):\s+(.+)$"
)
_OLLAMA_KV = re.compile(r'([\w.]+)=("(?:[^"\\]|\\.)*"|\S+)')
_BENCH_SEP = re.compile(r"^\|?\s*:?-{2,}")
_COMMAND = re.compile(
    r"(?:^|[\s/\\$>])(?:main|llama-cli|llama-server|server|llama-bench|llama-llava-cli|llamafile)(?:\.exe)? .*-m "
)
_PY_META = re.compile(r"'([\w.]+)': '([^']*)'")
_OLLAMA_PS = re.compile(r"\b(\d{1,3})%/(\d{1,3})% CPU/GPU\b|\b100% (CPU|GPU)\b")


def vulkan_banner(text: str, line_no: int = 0) -> LogDevice | None:
    """A `ggml_vulkan: 0 = NAME | uma: 0 | fp16: 1 | ... | matrix cores: KHR_coopmat` line (or
    an older build's `Vulkan0: NAME | uma: ...`) as a device; None for any other line."""
    if "uma: " not in text or not (m := _VULKAN.search(text)):
        return None
    rest = m[5]
    cores = re.search(r"matrix cores: (\w+)", rest)
    # `ggml_vulkan: N = NAME (DRIVER)`: the last parenthesis is the driver (RADV's name has its
    # own); an older build's `Vulkan0: NAME (...)` has none, its parenthesis is left off the name too
    name = m[3].strip()
    driver = re.search(r"\s*\(([^()]*)\)$", name)
    return LogDevice(
        int(m[1] or m[2] or 0),
        name[: driver.start()] if driver else name,
        "vulkan",
        line_no,
        text,
        uma=m[4] == "1",
        fp16=_flag(rest, "fp16"),
        int_dot=_flag(rest, "int dot"),
        matrix_cores=cores[1] if cores else None,
        driver=(clean_name(driver[1].strip(), 60) or None) if driver and m[1] is not None else None,
    )


def sycl_f16(text: str) -> bool | None:
    """A SYCL build's `GGML_SYCL_F16: yes|no` line (None for any other line): whether it
    multiplies a prompt's quantized weights in FP16 on the XMX units."""
    m = _SYCL_F16.search(text) if "GGML_SYCL_F16" in text else None
    return m[1] == "yes" if m else None


# how llama.cpp prints a flash-attention setting: 0/1 (its context line before September 2025,
# llama-bench's fa column), then the names of llama_flash_attn_type; `auto` says nothing
_FLASH_ATTN = {"1": True, "enabled": True, "on": True, "true": True, "0": False, "disabled": False, "off": False}


def flash_attn(text: object) -> bool | None:
    """A printed flash-attention setting as on/off (None: `auto`, or anything else)."""
    return _FLASH_ATTN.get(str(text).strip().lower())


def sycl_reorder(text: str) -> bool | None:
    """A SYCL run's `GGML_SYCL_ENABLE_OPT: N` or `GGML_SYCL_DISABLE_OPT: N` line (None for any
    other line): whether it reordered quantized weights for its decode kernels."""
    m = _SYCL_OPT.search(text) if "_OPT" in text else None
    if m is None:
        return None
    return (int(m[2]) != 0) == (m[1] == "ENABLE")


def _flag(text: str, key: str) -> bool | None:
    """A Vulkan device line's `key: 0|1`."""
    v = re.search(rf"{key}: (\d)", text)
    return bool(int(v[1])) if v else None


def _ollama_fields(text: str) -> dict[str, str]:
    return {k: v.strip('"') for k, v in _OLLAMA_KV.findall(text)}


class _Parser:
    def __init__(self) -> None:
        self.runs: list[LogRun] = [LogRun()]
        self.formats: list[str] = []
        self.dropped = 0
        self.backend_of_devices: str | None = None  # the last `found N X devices`
        self.bench_columns: list[str] | None = None
        self.ollama: dict[str, tuple[str, Line]] = {}
        self.last_prefill: Speed | None = None
        self.sample: tuple[float, int] | None = None
        self.task_prompt: int | None = None
        self.similar = 0.0  # the slot's LCP similarity to the task's prompt (llama-server)

    @property
    def run(self) -> LogRun:
        return self.runs[-1]

    def saw(self, fmt: str) -> None:
        if fmt not in self.formats:
            self.formats.append(fmt)

    def new_run_if_measured(self, line: Line) -> None:
        if self.run.speeds:
            self.runs.append(LogRun(first_line=line.number))
            # the new run may keep MAX_SPEEDS: the earliest runs make room (in all MAX_SPEEDS_IN_ALL)
            while len(self.runs) > MAX_RUNS or sum(len(r.speeds) for r in self.runs) > MAX_SPEEDS_IN_ALL - MAX_SPEEDS:
                self.runs.pop(0)
                self.dropped += 1
            self.last_prefill, self.sample, self.task_prompt = None, None, None

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
            self.run.set("command", t[command.start() :].strip()[:300], line)
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
    def model_meta(self, line: Line) -> bool:
        m = _META.match(line.text)
        if not m:
            return False
        if line.text.startswith(("print_info", "llm_load_print_meta")):
            self.new_run_if_measured(line) if m[1] in ("file format", "format") else None
            self.saw("llama.cpp model info")
        key, value = m[1].strip(), m[2].strip()
        r = self.run
        ints = {
            "n_ctx_train": "n_ctx_train",
            "n_embd": "n_embd",
            "n_layer": "n_layers",
            "n_head": "n_heads",
            "n_head_kv": "n_kv_heads",
            "n_embd_head_k": "head_dim_k",
            "n_embd_head_v": "head_dim_v",
            "n_ff": "n_ff",
            "n_expert": "n_experts",
            "n_expert_used": "n_experts_used",
            "n_vocab": "n_vocab",
            "n_ff_exp": "n_ff_exp",
            "n_expert_shared": "n_experts_shared",
            "n_swa": "sliding_window",
            "n_swa_pattern": "swa_pattern",
            "n_embd_k_gqa": "n_embd_k_gqa",
            "n_embd_v_gqa": "n_embd_v_gqa",
            "n_ctx": "n_ctx",
            "n_lora_kv": "kv_lora_rank",
            "n_rot": "n_rot",
        }
        if key in ints:
            if value.startswith("["):  # a value per layer: the largest
                items = [count(v) for v in value.strip("[]").split(",")[:4096]]
                vals = [v for v in items if v is not None]
                r.set(ints[key], max(vals) if vals else None, line)
                if key == "n_head_kv" and vals:
                    r.set("kv_heads_per_layer", tuple(vals), line)
            else:
                r.set(ints[key], count(value.split()[0]) if value else None, line)
        elif key == "arch":
            r.set("architecture", value[:40], line)
        elif key in ("model ftype", "file type", "ftype"):
            r.set("quant", re.sub(r"^\d+ \((?:mostly )?(.*)\)$", r"\1", value).removeprefix("mostly ")[:40], line)
        elif key == "model params":
            r.set("model_params", params_of(value), line)
        elif key in ("model size", "file size"):
            if re.search(r"[KMGT]i?B\b", value.split("(")[0]) and bytes_of(value) is not None:
                r.set("model_size_bytes", bytes_of(value), line)
            elif re.fullmatch(r"\d+[BM]", value):  # ggjt's `model size = 7B`: the model's type
                r.set("model_type", value, line)
            else:  # old llama.cpp printed the parameter count as the "model size"
                r.set("model_params", params_of(value), line)
        elif key == "model type":
            r.set("model_type", value[:40], line)
        elif key == "general.name":
            r.set("model_name", value[:120], line)
        return True

    def loader(self, line: Line) -> bool:
        t = line.text
        if not t.startswith("llama_model_loader:"):
            return False
        self.saw("llama.cpp model loader")
        r = self.run
        if m := _LOADED.match(t):
            r.set("n_tensors", count(m[2]), line)
            r.set("model_file", re.split(r"[\\/]", m[3].strip())[-1][:200], line)
        elif m := _TYPE.match(t):
            n = count(m[2])
            if n is not None and len(r.type_counts) < 64:
                r.type_counts[m[1].upper()] = r.type_counts.get(m[1].upper(), 0) + n
        elif m := _KV.match(t):
            key, kind, value = m[1], m[2], m[3].strip()
            arch = r.value("architecture") or (value if key == "general.architecture" else None)
            if arch is None and key.endswith((".block_count", ".embedding_length")) and "." in key:
                arch = key.split(".", 1)[0][:40]  # the excerpt starts after `general.architecture`
                r.set("architecture", arch, line)
            if key == "general.architecture":
                r.setdefault("architecture", value[:40], line)
            elif key == "general.name":
                r.setdefault("model_name", value[:120], line)
            elif key == "general.file_type":
                r.setdefault("file_type", count(value), line)
            elif key == "tokenizer.ggml.tokens" and (v := re.search(r"arr\[\w+,\s*(\d+)\]", kind)):
                r.setdefault("n_vocab", count(v[1]), line)
            elif arch and key.startswith(arch + "."):
                short = key[len(arch) + 1 :]
                names = {
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
                if short in names and kind in ("u32", "i32", "u64", "i64", "u16"):
                    r.setdefault(names[short], count(value), line)
        return True

    def tensors(self, line: Line) -> bool:
        t = line.text
        if "layers to GPU" not in t and "buffer size" not in t and "VRAM used" not in t:
            return False
        r = self.run
        self.saw("llama.cpp load_tensors")
        if m := _OFFLOADED.search(t):
            r.set("layers_offloaded", count(m[1]), line)
            r.set("layers_total", count(m[2]), line)
        elif m := _OFFLOADING.search(t):
            r.setdefault("layers_offloaded", count(m[1]), line)
        elif m := _BUFFER.match(t):
            b = num(m[2])
            if b is not None and len(r.model_buffers) < 32:
                name = m[1][:32]
                have = r.model_buffers[name].value if name in r.model_buffers else 0  # a buffer type twice: both
                r.model_buffers[name] = Fact(have + int(b * (1 << 20)), line.number, line.text)
        elif m := _KV_BUFFER.match(t):
            b = num(m[2])
            if b is not None and len(r.kv_buffers) < 32:  # a sliding-window model has two caches: both
                name = m[1][:32]
                have = r.kv_buffers[name].value if name in r.kv_buffers else 0
                r.kv_buffers[name] = Fact(have + int(b * (1 << 20)), line.number, line.text)
        else:
            return False
        return True

    def context(self, line: Line) -> bool:
        t = line.text
        if m := _CTX.match(t):
            self.saw("llama.cpp context")
            key = {"n_ctx": "n_ctx", "n_batch": "n_batch", "n_ubatch": "n_ubatch", "flash_attn": "flash_attn"}
            if m[1] in key:
                self.run.set(key[m[1]], m[2][:16] if m[1] == "flash_attn" else count(m[2]), line)
            return True
        if m := _KV_TYPE.search(t):
            self.run.set("cache_type_k", m[1].lower(), line)
            self.run.set("cache_type_v", m[2].lower(), line)
            return True
        if "Flash Attention" in t and (m := _FA_RESOLVED.search(t)):  # what `flash_attn = auto` became
            if self.run.value("flash_attn") in (None, "auto"):  # the first context's (a draft model's is later)
                self.run.set("flash_attn", "enabled" if m[1] or m[2] == "enabled" else "disabled", line)
            return True
        return False

    def system(self, line: Line) -> bool:
        t, r = line.text, self.run
        threads = "n_threads" in t
        if threads and (m := _THREADS.search(t) or _THREADS2.search(t)):
            r.set("threads", count(m[1]), line)
            r.set("threads_batch", count(m[2]) if m[2] and not m[2].startswith("-") else None, line)
            r.set("hardware_threads", count(m[3]), line)
            flags = re.findall(r"\b([A-Z][A-Z0-9_]+) = 1\b", t)
            r.set("cpu_flags", tuple(flags[:64]), line)
            compiled = [
                b.lower() for b in re.findall(r"\| (CUDA|Metal|Vulkan|ROCm|HIP|SYCL|MUSA|BLAS|RPC|OPENCL|CANN) : ", t)
            ]
            if compiled:
                r.set("backends_compiled", tuple(compiled), line)
            return True
        if threads and (m := _THREADS_JSON.search(t)):
            r.set("threads", count(m[1]), line)
            r.set("hardware_threads", count(m[2]), line)
        if ("build" in t or "version" in t) and (
            m := _BUILD.search(t) or _BUILD_INFO.match(t) or _VERSION.match(t) or _BUILD_JSON.search(t)
        ):
            r.set("build", f"b{m[1]} ({m[2]})", line)
            return True
        if (f16 := sycl_f16(t)) is not None:
            r.set("sycl_f16", f16, line)
            return True
        if (reorder := sycl_reorder(t)) is not None:
            r.set("sycl_reorder", reorder, line)
            return True
        if t.startswith("build: ") and (m := _BUILD_BENCH.match(t)):
            r.set("build", f"b{m[2]} ({m[1]})", line)
            return True
        if "using ROCm for GPU acceleration" in t or "using CUDA for GPU acceleration" in t:
            r.set("backend_named", "rocm" if "ROCm" in t else "cuda", line)
            return True
        if "GPU" in t and (m := _NO_GPU.search(t)):
            if len(r.warnings) < MAX_LISTED:
                r.warnings.append(Fact(m[1], line.number, t))
            return True
        if t.startswith("load_backend") and (m := _LOAD_BACKEND.match(t)):
            have = r.value("backends_loaded") or ()
            r.set("backends_loaded", (*have, m[1].lower())[:16], line)
            return True
        if ("ngl" in t or "gpu-layers" in t or "gpu_layers" in t) and (m := _NGL.search(t)):
            r.set("n_gpu_layers_requested", int(m[1]), line)
        if ("-t" in t or "--threads" in t) and (m := _THREADS_ARG.search(t)):
            r.setdefault("threads", count(m[1]), line)
        return False

    def devices(self, line: Line) -> bool:
        t, r = line.text, self.run
        if "found " in t and (m := _FOUND.search(t)):
            self.backend_of_devices = {
                "ROCm": "rocm",
                "CUDA": "cuda",
                "MUSA": "musa",
                "SYCL": "sycl",
                "Vulkan": "vulkan",
            }[m[2]]
            self.saw(f"{m[2]} devices")
            return True
        if "Device " in t and (m := _DEVICE.match(t)):
            backend = self.backend_of_devices or "cuda"
            vram = count(m[5])
            self._device(
                LogDevice(
                    int(m[1]),
                    m[2].strip(),
                    backend,
                    line.number,
                    t,
                    memory_bytes=vram << 20 if vram else None,
                    compute=m[3] or m[4],
                )
            )
            return True
        if t.startswith("|") and (m := _SYCL_ROW.match(t)):
            if m[3] == "gpu":
                mem = int(m[6]) if len(m[6]) < 16 and int(m[6]) < MAX_BYTES else None
                self._device(LogDevice(int(m[1]), m[4].strip(), "sycl", line.number, t, memory_bytes=mem, compute=m[5]))
            return True
        if device := vulkan_banner(t, line.number):
            self._device(device)
            self.saw("Vulkan devices")
            return True
        if t.startswith("ggml_metal") and (m := _METAL_NAME.match(t)):
            self._device(LogDevice(0, m[1].strip(), "metal", line.number, t, uma=True))
            self.saw("Metal device")
            return True
        if "recommendedMax" in t and (m := _METAL_WS.search(t)):
            ws = num(m[1])
            r.set("metal_working_set_bytes", int(ws * 1e6) if ws else None, line)
            return True
        if "using device" in t and (m := _USING_DEVICE.search(t)):
            used = {"cuda": "cuda", "rocm": "rocm", "vulkan": "vulkan", "metal": "metal", "sycl": "sycl"}.get(
                m[1].lower()
            )
            if used and not any(d.name == m[3] for d in r.devices):
                free = count(m[4])
                self._device(
                    LogDevice(int(m[2] or 0), m[3], used, line.number, t, memory_bytes=free << 20 if free else None)
                )
            return True
        return False

    def _device(self, d: LogDevice) -> None:
        devices = self.run.devices
        if any(x.index == d.index and x.backend == d.backend for x in devices):
            devices[:] = [x for x in devices if not (x.index == d.index and x.backend == d.backend)]
        if len(devices) < MAX_DEVICES:
            devices.append(d)

    def ollama_server(self, line: Line) -> bool:
        t = line.text
        if "msg=" not in t:
            return False
        r = self.run
        if 'msg="inference compute"' in t:
            self.saw("Ollama server log")
            f = _ollama_fields(t)
            library = f.get("library", "").lower()
            backend = {
                "cuda": "cuda",
                "rocm": "rocm",
                "metal": "metal",
                "vulkan": "vulkan",
                "oneapi": "sycl",
                "cpu": "cpu",
            }.get(library)
            name = f.get("description") or f.get("name") or ""
            if backend and backend != "cpu" and name:
                self._device(
                    LogDevice(
                        len(r.devices),
                        name[:120],
                        backend,
                        line.number,
                        t,
                        memory_bytes=bytes_of(f.get("total", "")),
                        compute=f.get("compute"),
                    )
                )
            return True
        if re.search(r"msg=\"?offload\b", t):
            self.saw("Ollama server log")
            f = _ollama_fields(t)
            r.set("layers_offloaded", count(f.get("layers.offload")), line)
            r.set("layers_total", count(f.get("layers.model")), line)
            req = f.get("memory.required.full")
            avail = f.get("memory.available", "").strip("[]").split(",")[0]
            r.set("ollama_required_full_bytes", bytes_of(req) if req else None, line)
            r.set("ollama_available_bytes", bytes_of(avail) if avail else None, line)
            library = f.get("library", "").lower()
            if library in ("cuda", "rocm", "metal", "vulkan"):
                r.set("backend_named", library, line)
            return True
        if 'msg="model weights"' in t:
            f = _ollama_fields(t)
            size, name = bytes_of(f.get("size", "")), f.get("buffer", "")[:32]
            if size is not None and name and len(r.model_buffers) < 32:
                have = r.model_buffers[name].value if name in r.model_buffers else 0
                r.model_buffers[name] = Fact(have + size, line.number, t)
            return True
        if 'msg="starting llama server"' in t:
            self.saw("Ollama server log")
            cmd = _ollama_fields(t).get("cmd", "")
            if m := re.search(r"--n-gpu-layers (\d+)", cmd):
                r.set("n_gpu_layers_requested", int(m[1]), line)
            if m := re.search(r"--threads (\d+)", cmd):
                r.set("threads", count(m[1]), line)
            if m := re.search(r"--ctx-size (\d+)", cmd):
                r.set("n_ctx", count(m[1]), line)
            return True
        return False

    def timings(self, line: Line) -> bool:
        t, r = line.text, self.run
        if "ampl" in t and (m := _SAMPLE.search(t)):
            ms = num(m[1])
            self.sample = (ms, count(m[2]) or 0) if ms is not None else None
            return True
        if "new prompt" in t and (m := _NEW_PROMPT.search(t)):
            self.task_prompt = count(m[1])
            return True
        if "draft" in t and (m := _DRAFT.search(t)):
            r.setdefault(
                "speculative", f"draft acceptance {m[1]}" if m[1] else "a draft model or speculative type", line
            )
            return not t.lstrip().startswith(("llama-", "./", "$"))
        if "LCP similarity" in t and (m := _LCP.search(t)):
            self.similar = num(m[1]) or 0.0
            return True
        if "[0, end)" in t and _FULL_RM.search(t):
            if (self.task_prompt or 0) >= REPROCESS_MIN_TOKENS:
                r.add_reprocess(Fact((self.task_prompt, "from 0"), line.number, t))
            return True
        m = _TIMING.search(t) if "eval time" in t else None
        if m is None:
            if " tg =" in t and (p := _PROGRESS.search(t)) and len(r.speeds) < MAX_SPEEDS:
                n_decoded = figures.tokens(p[1], line)
                tg = figures.speed(p[2], line, "a decode speed") if n_decoded else None
                if n_decoded and tg:
                    r.set("server_progress", (n_decoded, tg), line)
                return True
            return False
        source = (
            "llama-server"
            if not t.startswith(("llama_print_timings", "llama_perf_context_print"))
            else "llama.cpp timings"
        )
        self.saw(source)
        tok_s, n = _timed(line, m[3], m[2], 1.0, m[4])
        if tok_s is None:
            return True
        ms = figures.duration_ms(m[2], line)
        if m[1]:
            s = Speed("prefill", tok_s, n, line.number, t, source, depth=0, eval_ms=ms)
            self.last_prefill = s
            # a prompt the slot had (nearly) whole, evaluated again from its start: the cache not reused
            if self.similar >= SIMILAR_PROMPT and n >= REPROCESS_MIN_TOKENS:
                r.add_reprocess(Fact((n, "similar"), line.number, t))
            self.similar = 0.0
        else:
            before = self.task_prompt or (self.last_prefill.n_tokens if self.last_prefill else 0) or 0
            sample_ms = self.sample[0] if self.sample else None
            s = Speed(
                "decode", tok_s, n, line.number, t, source, depth=before + n // 2, sample_ms=sample_ms, eval_ms=ms
            )
            self.last_prefill, self.sample, self.task_prompt = None, None, None
        r.add_speed(s)
        return True

    def ollama_verbose(self, line: Line) -> bool:
        m = _OLLAMA.match(line.text)
        if not m:
            return False
        self.saw("ollama --verbose")
        key, value = m[1], m[2].strip().strip("*").strip()
        self.ollama[key] = (value, line)
        if key.endswith("rate"):
            prefix = "prompt eval" if key.startswith("prompt") else "eval"
            printed = value.split()[0] if value.split() else ""
            n_text = (self.ollama.get(f"{prefix} count", ("", line))[0].split() or [""])[0]
            duration = self.ollama.get(f"{prefix} duration", ("", line))[0]
            n = figures.tokens(n_text, line) if n_text else None
            ms = go_duration_ms(duration)
            tok_s = figures.rate(line, n, ms, printed) if n else None
            if tok_s is not None and n:
                if prefix == "prompt eval":
                    s = Speed("prefill", tok_s, n, line.number, line.text, "ollama --verbose", eval_ms=ms)
                    self.last_prefill = s
                else:
                    before = self.last_prefill.n_tokens if self.last_prefill else 0
                    s = Speed(
                        "decode",
                        tok_s,
                        n,
                        line.number,
                        line.text,
                        "ollama --verbose",
                        depth=(before or 0) + n // 2,
                        eval_ms=ms,
                    )
                    self.last_prefill = None
                self.run.add_speed(s)
            for k in [k for k in self.ollama if k.startswith(prefix)]:
                del self.ollama[k]
        return True

    def python_meta(self, line: Line) -> bool:
        """llama-cpp-python's `Model metadata: {'general.architecture': 'llama', ...}`."""
        if not line.text.startswith("Model metadata: {"):
            return False
        self.saw("llama-cpp-python metadata")
        pairs = dict(_PY_META.findall(line.text[:MAX_PY_META_CHARS]))
        r = self.run
        arch = pairs.get("general.architecture")
        if arch:
            r.setdefault("architecture", arch[:40], line)
            names = {
                "context_length": "n_ctx_train",
                "embedding_length": "n_embd",
                "block_count": "n_layers",
                "feed_forward_length": "n_ff",
                "attention.head_count": "n_heads",
                "attention.head_count_kv": "n_kv_heads",
                "expert_count": "n_experts",
                "expert_used_count": "n_experts_used",
            }
            for short, key in names.items():
                r.setdefault(key, count(pairs.get(f"{arch}.{short}")), line)
        if "general.name" in pairs:
            r.setdefault("model_name", pairs["general.name"][:120], line)
        ft = count(pairs.get("general.file_type"))
        if ft is not None:
            r.setdefault("file_type", ft, line)
        return True

    def api_json(self, line: Line) -> bool:
        """An Ollama /api/generate final object, or llama-server's `timings`, pasted as JSON."""
        t = line.text
        for api, kinds in _API_FIELDS.items():
            for kind, (n_key, ms_key, unit, rate_key) in zip(_KINDS, kinds, strict=True):
                n_m = re.search(_JSON_NUM.format(n_key), t)
                ms_m = re.search(_JSON_NUM.format(ms_key), t)
                if not n_m or not ms_m:
                    continue
                printed = re.search(_JSON_NUM.format(rate_key), t) if rate_key else None
                rate_text = printed[1] if printed and printed[1] != "null" else None  # llama.cpp's JSON of nan
                tok_s, n = _timed(line, n_m[1], ms_m[1], unit, rate_text)
                if tok_s is None or not n:
                    continue
                self.saw(f"{api} answer (JSON)")
                before = self.last_prefill.n_tokens if self.last_prefill and kind == "decode" else 0
                s = Speed(
                    kind,
                    tok_s,
                    n,
                    line.number,
                    t,
                    f"{api} answer",
                    depth=(before or 0) + (n // 2 if kind == "decode" else 0),
                )
                self.last_prefill = s if kind == "prefill" else None
                self.run.add_speed(s)
        return False

    def ollama_ps(self, line: Line) -> bool:
        m = _OLLAMA_PS.search(line.text)
        if not m:
            return False
        cpu = int(m[1]) if m[1] else (100 if m[3] == "CPU" else 0)
        have = self.run.value("ollama_cpu_percent")
        if have is None or cpu > have:
            self.run.set("ollama_cpu_percent", cpu, line)
        return True

    # each handler with the substrings one of which its lines hold: a line is offered only to
    # the handlers it could be for (a cheap test in C before any pattern runs)
    handlers: tuple[tuple[tuple[str, ...], Callable[[_Parser, Line], bool]], ...] = (
        (("llm_load_print_meta", "print_info", "llama_model_load_internal"), model_meta),
        (("llama_model_loader",), loader),
        (("layers to GPU", "buffer size", "VRAM used"), tensors),
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
                "LCP similarity",
            ),
            timings,
        ),
        (("eval count", "eval duration", "eval rate"), ollama_verbose),
        (("n_ctx", "n_batch", "n_ubatch", "flash_attn", "K (", "Flash Attention"), context),
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
            devices,
        ),
        (("msg=",), ollama_server),
        (("Model metadata",), python_meta),
        (('"eval_count"', '"predicted_n"'), api_json),
        (("% CPU", "% GPU"), ollama_ps),
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
            system,
        ),
    )

    # -- llama-bench's markdown table -----------------------------------------------------------
    def _bench_header(self, text: str) -> bool:
        cells = [c.strip().lower() for c in text.strip().strip("|").split("|")]
        if "model" not in cells or "test" not in cells or not any(c.startswith("t/s") for c in cells):
            return False
        self.bench_columns = cells
        self.saw("llama-bench table")
        return True

    def _bench_row(self, line: Line) -> bool:
        t = line.text.strip()
        if _BENCH_SEP.match(t):
            return True
        cells = [c.strip() for c in t.strip("|").split("|")]
        cols = self.bench_columns or []
        if len(cells) != len(cols):
            return False
        row = dict(zip(cols, cells, strict=True))
        test = row.get("test", "").replace(" ", "")
        m = re.fullmatch(r"(pp|tg)(\d+)(?:@d(\d+))?", test)
        ts_key = next(c for c in cols if c.startswith("t/s"))
        if not m:
            return True  # a test that is neither a prompt nor a decode (pp512+tg128)
        ts = re.match(r"(\S+)\s*(?:±\s*(\S+))?", row.get(ts_key, ""))
        tok_s = figures.speed(ts[1], line, f"{test}'s speed") if ts else None
        if tok_s is None:
            return True  # no number in its t/s cell
        sd = figures.number(ts[2]) if ts and ts[2] else None
        if sd is not None and not (math.isfinite(sd) and sd >= 0):
            raise figures.BadFigure(line, f"{test}'s spread of {ts[2] if ts else ''} t/s is no spread")
        r = self.run
        r.setdefault("model_desc", row.get("model", "")[:80], line)
        if re.fullmatch(r"[a-z][a-z0-9_.-]{1,30}", arch := row.get("model", "").split(" ")[0]):
            r.setdefault("architecture", arch, line)  # llama-bench's model column starts with it
        if (size := bytes_of(row.get("size", ""))) is not None:
            r.setdefault("model_size_bytes", size, line)
        if (params := params_of(row.get("params", ""))) is not None:
            r.setdefault("model_params", params, line)
        quant = re.sub(r"^\S+ [\d.x]+[BMK]\S* ", "", row.get("model", ""))
        if quant and quant != row.get("model"):
            r.setdefault("quant", quant[:40], line)
        backend = row.get("backend", "").split(",")[0].strip().lower() or None
        ngl = count(row.get("ngl")) if row.get("ngl") else None
        if (threads := count(row.get("threads"))) is not None:
            r.setdefault("threads", threads, line)
        n = count(m[2])
        kind: Kind = "prefill" if m[1] == "pp" else "decode"
        r.add_speed(
            Speed(
                kind,
                tok_s,
                n,
                line.number,
                line.text,
                "llama-bench",
                depth=count(m[3]) or 0,
                cv=sd / tok_s if sd is not None else None,
                backend=backend,
                n_gpu_layers=ngl,
                n_prompt=n if kind == "prefill" else None,
                flash_attn=flash_attn(row["fa"]) if "fa" in row else None,
                n_ubatch=_table_ubatch(row),
            )
        )
        return True


def _table_ubatch(row: dict[str, str]) -> int | None:
    """A llama-bench table row's physical batch: its n_ubatch column, at most its n_batch one;
    llama-bench prints them only where they are not its defaults (-b 2048, -ub 512)."""
    ub = count(row["n_ubatch"]) if "n_ubatch" in row else N_UBATCH
    b = count(row["n_batch"]) if "n_batch" in row else None
    return physical_batch(ub, b)


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

"""The run facts, one row each (ggprof.runfacts): llama-bench's and every program's settings,
then a server's own."""

from __future__ import annotations

from collections.abc import Mapping

from ggprof.llamacpp import CACHE_TYPE, GGML_MAX_N_THREADS, N_BATCH, N_UBATCH
from ggprof.runfacts.fact import FLASH_ATTN_TYPES, MAX_COUNT, MAX_SPLIT_DEVICES, RunFact

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
        log_keys=("n_batch",),
        low=1,
    ),
    RunFact(
        name="n_ubatch",
        what="physical batch",
        unit="tokens",
        kind="count",
        default=N_UBATCH,
        flags=("-ub", "--ubatch-size"),
        log_keys=("n_ubatch",),
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
        log_keys=("flash_attn",),
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
        what="split mode (how several GPUs share the model)",
        unit="",
        kind="type",
        default="layer",
        flags=("-sm", "--split-mode"),
        column="sm",
        values=("none", "layer", "row", "tensor"),  # llama.h's llama_split_mode (tensor: 2026 builds)
        placement=True,
        multi_device=True,
    ),
    RunFact(
        name="main_gpu",
        what="main GPU (the one -sm none uses)",
        unit="",
        kind="count",
        default=0,
        flags=("-mg", "--main-gpu"),
        low=-1,  # -1: no GPU with -sm none (llama.cpp's llama_prepare_model_devices)
        high=MAX_SPLIT_DEVICES - 1,
        placement=True,
        multi_device=True,
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
    # where the draft model's weights live: its own -ngl, -ncmoe and -dev (llama-server --help)
    RunFact(
        name="spec_draft_ngl",
        what="draft model layers offloaded",
        unit="layers",
        kind="count",
        default=-1,  # auto: every layer that fits
        flags=("-ngld", "--spec-draft-ngl", "--gpu-layers-draft", "--n-gpu-layers-draft"),
        low=-1,
        drafting=True,
        bench=False,
    ),
    RunFact(
        name="spec_draft_ncmoe",
        what="draft model layers whose experts stay in RAM",
        unit="layers",
        kind="count",
        default=0,
        flags=("-ncmoed", "--spec-draft-ncmoe", "--spec-draft-n-cpu-moe", "--n-cpu-moe-draft"),
        set_by={"-cmoed": MAX_COUNT, "--spec-draft-cpu-moe": MAX_COUNT, "--cpu-moe-draft": MAX_COUNT},
        drafting=True,
        bench=False,
    ),
    RunFact(
        name="spec_draft_device",
        what="draft model devices",
        unit="",
        kind="devices",
        default=(),  # the target's (-dev); `none`: the draft in RAM
        flags=("-devd", "--spec-draft-device", "--device-draft"),
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
        placement=True,
        multi_device=True,
    ),
    RunFact(
        name="devices",
        what="devices",
        unit="",
        kind="devices",
        default=(),  # auto: every GPU llama.cpp finds (RPC servers first)
        flags=("-dev", "--device"),
        column="dev",
        placement=True,
        multi_device=True,
    ),
    # llama.cpp's --fit (common/fit.cpp): where no -ngl, -ts or -ot is given it chooses them itself,
    # leaving --fit-target MiB free on each device; llama-bench fits only when -fitt or -fitc is
    # given (its JSON's fit_target 0: not fitted)
    RunFact(
        name="fit",
        what="placement fitted to the devices' free memory (llama.cpp's --fit)",
        unit="",
        kind="switch",
        default="on",  # llama-server and llama-cli; llama-bench: off unless -fitt or -fitc
        flags=("-fit", "--fit"),
        values=("on", "off"),
        bench=False,
    ),
    RunFact(
        name="fit_target",
        what="MiB --fit leaves free on each device",
        unit="MiB",
        kind="count",
        default=0,  # llama-bench's: not fitted (llama-server's --fit: FIT_TARGET_MIB)
        flags=("-fitt", "--fit-target"),
        column="fitt",
        bench=False,  # read from llama-bench's JSON, never passed to it: a replay keeps what it read
    ),
    RunFact(
        name="fit_min_ctx",
        what="least context --fit may cut an unset -c to",
        unit="tokens",
        kind="count",
        default=0,  # llama-bench's: not fitted (llama-server's --fit: FIT_MIN_CTX)
        flags=("-fitc", "--fit-ctx"),
        column="fitc",
        bench=False,
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
        log_keys=("n_ctx",),
        bench=False,
    ),
    RunFact(
        name="n_slots",
        what="slots",
        unit="slots",
        kind="count",
        default=-1,  # auto: 4, their KV cache unified
        flags=("-np", "--parallel"),
        log_keys=("n_seq_max",),  # the sequences the context holds: llama-server's slots
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
        log_keys=("n_ctx_seq", "n_ctx_per_seq"),  # the second before October 2025
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
        log_keys=("kv_unified",),
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
MULTI_DEVICE = tuple(f.name for f in FACTS if f.multi_device)  # how the devices share the model
BY_HEAD: Mapping[str, RunFact] = {f.head: f for f in FACTS}
SAMPLING = tuple(f.name for f in FACTS if f.sampling)  # the sampler chain and its parameters
BENCH = tuple(f.name for f in FACTS if f.bench)  # what llama-bench takes
# the load log's `llama_context: KEY = VALUE` lines, by key
BY_LOG_KEY: Mapping[str, RunFact] = {k: f for f in FACTS for k in f.log_keys}

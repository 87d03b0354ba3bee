"""A model's speed-relevant shape from what a log prints about it, when the file is not at hand.

llama.cpp prints the architecture (layers, width, heads, KV heads, FFN, experts, vocabulary),
the parameter count, the file size and type, and how many tensors of each type. From these
the tensor table is laid out as llama.cpp lays out its llama-style models
(ggprof.model.layout) and the file's bytes distributed over it: the embedding at the file's
average bytes per weight, the blocks sharing the rest in proportion to their weights. What a
log leaves out is named, and what it costs: the embedding's own type (a log prints the count
of tensors per type, not which tensor has which) and whether the output layer shares the
embedding (tied) are the two unknowns of the bytes a token reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ggprof.logs.records import LogRun
from ggprof.model.ggml import FILE_TYPES, GGML_TYPES_BY_NAME, GGMLType
from ggprof.model.layout import LlamaDims, llama_tensors
from ggprof.model.spec import ModelSpec, SwaDefault, TensorSpec

# Architectures whose output layer is the embedding (llama.cpp's llama-model.cpp loads no
# output.weight for them): the LM head reads the whole embedding every token.
TIED_ARCHS = ("gemma", "gemma2", "gemma3", "gemma3n", "gemma-embedding")
# Without a tensor count that settles it, a model whose embedding is more than this share of
# its weights is taken as tied (small models tie: Llama 3.2 1B/3B, Qwen2.5 0.5B-3B, Gemma);
# the other reading is the estimate's uncertainty.
TIED_SHARE = 0.10
# The embedding's type is not printed: it is taken at the file's average bytes per weight,
# and may be from half to twice that (Q6_K or F16 embeddings beside Q4 blocks, or the reverse).
EMBD_TYPE_RANGE = (0.5, 2.0)
SIZE_FROM_PARAMS_UNCERTAINTY = 0.10  # a size computed from parameters and the nominal type
# A mixture of experts reads a fraction of its weights per token: judged as dense, an honest run
# would look impossible. Where the log shows experts but not their width, or names a MoE
# architecture or type (`8x7B`, `30B.A3B`) without the expert lines, nothing is judged.
MOE_ARCHS = (
    "qwen2moe",
    "qwen3moe",
    "deepseek",
    "deepseek2",
    "mixtral",
    "gpt-oss",
    "llama4",
    "granitemoe",
    "olmoe",
    "dbrx",
    "arctic",
    "grok",
    "bailingmoe",
    "dots1",
    "glm4moe",
    "ernie4_5-moe",
    "hunyuan-moe",
    "phimoe",
)
_MOE_TYPE = re.compile(r"\d+x\d+(?:\.\d+)?[BM]|\bA\d+(?:\.\d+)?B\b|moe|mixtral|8x7b|8x22b", re.IGNORECASE)
MAX_LAYERS = 1024
MAX_WIDTH = 1 << 17
MAX_VOCAB = 1 << 22


@dataclass(frozen=True)
class LogModel:
    spec: ModelSpec | None
    source: str  # "the log" or the model file's name
    decode_bytes_range: tuple[int, int] | None  # what the unknowns allow
    missing: tuple[str, ...]  # what the log leaves out, and what that costs
    assumptions: tuple[str, ...]

    @property
    def uncertainty(self) -> float:
        """Half the width of the decode bytes' range, relative to the estimate."""
        if self.spec is None or self.decode_bytes_range is None:
            return 0.0
        lo, hi = self.decode_bytes_range
        return (hi - lo) / 2 / max(self.spec.decode_bytes_per_token, 1)


def ggml_type_of(quant: str | None) -> GGMLType | None:
    """The weights' main type from a printed file type: `Q4_K - Medium`, `Q4_0`, `mostly Q4_1`."""
    if not quant:
        return None
    m = re.match(r"(?:mostly )?([A-Za-z0-9_]+)", quant.strip())
    if not m:
        return None
    name = m[1].lower()
    for key in (
        name,
        re.sub(r"_[sml]$", "", name),
        name.split("_")[0] + "_" + name.split("_")[1] if "_" in name else name,
    ):
        if key in GGML_TYPES_BY_NAME:
            return GGML_TYPES_BY_NAME[key]
    return None


def _main_type(run: LogRun) -> GGMLType | None:
    counts = {k.lower(): v for k, v in run.type_counts.items() if k.lower() not in ("f32",)}
    if counts:
        name = max(counts, key=lambda k: counts[k])
        if name in GGML_TYPES_BY_NAME:
            return GGML_TYPES_BY_NAME[name]
    quant = run.value("quant") or (
        FILE_TYPES.get(run.value("file_type")) if run.value("file_type") is not None else None
    )
    return ggml_type_of(quant)


def _bound(v: object, top: int) -> int | None:
    return v if isinstance(v, int) and 0 < v <= top else None


def model_from_log(run: LogRun, name: str, swa_default: SwaDefault | None = None) -> LogModel:
    """The estimate; `spec` is None (with the reason in `missing`) where the log gives no size."""
    missing: list[str] = []
    assumptions: list[str] = []
    n_layers = _bound(run.value("n_layers"), MAX_LAYERS)
    n_embd = _bound(run.value("n_embd"), MAX_WIDTH)
    n_heads = _bound(run.value("n_heads"), MAX_WIDTH)
    n_vocab = _bound(run.value("n_vocab"), MAX_VOCAB)
    params = run.value("model_params")
    size = run.value("model_size_bytes")
    wtype = _main_type(run)
    quant = run.value("quant") or (
        FILE_TYPES.get(run.value("file_type")) if run.value("file_type") is not None else None
    )
    size_uncertainty = 0.0
    shaped = n_layers is not None and n_embd is not None and n_heads is not None
    n_kv = _bound(run.value("n_kv_heads"), MAX_WIDTH) or n_heads
    head_k = _bound(run.value("head_dim_k"), 1 << 14) or ((n_embd or 0) // n_heads if shaped and n_heads else 0)
    head_v = _bound(run.value("head_dim_v"), 1 << 14) or head_k
    n_experts = run.value("n_experts") or 0
    n_used = run.value("n_experts_used") or (1 if n_experts else 0)
    n_ff = _bound(run.value("n_ff"), 1 << 20)
    n_ff_exp = _bound(run.value("n_ff_exp"), 1 << 20)
    arch = run.value("architecture") or "unknown"
    if n_experts and not n_ff_exp and arch == "llama" and n_ff:
        # llama.cpp's llama architecture with experts (Mixtral) has no expert width of its own:
        # feed_forward_length is each expert's
        n_ff_exp = n_ff
        assumptions.append(f"each expert's FFN width is feed_forward_length {n_ff:,} (the llama architecture's MoE)")
    named = " ".join(str(run.value(k) or "") for k in ("model_type", "model_desc", "model_name", "model_file"))
    experts_known = run.value("n_experts") is not None
    moe_named = arch.startswith(MOE_ARCHS) or bool(_MOE_TYPE.search(named)) or n_ff_exp is not None
    if (n_experts and not n_ff_exp) or (not experts_known and moe_named):
        missing.append(
            "how many of the experts' weights a token reads (a mixture of experts; the log does not print "
            "n_expert, n_expert_used and n_ff_exp): give the model file to judge it"
        )
        return LogModel(None, "the log", None, tuple(missing), tuple(assumptions))
    if not experts_known and arch == "unknown" and not run.value("model_desc"):
        missing.append(
            "the architecture, so whether it is a mixture of experts (which reads a fraction of its weights "
            "a token): nothing is judged against a dense ceiling that may be far too low"
        )
        return LogModel(None, "the log", None, tuple(missing), tuple(assumptions))
    if not experts_known:
        assumptions.append(f"dense ({arch}, and the log prints no expert count)")
    if shaped and not n_vocab:
        n_vocab = 32000
        missing.append("the vocabulary size (taken as 32,000): the embedding's share of the bytes is a guess")
    layout = None
    if shaped:
        assert n_layers is not None and n_embd is not None and n_heads is not None and n_vocab is not None
        ff = n_ff_exp if n_experts and n_ff_exp else n_ff
        if ff is None:
            ff = (
                _ff_from_params(params, n_layers, n_embd, n_heads, head_k, n_kv or n_heads, n_vocab) if params else None
            )
            if ff is None:
                missing.append("the feed-forward width")
            else:
                assumptions.append(f"feed-forward width {ff:,} from the parameter count")
        if ff is not None:
            tied_embd = _tied(run, arch, params, n_vocab * n_embd, assumptions)
            layout = llama_tensors(
                LlamaDims(
                    n_layers,
                    n_embd,
                    n_heads,
                    head_k,
                    ff,
                    n_vocab,
                    lambda _: n_kv or n_heads,
                    tied_embd,
                    n_experts=n_experts if n_experts and n_ff_exp else 0,
                )
            )
    if params is None and layout is not None:
        params = sum(_elements(t.shape) for t in layout)
        assumptions.append(f"{params / 1e9:.2f} B parameters from the layout (the log does not print them)")
    if size is None and run.model_buffers:  # the weights' buffers hold the whole file (less its header)
        size = sum(f.value for f in run.model_buffers.values())
        assumptions.append(f"the model's size {size / 2**30:.2f} GiB from its buffers ({', '.join(run.model_buffers)})")
    if size is None and params and wtype is not None:
        size = int(params * wtype.type_size / wtype.block_size)
        size_uncertainty = SIZE_FROM_PARAMS_UNCERTAINTY
        missing.append(
            f"the file size: {size / 2**30:.2f} GiB taken from {params / 1e9:.2f} B parameters at {wtype.name} "
            f"(+-{size_uncertainty:.0%})"
        )
    if size is None:
        missing.append("the model's size (no `model size`/`file size` line, and no parameter count with a type)")
        return LogModel(None, "the log", None, tuple(missing), tuple(assumptions))
    blocks = None
    if not shaped:
        total = run.value("layers_total")
        blocks = total - 1 if isinstance(total, int) and 1 < total <= MAX_LAYERS + 1 else None
        missing.append(
            "the model's shape (width, heads): its KV cache cannot be computed"
            + (f"; its {blocks} blocks taken as equal in size" if blocks else "; nor a split across devices")
        )
    ggml_type = wtype or GGML_TYPES_BY_NAME["f16"]
    tied_known = arch.startswith(TIED_ARCHS)
    tensors, lo_hi = _tensors(
        layout, size, params, n_vocab, n_embd, n_experts, n_used, ggml_type, missing, blocks, tied_known
    )
    window = run.value("sliding_window") or None
    swa: tuple[bool, ...] = (False,) * (n_layers or blocks or 1)
    swa_source = None
    if window and n_layers:
        pattern = run.value("swa_pattern")
        if pattern:
            from ggprof.model.spec import SwaPattern

            swa, swa_source = SwaPattern(pattern).layers(n_layers), f"the log's n_swa_pattern {pattern}"
        elif swa_default is not None and (d := swa_default(arch)) is not None:
            swa, swa_source = d.layers(n_layers), f"llama.cpp default pattern for {arch} (every {d.n_pattern})"
    if lo_hi is not None and size_uncertainty:
        lo_hi = (int(lo_hi[0] * (1 - size_uncertainty)), int(lo_hi[1] * (1 + size_uncertainty)))
    kv_per_layer = run.value("kv_heads_per_layer")
    kv_heads = (
        tuple(kv_per_layer)
        if isinstance(kv_per_layer, tuple) and n_layers and len(kv_per_layer) == n_layers
        else (n_kv or 0,) * (n_layers or blocks or 1)
    )
    spec = ModelSpec(
        paths=(Path(name),),
        file_size_bytes=size,
        gguf_version=0,
        architecture=arch,
        name=run.value("model_name") or run.value("model_desc"),
        quant_label=quant,
        n_layers=n_layers or blocks or 1,
        n_embd=n_embd or 0,
        n_heads=n_heads or 0,
        n_kv_heads_per_layer=kv_heads if shaped else (0,) * (blocks or 1),
        head_dim_k=head_k if shaped else 0,
        head_dim_v=head_v if shaped else 0,
        context_length=run.value("n_ctx_train") or 0,
        vocab_size=n_vocab or 0,
        n_experts=n_experts if n_ff_exp else 0,
        n_experts_used=n_used if n_ff_exp else 0,
        n_experts_shared=run.value("n_experts_shared") or 0,
        tied_embeddings=layout is not None and not any(t.name == "output.weight" for t in layout),
        sliding_window=window if any(swa) else None,
        swa_layers=swa,
        swa_pattern_source=swa_source,
        kv_layout="gqa",
        tensors=tensors,
    )
    return LogModel(spec, "the log", lo_hi, tuple(missing), tuple(assumptions))


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _ff_from_params(params: int, layers: int, embd: int, heads: int, head_dim: int, kv: int, vocab: int) -> int | None:
    """The FFN width that makes a llama-style layout hold `params` (gate, up and down per layer)."""
    attn = layers * (2 * embd * heads * head_dim + 2 * embd * kv * head_dim)
    rest = params - attn - 2 * vocab * embd
    ff = rest // (3 * layers * embd) if layers and embd else 0
    return int(ff) if 0 < ff < 1 << 20 else None


def _tied(run: LogRun, arch: str, params: int | None, embd_params: int, assumptions: list[str]) -> bool:
    if arch.startswith(TIED_ARCHS):
        assumptions.append(f"the output layer is the embedding ({arch} ties them)")
        return True
    share = embd_params / params if params else 0.0
    if not params:
        assumptions.append("the output layer is not the embedding (the log gives no parameter count to tell)")
        return False
    tied = share > TIED_SHARE
    assumptions.append(
        f"the output layer {'is' if tied else 'is not'} the embedding (its {share:.0%} of the weights "
        f"{'>' if tied else '<='} {TIED_SHARE:.0%}; the log does not say)"
    )
    return tied


def _tensors(
    layout: list | None,  # type: ignore[type-arg]
    size: int,
    params: int | None,
    n_vocab: int | None,
    n_embd: int | None,
    n_experts: int,
    n_used: int,
    ggml_type: GGMLType,
    missing: list[str],
    blocks: int | None = None,
    tied_known: bool = False,
) -> tuple[tuple[TensorSpec, ...], tuple[int, int] | None]:
    """The layout with the file's bytes spread over it, and the decode bytes' range."""
    f32 = GGML_TYPES_BY_NAME["f32"]
    if layout is None:  # no shape: equal blocks and an output layer (or one block), every weight read
        elements = params or size
        n = blocks or 0
        parts = [(f"blk.{i}.weights", i) for i in range(n)] + [("output.weight", None)] if n else [("blk.0.weights", 0)]
        each_e, each_b = max(elements // len(parts), 1), size // len(parts)
        tensors = tuple(
            TensorSpec(name=name, ggml_type=ggml_type, shape=(each_e,), n_elements=each_e, n_bytes=each_b, layer=layer)
            for name, layer in parts
        )
        if tied_known:  # the embedding is the output layer: read whole, like every block
            return tensors, (size, size)
        embd = (n_vocab or 0) * (n_embd or 0)
        low = size - int(embd * size / max(elements, 1) * EMBD_TYPE_RANGE[1]) if embd else int(size * 0.85)
        missing.append(
            "whether the embedding is read whole or one row per token: the ceiling may be up to "
            f"{(size - low) / size:.0%} low"
        )
        return tensors, (max(low, 0), size)
    norms = sum(_elements(t.shape) for t in layout if t.role == "norm")
    weights = [t for t in layout if t.role != "norm"]
    elements = sum(_elements(t.shape) for t in weights)
    byte_budget = max(size - 4 * norms, 1)
    avg = byte_budget / max(params or elements, 1)
    embd_names = ("token_embd.weight", "output.weight")
    embd_bytes = {t.name: int(_elements(t.shape) * avg) for t in weights if t.name in embd_names}
    rest_bytes = max(byte_budget - sum(embd_bytes.values()), 0)
    rest_elements = sum(_elements(t.shape) for t in weights if t.name not in embd_names) or 1
    out = []
    for t in layout:
        n = _elements(t.shape)
        if t.role == "norm":
            nbytes, gt = 4 * n, f32
        elif t.name in embd_bytes:
            nbytes, gt = embd_bytes[t.name], ggml_type
        else:
            nbytes, gt = int(rest_bytes * n / rest_elements), (f32 if t.role == "router" else ggml_type)
        out.append(TensorSpec(name=t.name, ggml_type=gt, shape=t.shape, n_elements=n, n_bytes=nbytes, layer=t.layer))
    tied = "output.weight" not in embd_bytes
    x = embd_bytes.get("token_embd.weight", 0)
    # what a token reads with the embedding read whole (tied), experts at their share
    read_all = sum(t.n_bytes for t in out)
    if n_experts and n_used:
        exps = sum(t.n_bytes for t in out if "_exps." in t.name)
        read_all -= int(exps * (1 - n_used / n_experts))
    # The file's size is fixed: an embedding of another type than assumed moves bytes between it
    # and the blocks. Tied, a token reads all of them whatever the embedding's type; untied, all
    # but the embedding (half to twice the assumed bytes). Where tying was guessed, either.
    if tied and tied_known:
        return tuple(out), (read_all, read_all)
    lo = max(read_all - int(x * EMBD_TYPE_RANGE[1]), read_all // 10)
    return tuple(out), (max(lo, 1), read_all)

"""ModelSpec: what a GGUF header means for speed (bytes a token reads, KV cache growth).

The decode rules (docs/physics.md): a decode step reads every weight it
touches once; `token_embd` is a one-row lookup unless the embeddings are tied (then the
LM head reads all of it); MoE expert tensors (`*_exps`) are read for the
`expert_used_count` of `expert_count` experts; the KV cache adds
2 x layers x KV heads x head dim x bytes per element per token of depth.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

from ggprof.errors import GGUFError
from ggprof.llamacpp import CACHE_TYPE
from ggprof.model.ggml import FILE_TYPES, GGMLType, ValueType, kv_cache_type
from ggprof.model.gguf import ArrayValue, GGUFHeader, TensorInfo, read_model_files
from ggprof.model.hybrid import layer_roles

UINTS = (ValueType.UINT8, ValueType.UINT16, ValueType.UINT32, ValueType.UINT64)
INTS = (*UINTS, ValueType.INT8, ValueType.INT16, ValueType.INT32, ValueType.INT64)
# Embedding-like tensors a decode step reads one row of (a lookup, not a matmul); a tied
# token_embd is the LM head too, read whole (ModelSpec.is_lookup).
ROW_LOOKUP_TENSORS = frozenset(
    {"token_embd.weight", "per_layer_token_embd.weight", "position_embd.weight", "token_types.weight"}
)
# llama.cpp's output layer: the tensors of no block that go with the last layers (llama.cpp places
# the last layers first, then the output layer, on the GPU or the last device of a split).
OUTPUT_LAYER_TENSORS = frozenset({"output.weight", "output_norm.weight", "output_norm.bias", "output.bias"})
_LAYER = re.compile(r"^blk\.(\d+)\.")


def offloaded_layers(n_layers: int, n_gpu_layers: int | None) -> tuple[int, int]:
    """llama.cpp's offload (llama-model.cpp), the one home of the rule: the last layers go first,
    then the output layer (counted as layer n_layers); -ngl -1 or None: all. The first
    offloaded layer's index and how many of the n_layers + 1 are offloaded."""
    ngl = n_layers + 1 if n_gpu_layers is None or n_gpu_layers < 0 else min(n_gpu_layers, n_layers + 1)
    return n_layers + 1 - ngl, ngl


@dataclass(frozen=True)
class SwaPattern:
    """llama.cpp's set_swa_pattern(n_pattern, dense_first): which layers use the window."""

    n_pattern: int
    dense_first: bool = False

    def layers(self, n_layers: int) -> tuple[bool, ...]:
        n = self.n_pattern
        if self.dense_first:
            return tuple(n == 0 or il % n != 0 for il in range(n_layers))
        return tuple(n == 0 or il % n < n - 1 for il in range(n_layers))


@dataclass(frozen=True, kw_only=True)
class TensorSpec:
    name: str
    ggml_type: GGMLType
    shape: tuple[int, ...]
    n_elements: int
    n_bytes: int
    layer: int | None
    offset: int | None = None  # where its data starts in its file's data section (None: not read)
    shard: int = 0  # which file of a split model holds it


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A model's architecture and sizes, read from its GGUF header(s)."""

    paths: tuple[Path, ...]
    file_size_bytes: int
    gguf_version: int
    architecture: str
    name: str | None
    quant_label: str | None
    n_layers: int
    n_embd: int
    n_heads: int
    n_kv_heads_per_layer: tuple[int, ...]
    head_dim_k: int
    head_dim_v: int
    context_length: int
    vocab_size: int
    n_experts: int
    n_experts_used: int
    n_experts_shared: int
    tied_embeddings: bool
    sliding_window: int | None
    swa_layers: tuple[bool, ...]
    swa_pattern_source: str | None
    kv_layout: str  # "gqa" (per-head K/V) or "mla" (compressed latent)
    tensors: tuple[TensorSpec, ...] = field(repr=False)
    # hybrid and recurrent models (ggprof.model.hybrid): layers with a fixed-size state instead of
    # (or beside) a KV cache; draft heads (nextn) a plain decode does not run
    recurrent_layers: tuple[bool, ...] = ()
    state_bytes_per_layer: int | None = 0  # one recurrent layer's state per sequence (None: not known)
    layer_roles_source: str = ""
    n_nextn_layers: int = 0  # the last blocks of the file: the model's own draft (MTP) heads

    # -- sizes -------------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.paths[0]

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def n_kv_heads(self) -> int | list[int]:
        """A scalar when every layer has the same KV head count, else the per-layer list."""
        heads = set(self.n_kv_heads_per_layer)
        if len(heads) <= 1:
            return heads.pop() if heads else 0
        return list(self.n_kv_heads_per_layer)

    @cached_property  # derived from the frozen tensor table: computed once
    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    def bytes_by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.ggml_type.name] = out.get(t.ggml_type.name, 0) + t.n_bytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def tensors_by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.ggml_type.name] = out.get(t.ggml_type.name, 0) + 1
        return out

    def layer_bytes(self) -> list[int]:
        out = [0] * self.n_layers
        for t in self.tensors:
            if t.layer is not None and t.layer < self.n_layers:
                out[t.layer] += t.n_bytes
        return out

    @cached_property
    def non_layer_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors if t.layer is None or t.layer >= self.n_layers)

    # -- what one decode step reads ----------------------------------------------------------
    def is_lookup(self, t: TensorSpec) -> bool:
        """A tensor a decode step reads one row of: an embedding table, unless it is the tied
        token_embd (the LM head too, read whole). The one home of this rule."""
        return t.name in ROW_LOOKUP_TENSORS and not (t.name == "token_embd.weight" and self.tied_embeddings)

    def is_tied_head(self, t: TensorSpec) -> bool:
        """The tied token_embd: no output.weight, the LM head reads all of it."""
        return t.name == "token_embd.weight" and self.tied_embeddings

    def decode_share(self, t: TensorSpec) -> Fraction:
        """The fraction of a tensor one decode step reads."""
        if t.layer is not None and t.layer >= self.n_layers:
            return Fraction(0)  # a draft (nextn) head: run only when it drafts
        if self.is_lookup(t):
            return Fraction(1, t.n_elements // t.shape[0])
        if "_exps." in t.name and self.n_experts:
            return Fraction(self.n_experts_used, self.n_experts)
        return Fraction(1)

    @cached_property
    def decode_bytes_per_token(self) -> int:
        """Weight bytes one batch-1 decode step reads (see module docstring for the rules)."""
        return int(sum(t.n_bytes * self.decode_share(t) for t in self.tensors))

    @cached_property
    def active_params(self) -> int:
        """Parameters one token multiplies through: lookups excluded, experts at their active share."""
        total = Fraction(0)
        for t in self.tensors:
            if self.is_lookup(t):
                continue
            total += t.n_elements * self.decode_share(t)
        return int(total)

    @cached_property
    def lm_head_params(self) -> int:
        head = "token_embd.weight" if self.tied_embeddings else "output.weight"
        return sum(t.n_elements for t in self.tensors if t.name == head)

    def decode_rules(self) -> list[str]:
        """Which rules shaped decode_bytes_per_token, in words (for JSON and reports)."""
        rules = []
        if self.tied_embeddings:
            rules.append("tied_embeddings: no output.weight, the LM head reads all of token_embd")
        elif any(t.name == "token_embd.weight" for t in self.tensors):
            rules.append("token_embd: one row per token (a lookup)")
        if self.n_experts and any("_exps." in t.name for t in self.tensors):
            rules.append(f"moe: *_exps tensors count {self.n_experts_used}/{self.n_experts} of their bytes")
        if any(self.swa_layers):
            rules.append(
                f"sliding_window: {sum(self.swa_layers)} of {self.n_layers} layers keep at most "
                f"{self.sliding_window} tokens of KV ({self.swa_pattern_source})"
            )
        if self.kv_layout == "mla":
            rules.append("mla: the KV cache holds a compressed latent per layer")
        if any(self.recurrent_layers):
            state = self.state_bytes_per_sequence
            rules.append(
                f"recurrent: {sum(self.recurrent_layers)} of {self.n_layers} layers keep a fixed-size state "
                + (
                    f"({state:,} bytes a sequence, read and written each token)"
                    if state is not None
                    else "(size not known)"
                )
                + f" and no KV cache; {self.n_attention_layers} keep one ({self.layer_roles_source})"
            )
        if self.n_nextn_layers:
            rules.append(
                f"nextn: the last {self.n_nextn_layers} block(s) are draft (MTP) heads, not read by a plain decode"
            )
        return rules

    # -- recurrent state ---------------------------------------------------------------------
    @property
    def n_attention_layers(self) -> int:
        """Layers that keep a KV cache."""
        return sum(1 for h in self.n_kv_heads_per_layer if h > 0)

    @property
    def state_bytes_per_sequence(self) -> int | None:
        """The recurrent state of one sequence, every recurrent layer (0: none; None: not known)."""
        if self.state_bytes_per_layer is None:
            return None
        return sum(self.recurrent_layers) * self.state_bytes_per_layer

    def state_layer_bytes(self) -> list[int]:
        """Each layer's recurrent state per sequence (0 where it has none or it is not known)."""
        per = self.state_bytes_per_layer or 0
        return [per if r else 0 for r in self.recurrent_layers] or [0] * self.n_layers

    # -- KV cache ----------------------------------------------------------------------------
    @cached_property
    def _kv_per_token(self) -> dict[tuple[str, str], tuple[int, ...]]:
        return {}  # per cache types: each layer's KV bytes per token (predictions ask for it per depth)

    def kv_layer_bytes_per_token(self, cache_type_k: str = CACHE_TYPE, cache_type_v: str = CACHE_TYPE) -> list[int]:
        key = (cache_type_k, cache_type_v)
        if key not in self._kv_per_token:
            tk, tv = kv_cache_type(cache_type_k), kv_cache_type(cache_type_v)
            self._kv_per_token[key] = tuple(
                _nbytes(tk, h * self.head_dim_k) + _nbytes(tv, h * self.head_dim_v) for h in self.n_kv_heads_per_layer
            )
        return list(self._kv_per_token[key])

    def kv_bytes_per_token(self, cache_type_k: str = CACHE_TYPE, cache_type_v: str = CACHE_TYPE) -> int:
        """KV cache bytes one token adds (all layers, K and V)."""
        return sum(self.kv_layer_bytes_per_token(cache_type_k, cache_type_v))

    def kv_layer_bytes_at(
        self, depth: int, cache_type_k: str = CACHE_TYPE, cache_type_v: str = CACHE_TYPE
    ) -> list[int]:
        """KV bytes each layer holds at `depth` tokens (a sliding-window layer at most its window)."""
        per_layer = self.kv_layer_bytes_per_token(cache_type_k, cache_type_v)
        window = self.sliding_window
        return [
            per_token * (min(depth, window) if swa and window else depth)
            for per_token, swa in zip(per_layer, self.swa_layers, strict=True)
        ]

    def kv_bytes_at(self, depth: int, cache_type_k: str = CACHE_TYPE, cache_type_v: str = CACHE_TYPE) -> int:
        """KV cache bytes held (and read by one decode step) at `depth` tokens of context."""
        return sum(self.kv_layer_bytes_at(depth, cache_type_k, cache_type_v))


def _nbytes(t: GGMLType, n_elements: int) -> int:
    return int(-(-Fraction(n_elements * t.type_size, t.block_size) // 1))


# -- building a ModelSpec from headers -------------------------------------------------------
SwaDefault = Callable[[str], "SwaPattern | None"]


def load_model(path: str | os.PathLike[str], swa_default: SwaDefault | None = None) -> ModelSpec:
    """Read a model's GGUF header(s) and interpret them. GGUFError on anything wrong."""
    headers = read_model_files(path)
    return model_from_headers(headers, swa_default)


def model_from_headers(headers: list[GGUFHeader], swa_default: SwaDefault | None = None) -> ModelSpec:
    h = headers[0]
    meta = _Meta(h)
    arch = meta.string("general.architecture")
    if arch is None:
        raise GGUFError(h.path, "no general.architecture key")
    tensors = tuple(_tensor_spec(t) for hh in headers for t in hh.tensors)
    n_all = meta.uint(f"{arch}.block_count") or 0
    if n_all > max(len(tensors), 1):  # every layer has tensors: this bounds per-layer lists by the file
        raise GGUFError(h.path, f"{arch}.block_count {n_all} is more than the {len(tensors)} tensors could hold")
    nextn = meta.uint(f"{arch}.nextn_predict_layers") or 0
    nextn = nextn if nextn < n_all else 0
    n_layers = n_all - nextn  # the layers a plain decode runs (llama.cpp's hparams.n_layer())
    n_embd = meta.uint(f"{arch}.embedding_length") or 0
    n_heads = meta.per_layer(f"{arch}.attention.head_count", n_all)[:n_layers]
    head_max = max(n_heads, default=0)
    kv_heads = meta.per_layer(f"{arch}.attention.head_count_kv", n_all)[:n_layers] or n_heads or [0] * n_layers
    roles = layer_roles(
        arch,
        n_layers,
        kv_heads,
        meta.uint,
        lambda key, n: meta.per_layer(key, n_all)[:n],
        lambda key, n: b[:n] if (b := meta.bools(key, n_all)) is not None else None,
    )
    kv_heads = [h if attends else 0 for h, attends in zip(kv_heads, roles.attention, strict=True)]
    head_dim_k = meta.uint(f"{arch}.attention.key_length") or (n_embd // head_max if head_max else 0)
    head_dim_v = meta.uint(f"{arch}.attention.value_length") or (n_embd // head_max if head_max else 0)
    kv_layout = "gqa"
    # llama.cpp caches the compressed latent (MLA) only for a file that states the heads' own widths
    # (key_length_mla: converted since llama.cpp PR #12801, April 2025): an older DeepSeek GGUF, or
    # MiniCPM3's, caches every head's K and V at key_length and value_length (llama-hparams.cpp is_mla)
    kv_lora = meta.uint(f"{arch}.attention.kv_lora_rank")
    if kv_lora and meta.uint(f"{arch}.attention.key_length_mla"):
        kv_layout = "mla"
        head_dim_k = kv_lora + (meta.uint(f"{arch}.rope.dimension_count") or 0)
        head_dim_v = 0
        kv_heads = [1 if n else 0 for n in kv_heads]
    window = meta.uint(f"{arch}.attention.sliding_window") or None
    swa_layers, swa_source = _swa_layers(meta, arch, n_all, window, swa_default)
    swa_layers = swa_layers[:n_layers]
    names = {t.name for t in tensors}
    n_experts = meta.uint(f"{arch}.expert_count") or 0
    ft = meta.uint("general.file_type")
    return ModelSpec(
        paths=tuple(hh.path for hh in headers),
        file_size_bytes=sum(hh.file_size_bytes for hh in headers),
        gguf_version=h.version,
        architecture=arch,
        name=meta.string("general.name"),
        quant_label=FILE_TYPES.get(ft) if ft is not None else None,
        n_layers=n_layers,
        n_embd=n_embd,
        n_heads=head_max,
        n_kv_heads_per_layer=tuple(kv_heads),
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        context_length=meta.uint(f"{arch}.context_length") or 0,
        vocab_size=_vocab_size(meta, arch, tensors),
        n_experts=n_experts,
        n_experts_used=meta.uint(f"{arch}.expert_used_count") or (n_experts and 1),
        n_experts_shared=meta.uint(f"{arch}.expert_shared_count") or 0,
        tied_embeddings="output.weight" not in names,
        sliding_window=window if any(swa_layers) else None,
        swa_layers=swa_layers,
        swa_pattern_source=swa_source if any(swa_layers) else None,
        kv_layout=kv_layout,
        tensors=tensors,
        recurrent_layers=roles.recurrent if any(roles.recurrent) else (),
        state_bytes_per_layer=roles.state_bytes_per_layer,
        layer_roles_source=roles.source,
        n_nextn_layers=nextn,
    )


def _tensor_spec(t: TensorInfo) -> TensorSpec:
    m = _LAYER.match(t.name)
    return TensorSpec(
        name=t.name,
        ggml_type=t.ggml_type,
        shape=t.shape,
        n_elements=t.n_elements,
        n_bytes=t.n_bytes,
        layer=int(m[1]) if m else None,
        offset=t.offset,
        shard=t.shard,
    )


def _vocab_size(meta: _Meta, arch: str, tensors: tuple[TensorSpec, ...]) -> int:
    tokens = meta.header.get("tokenizer.ggml.tokens", ValueType.ARRAY)
    if isinstance(tokens, ArrayValue):
        return tokens.length
    explicit = meta.uint(f"{arch}.vocab_size")
    if explicit:
        return explicit
    embd = next((t for t in tensors if t.name == "token_embd.weight"), None)
    return embd.shape[1] if embd is not None and len(embd.shape) > 1 else 0


def _swa_layers(
    meta: _Meta, arch: str, n_layers: int, window: int | None, swa_default: SwaDefault | None
) -> tuple[tuple[bool, ...], str | None]:
    none = (False,) * n_layers
    if not window:
        return none, None
    key = f"{arch}.attention.sliding_window_pattern"
    mv = meta.header.metadata.get(key)
    if mv is not None and isinstance(mv.value, ArrayValue):
        items = mv.value.items
        if mv.value.item_type != ValueType.BOOL or items is None or len(items) != n_layers:
            raise GGUFError(meta.header.path, f"{key} must be a bool array with one entry per layer")
        return tuple(bool(b) for b in items), f"metadata {key}"
    if mv is not None:
        n = meta.uint(key)
        return SwaPattern(int(n or 0)).layers(n_layers), f"metadata {key}={n}"
    default = swa_default(arch) if swa_default else None
    if default is None:
        return none, None
    return default.layers(n_layers), f"llama.cpp default pattern for {arch} (every {default.n_pattern})"


class _Meta:
    """Typed access to the metadata keys ModelSpec uses: a wrong type is a GGUFError."""

    def __init__(self, header: GGUFHeader) -> None:
        self.header = header

    def string(self, key: str) -> str | None:
        v = self.header.get(key, ValueType.STRING)
        return v if isinstance(v, str) else None

    def uint(self, key: str) -> int | None:
        v = self.header.get(key, *INTS)
        if v is not None and v < 0:
            raise GGUFError(self.header.path, f"key {key!r} is negative ({v})")
        return None if v is None else int(v)

    def bools(self, key: str, n_layers: int) -> tuple[bool, ...] | None:
        """A per-layer bool array (None where the key is absent)."""
        mv = self.header.metadata.get(key)
        if mv is None:
            return None
        arr: Any = mv.value
        if (
            mv.type != ValueType.ARRAY
            or arr.item_type != ValueType.BOOL
            or arr.items is None
            or len(arr.items) != n_layers
        ):
            raise GGUFError(self.header.path, f"key {key!r} must be a bool array with one entry per layer")
        return tuple(bool(b) for b in arr.items)

    def per_layer(self, key: str, n_layers: int) -> list[int]:
        """A per-layer count stored as one integer or as an array of one per layer."""
        mv = self.header.metadata.get(key)
        if mv is None:
            return []
        if mv.type != ValueType.ARRAY:
            return [self.uint(key) or 0] * n_layers
        arr: Any = mv.value
        if arr.item_type not in INTS or arr.items is None or len(arr.items) != n_layers:
            raise GGUFError(self.header.path, f"key {key!r} must be an integer or one integer per layer")
        if any(v < 0 for v in arr.items):
            raise GGUFError(self.header.path, f"key {key!r} has a negative entry")
        return [int(v) for v in arr.items]

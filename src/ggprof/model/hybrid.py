"""Hybrid and recurrent models: which layers keep a KV cache, which carry a fixed-size recurrent
state instead, how many bytes that state takes, and which layers only a drafter runs.

As llama.cpp reads them (src/models/*.cpp `load_arch_hparams`, src/llama-hparams.cpp):
- Qwen3-Next and Qwen3.5/3.6 (`qwen3next`, `qwen35`, `qwen35moe`): a layer is recurrent (a
  gated delta net) unless `(il + 1) % full_attention_interval == 0` (default 4), or as the
  per-layer bool array `attention.recurrent_layers` says;
- Jamba, Granite 4 hybrid, LFM2, PLaMo 2, Kimi Linear: a layer with no KV heads
  (`attention.head_count_kv` per layer 0) is recurrent; Nemotron-H: no KV heads and no FFN;
- Falcon-H1: attention and a Mamba state in every layer; Mamba, Mamba 2, RWKV: all recurrent.
A recurrent layer's state per sequence is `n_embd_r + n_embd_s` values of F32 (llama.cpp's
recurrent memory types): for Mamba-style and gated-delta-net layers `n_embd_r = (conv_kernel -
1) x (inner_size + 2 x group_count x state_size)` (the convolution's history) and `n_embd_s =
state_size x inner_size`; LFM2's short convolution keeps `n_embd x (l_cache - 1)`; RWKV
`token_shift_count x n_embd` and `n_embd x wkv.head_size`. The last `nextn_predict_layers`
blocks (GLM-4.5, Qwen3.5/3.6 MTP GGUFs) are the model's own draft heads: a plain decode does
not run them (llama.cpp's `hparams.n_layer()` leaves them out), a draft-mtp step does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

STATE_VALUE_BYTES = 4  # llama.cpp's recurrent memory holds its r and s rows as F32
FULL_ATTENTION_INTERVAL = {"qwen3next": 4, "qwen35": 4, "qwen35moe": 4, "qwen4exp": 4}  # llama.cpp's default
NO_KV_HEADS_IS_RECURRENT = frozenset(
    {"jamba", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "kimi-linear", "bailingmoe3", "glm5-next", "kimi-k3"}
)
# whose state llama.cpp sizes with the Mamba formula (the others' states: LFM2, RWKV, or not known here)
MAMBA_STATE = frozenset(
    {"mamba", "mamba2", "jamba", "falcon-h1", "plamo2", "granitehybrid", "nemotron_h", "nemotron_h_moe"}
    | set(FULL_ATTENTION_INTERVAL)
)
NO_KV_HEADS_NO_FFN_IS_RECURRENT = frozenset({"nemotron_h", "nemotron_h_moe"})
EVERY_LAYER_BOTH = frozenset({"falcon-h1"})
ALL_RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
MAX_STATE_VALUES = 1 << 34  # a layer's state above 64 GiB of F32 is no model's


@dataclass(frozen=True)
class LayerRoles:
    """What each of the model's layers keeps for a sequence."""

    attention: tuple[bool, ...]  # keeps a KV cache that grows with the context
    recurrent: tuple[bool, ...]  # carries a fixed-size state, whatever the depth
    state_bytes_per_layer: int | None  # one recurrent layer's state per sequence (None: not known)
    source: str  # where the roles came from (a metadata key, llama.cpp's rule)

    @property
    def state_bytes(self) -> int | None:
        """The recurrent state of one sequence, all layers."""
        if self.state_bytes_per_layer is None:
            return None
        return sum(self.recurrent) * self.state_bytes_per_layer


UInt = Callable[[str], "int | None"]
PerLayer = Callable[[str, int], list[int]]
Bools = Callable[[str, int], "tuple[bool, ...] | None"]


def layer_roles(
    arch: str, n_layers: int, kv_heads: list[int], uint: UInt, per_layer: PerLayer, bools: Bools
) -> LayerRoles:
    """The roles of the `n_layers` layers a decode runs (draft heads left out) of `arch`; a
    plain transformer's every layer keeps a KV cache. `uint`, `per_layer` and `bools` read a
    metadata key (the model's `{arch}.` prefix added here)."""
    every = (True,) * n_layers
    none = (False,) * n_layers
    has_kv = tuple(h > 0 for h in kv_heads) if kv_heads else every
    recurrent: tuple[bool, ...] | None = None
    source = ""
    if arch in FULL_ATTENTION_INTERVAL:
        marked = bools(f"{arch}.attention.recurrent_layers", n_layers)
        if marked is not None:
            recurrent, source = marked, f"metadata {arch}.attention.recurrent_layers"
        else:
            given = uint(f"{arch}.full_attention_interval")
            interval = given or FULL_ATTENTION_INTERVAL[arch]
            recurrent = tuple((il + 1) % interval != 0 for il in range(n_layers))
            source = (
                f"metadata {arch}.full_attention_interval={interval}"
                if given
                else f"llama.cpp's default for {arch}: every {interval}th layer attends"
            )
    elif arch in NO_KV_HEADS_IS_RECURRENT:
        recurrent, source = tuple(not kv for kv in has_kv), f"layers without KV heads ({arch}.attention.head_count_kv)"
    elif arch in NO_KV_HEADS_NO_FFN_IS_RECURRENT:
        ffn = per_layer(f"{arch}.feed_forward_length", n_layers) or [1] * n_layers
        recurrent = tuple(not kv and not f for kv, f in zip(has_kv, ffn, strict=True))
        source = f"layers without KV heads or FFN ({arch})"
    elif arch in EVERY_LAYER_BOTH:
        return LayerRoles(every, every, _state_bytes(arch, uint), f"{arch}: attention and a state in every layer")
    elif arch in ALL_RECURRENT:
        return LayerRoles(none, every, _state_bytes(arch, uint), f"{arch}: every layer recurrent")
    if recurrent is None:
        return LayerRoles(every, none, 0, "")
    attention = tuple(not r and kv for r, kv in zip(recurrent, has_kv, strict=True))
    return LayerRoles(attention, recurrent, _state_bytes(arch, uint) if any(recurrent) else 0, source)


def _state_bytes(arch: str, uint: UInt) -> int | None:
    """One recurrent layer's state per sequence, in bytes (llama_hparams::n_embd_r + n_embd_s)."""
    n_embd = uint(f"{arch}.embedding_length") or 0
    if arch.startswith(("rwkv", "arwkv")):
        shift, head = uint(f"{arch}.token_shift_count"), uint(f"{arch}.wkv.head_size")
        if shift is None or head is None:
            return None
        values = shift * n_embd + n_embd * head
    elif arch in ("lfm2", "lfm2moe"):
        l_cache = uint(f"{arch}.shortconv.l_cache")
        if l_cache is None:
            return None
        values = n_embd * max(l_cache - 1, 0)
    elif arch not in MAMBA_STATE:
        return None  # Kimi's KDA, MiniMax's linear attention: sized by rules not read here
    else:
        conv, inner, state = (uint(f"{arch}.ssm.{k}") for k in ("conv_kernel", "inner_size", "state_size"))
        if conv is None or inner is None or state is None:
            return None
        groups = uint(f"{arch}.ssm.group_count") or 0
        values = max(conv - 1, 0) * (inner + 2 * groups * state) + state * inner
    return values * STATE_VALUE_BYTES if values <= MAX_STATE_VALUES else None

"""llama.cpp's tensor layout of the llama architecture (LLM_ARCH_LLAMA in src/llama-arch.cpp
and llama-model.cpp): every tensor's name and ggml shape, dense or mixture-of-experts. The one
home for whatever writes a llama-style GGUF: synthetic models, the reference headers of
published models, and the tests' models."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Role = Literal["weight", "norm", "router"]  # a norm and the MoE router stay F32 in llama.cpp's files


@dataclass(frozen=True)
class LayoutTensor:
    name: str
    shape: tuple[int, ...]  # ggml order: the row length first
    role: Role
    layer: int | None  # None: not in a block (embedding, output)


@dataclass(frozen=True)
class LlamaDims:
    """What the layout depends on: layers, width, heads and head size, FFN, vocabulary,
    each layer's KV heads, whether the output shares the embedding, experts (0: dense)."""

    n_layers: int
    n_embd: int
    n_heads: int
    head_dim: int
    n_ff: int
    vocab: int
    kv_heads: Callable[[int], int]
    tied: bool = False
    n_experts: int = 0


def llama_tensors(dims: LlamaDims) -> list[LayoutTensor]:
    """Every tensor in llama.cpp's order."""
    n_layers, n_embd, n_ff, vocab, n_experts = dims.n_layers, dims.n_embd, dims.n_ff, dims.vocab, dims.n_experts
    head_dim, tied = dims.head_dim, dims.tied
    e, q = n_embd, dims.n_heads * head_dim
    out = [LayoutTensor("token_embd.weight", (e, vocab), "weight", None)]
    out.append(LayoutTensor("output_norm.weight", (e,), "norm", None))
    if not tied:
        out.append(LayoutTensor("output.weight", (e, vocab), "weight", None))
    for i in range(n_layers):
        kv = dims.kv_heads(i) * head_dim
        block = [
            (f"blk.{i}.attn_norm.weight", (e,), "norm"),
            (f"blk.{i}.attn_q.weight", (e, q), "weight"),
            (f"blk.{i}.attn_k.weight", (e, kv), "weight"),
            (f"blk.{i}.attn_v.weight", (e, kv), "weight"),
            (f"blk.{i}.attn_output.weight", (q, e), "weight"),
            (f"blk.{i}.ffn_norm.weight", (e,), "norm"),
        ]
        if n_experts:
            block += [
                (f"blk.{i}.ffn_gate_inp.weight", (e, n_experts), "router"),
                (f"blk.{i}.ffn_gate_exps.weight", (e, n_ff, n_experts), "weight"),
                (f"blk.{i}.ffn_up_exps.weight", (e, n_ff, n_experts), "weight"),
                (f"blk.{i}.ffn_down_exps.weight", (n_ff, e, n_experts), "weight"),
            ]
        else:
            block += [
                (f"blk.{i}.ffn_gate.weight", (e, n_ff), "weight"),
                (f"blk.{i}.ffn_up.weight", (e, n_ff), "weight"),
                (f"blk.{i}.ffn_down.weight", (n_ff, e), "weight"),
            ]
        out += [LayoutTensor(name, shape, role, i) for name, shape, role in block]  # type: ignore[arg-type]
    return out

"""`ggprof inspect`: a ModelSpec as JSON and as an 80-column summary."""

from __future__ import annotations

from typing import Any

from ggprof.llamacpp import CACHE_TYPE
from ggprof.model.spec import ModelSpec
from ggprof.units import clean, fmt_bytes, fmt_count


def inspect_dict(spec: ModelSpec) -> dict[str, Any]:
    """The `inspect --json` object (schema in docs/commands.md)."""
    return {
        "path": str(spec.path),
        "paths": [str(p) for p in spec.paths],
        "file_size_bytes": spec.file_size_bytes,
        "gguf_version": spec.gguf_version,
        "architecture": spec.architecture,
        "name": spec.name,
        "quant_label": spec.quant_label,
        "n_params": spec.n_params,
        "n_tensors": len(spec.tensors),
        "n_layers": spec.n_layers,
        "n_embd": spec.n_embd,
        "n_heads": spec.n_heads,
        "n_kv_heads": spec.n_kv_heads,
        "head_dim_k": spec.head_dim_k,
        "head_dim_v": spec.head_dim_v,
        "context_length": spec.context_length,
        "vocab_size": spec.vocab_size,
        "n_experts": spec.n_experts,
        "n_experts_used": spec.n_experts_used,
        "n_experts_shared": spec.n_experts_shared,
        "tied_embeddings": spec.tied_embeddings,
        "sliding_window": spec.sliding_window,
        "swa_layers": [i for i, swa in enumerate(spec.swa_layers) if swa],
        "swa_pattern_source": spec.swa_pattern_source,
        "kv_layout": spec.kv_layout,
        "bytes_by_type": spec.bytes_by_type(),
        "tensors_by_type": spec.tensors_by_type(),
        "layer_bytes": spec.layer_bytes(),
        "non_layer_bytes": spec.non_layer_bytes,
        "decode_bytes_per_token": spec.decode_bytes_per_token,
        "kv_bytes_per_token": spec.kv_bytes_per_token(),
        "kv_cache_type": CACHE_TYPE,
        "attention_layers": spec.n_attention_layers,
        "recurrent_layers": sum(spec.recurrent_layers),
        "state_bytes_per_sequence": spec.state_bytes_per_sequence,
        "layer_roles_source": spec.layer_roles_source or None,
        "nextn_layers": spec.n_nextn_layers,
        "active_params": spec.active_params,
        "decode_rules": spec.decode_rules(),
    }


def inspect_text(spec: ModelSpec) -> str:
    name = f"  ({clean(spec.name)})" if spec.name else ""
    shards = f", {len(spec.paths)} shards" if len(spec.paths) > 1 else ""
    lines = [
        f"{clean(spec.path.name)}{name}"[:80],
        _row("file", f"{fmt_bytes(spec.file_size_bytes)}, GGUF v{spec.gguf_version}{shards}"),
        _row(
            "model",
            f"{clean(spec.architecture)}, {spec.quant_label or 'file type not set'}, "
            f"{fmt_count(spec.n_params)} params ({spec.n_params:,})",
        ),
        _row(
            "shape",
            f"{spec.n_layers} layers, embedding {spec.n_embd:,}, "
            f"context {spec.context_length:,}, vocab {spec.vocab_size:,}",
        ),
        _row("attention", _attention(spec)),
    ]
    if spec.sliding_window:
        lines.append(
            _row("sliding win.", f"{spec.sliding_window:,} tokens on {sum(spec.swa_layers)} of {spec.n_layers} layers")
        )
    if spec.n_experts:
        shared = f", {spec.n_experts_shared} shared" if spec.n_experts_shared else ""
        lines.append(_row("experts", f"{spec.n_experts_used} of {spec.n_experts} used per token{shared}"))
    lines.append(
        _row("embeddings", "tied: the LM head reads token_embd" if spec.tied_embeddings else "separate output.weight")
    )
    lines.extend(_types(spec))
    lines.append(_row("per layer", _layers(spec)))
    if any(spec.recurrent_layers):
        state = spec.state_bytes_per_sequence
        sized = f"a {fmt_bytes(state, binary=False)} state a sequence" if state is not None else "a state not sized"
        lines.append(
            _row(
                "recurrent",
                f"{sum(spec.recurrent_layers)} of {spec.n_layers} layers ({sized}); KV on {spec.n_attention_layers}",
            )
        )
    if spec.n_nextn_layers:
        lines.append(_row("draft heads", f"{spec.n_nextn_layers} nextn (MTP) block(s), run only when they draft"))
    lines.append(_row("decode reads", f"{fmt_bytes(spec.decode_bytes_per_token)} of weights per token"))
    lines.append(
        _row(
            "KV cache",
            f"{fmt_bytes(spec.kv_bytes_per_token(), binary=False)} per token (f16), "
            f"{fmt_bytes(spec.kv_bytes_at(spec.context_length))} at full context",
        )
    )
    return "\n".join(lines)


def _row(label: str, text: str) -> str:
    return f"  {label:<13}{text}"


def _attention(spec: ModelSpec) -> str:
    kv = spec.n_kv_heads
    kv_text = f"{kv} KV head{'s' if kv != 1 else ''}" if isinstance(kv, int) else f"KV heads {min(kv)}-{max(kv)}"
    dims = (
        f"head dim {spec.head_dim_k}"
        if spec.head_dim_k == spec.head_dim_v
        else f"head dims K {spec.head_dim_k} / V {spec.head_dim_v}"
    )
    if spec.kv_layout == "mla":
        return f"{spec.n_heads} heads, MLA latent cache of {spec.head_dim_k} per layer"
    return f"{spec.n_heads} heads, {kv_text}, {dims}"


def _types(spec: ModelSpec) -> list[str]:
    counts = spec.tensors_by_type()
    parts = [f"{name} {fmt_bytes(b, binary=False)} ({counts[name]})" for name, b in spec.bytes_by_type().items()]
    lines, current = [], f"{len(spec.tensors)}:"
    for part in parts:
        if len(current) + len(part) + 2 > 64:
            lines.append(current)
            current = " "
        current += f" {part},"
    lines.append(current.rstrip(","))
    return [_row("tensors" if i == 0 else "", line) for i, line in enumerate(lines)]


def _layers(spec: ModelSpec) -> str:
    per_layer = spec.layer_bytes()
    if not per_layer:
        return f"no layers; {fmt_bytes(spec.non_layer_bytes, binary=False)} outside layers"
    lo, hi = min(per_layer), max(per_layer)
    span = (
        fmt_bytes(lo, binary=False) if lo == hi else f"{fmt_bytes(lo, binary=False)} to {fmt_bytes(hi, binary=False)}"
    )
    return f"{span} each; {fmt_bytes(spec.non_layer_bytes, binary=False)} outside layers"

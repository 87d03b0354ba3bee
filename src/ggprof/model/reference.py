"""Reference models: the headers of published models, rebuilt so results can be judged.

Published llama.cpp results name a model (`llama 7B Q4_0`); judging them needs the bytes a
token reads, so the header is rebuilt with llama.cpp's shapes and its quantizer's choice of
type per tensor (llama-quant.cpp: `llama_tensor_get_type`), data section left as a hole.
A reference is `<shape>-<scheme>`: `llama2-7b-q4_0`, `llama3-8b-q4_k_m`, `synth-8b-q4_0`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from ggprof.errors import BadInputError
from ggprof.model.layout import LlamaDims, llama_tensors
from ggprof.model.synth import SHAPES as SYNTH_SHAPES


@dataclass(frozen=True)
class RefShape:
    n_embd: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    n_ff: int
    vocab: int
    description: str
    tied: bool = False
    head_dim: int | None = None  # when the heads are not n_embd / n_heads wide (Gemma 3)
    embd_type: str | None = None  # token_embd's type when a release keeps it apart (Gemma 3 QAT Q4_0: F16)


SHAPES: dict[str, RefShape] = {
    "llama2-7b": RefShape(4096, 32, 32, 32, 11008, 32000, "LLaMA 2 7B (and CodeLlama 7B)"),
    "llama2-13b": RefShape(5120, 40, 40, 40, 13824, 32000, "LLaMA 2 13B"),
    "mistral-7b": RefShape(4096, 32, 32, 8, 14336, 32000, "Mistral 7B v0.1/v0.2"),
    "mistral-7b-v03": RefShape(4096, 32, 32, 8, 14336, 32768, "Mistral 7B v0.3"),
    "llama3-8b": RefShape(4096, 32, 32, 8, 14336, 128256, "Llama 3 / 3.1 8B"),
    "llama3-70b": RefShape(8192, 80, 64, 8, 28672, 128256, "Llama 3 / 3.1 70B"),
    "llama3.2-3b": RefShape(3072, 28, 24, 8, 8192, 128256, "Llama 3.2 3B", tied=True),
    "tinyllama-1.1b": RefShape(2048, 22, 32, 4, 5632, 32000, "TinyLlama 1.1B"),
    "qwen2.5-14b": RefShape(5120, 48, 40, 8, 13824, 152064, "Qwen2.5 14B (attention biases left out)"),
    # Gemma 2 2B (google/gemma-2-2b-it config.json: hidden 2304, 26 layers, 8 heads of 256, 4 KV
    # heads, FFN 9216, vocabulary 256000, tied). As the tied output head its embedding is Q6_K in
    # a Q4_K_M file (llama-quant.cpp), read every token: 1.59 GiB as llama-bench prints it.
    "gemma2-2b": RefShape(2304, 26, 8, 4, 9216, 256000, "Gemma 2 2B", tied=True, head_dim=256, embd_type="Q6_K"),
    # Gemma 3 4B (google/gemma-3-4b-it config.json: hidden 2560, 34 layers, 8 heads of 256, 4 KV
    # heads, FFN 10240, vocabulary 262144, tied), text model only, in Google's QAT Q4_0 release
    # (ggml-org/gemma-3-4b-it-qat-GGUF): its 2.93 GiB are Q4_0 layers and an F16 embedding, which
    # as the tied output head is read every token. Norm scales and q/k norms left out (<1 MB).
    "gemma3-4b": RefShape(
        2560, 34, 8, 4, 10240, 262144, "Gemma 3 4B (text, QAT: F16 embedding)", tied=True, head_dim=256, embd_type="F16"
    ),
    **{
        f"synth-{s.name}": RefShape(
            s.n_embd, s.n_layers, s.n_heads, s.n_kv_heads, s.n_ff, s.vocab, s.description, s.tied
        )
        for s in SYNTH_SHAPES.values()
        if not s.n_experts
    },
}
SCHEMES = ("q4_0", "q8_0", "f16", "q6_k", "q4_k_m")


def split_ref(ref: str) -> tuple[str, str]:
    for scheme in SCHEMES:
        shape = ref.removesuffix(f"-{scheme}")
        if shape != ref and shape in SHAPES:
            return shape, scheme
    raise BadInputError(
        f"unknown reference model {ref[:80]!r} (shapes: {', '.join(SHAPES)}; schemes: {', '.join(SCHEMES)})"
    )


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp: the layers Q4_K_M gives Q6_K for attn_v and ffn_down."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_types(shape: RefShape, scheme: str, synthetic: bool) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, ggml shape, ggml type name) for every tensor."""
    e, hd = shape.n_embd, shape.head_dim or shape.n_embd // shape.n_heads
    base = {"q4_0": "Q4_0", "q8_0": "Q8_0", "f16": "F16", "q6_k": "Q6_K", "q4_k_m": "Q4_K"}[scheme]
    # llama.cpp's quantizer keeps the output layer at Q6_K below Q8_0; synth writes one type.
    head = base if synthetic or scheme in ("q8_0", "f16") else "Q6_K"
    dims = LlamaDims(
        shape.n_layers, e, shape.n_heads, hd, shape.n_ff, shape.vocab, lambda _: shape.n_kv_heads, shape.tied
    )
    layout = llama_tensors(dims)
    out = []
    for t in layout:
        more = scheme == "q4_k_m" and t.layer is not None and use_more_bits(t.layer, shape.n_layers)
        if t.role != "weight":
            ggml_type = "F32"
        elif t.name == "output.weight":
            ggml_type = head
        elif t.name == "token_embd.weight" and shape.embd_type:
            ggml_type = shape.embd_type
        elif more and t.name.endswith(("attn_v.weight", "ffn_down.weight")):
            ggml_type = "Q6_K"
        else:
            ggml_type = base
        out.append((t.name, t.shape, ggml_type))
    return out


def reference_path(ref: str, folder: Path) -> Path:
    """Write (once) the header of reference model `ref` into `folder`; the data is a hole."""
    import gguf
    import numpy as np

    shape_name, scheme = split_ref(ref)
    shape = SHAPES[shape_name]
    synthetic = shape_name.startswith("synth-")
    tensors = tensor_types(shape, scheme, synthetic)
    key = hashlib.sha256(repr((shape, scheme, synthetic, 1)).encode()).hexdigest()[:12]
    path = folder / f"{ref}-{key}.gguf"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    a = "llama"
    w = gguf.GGUFWriter(tmp, a)
    w.add_name(f"{shape.description} ({scheme}, reference header)")
    w.add_uint32(f"{a}.context_length", 4096)
    w.add_uint32(f"{a}.embedding_length", shape.n_embd)
    w.add_uint32(f"{a}.block_count", shape.n_layers)
    w.add_uint32(f"{a}.feed_forward_length", shape.n_ff)
    w.add_uint32(f"{a}.attention.head_count", shape.n_heads)
    w.add_uint32(f"{a}.attention.head_count_kv", shape.n_kv_heads)
    if shape.head_dim:
        w.add_uint32(f"{a}.attention.key_length", shape.head_dim)
        w.add_uint32(f"{a}.attention.value_length", shape.head_dim)
    w.add_uint32(f"{a}.vocab_size", shape.vocab)
    data = 0
    for name, ggml_shape, type_name in tensors:
        qtype = gguf.GGMLQuantizationType[type_name]
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        n = 1
        for d in ggml_shape:
            n *= d
        nbytes = n // block * size
        w.add_tensor_info(name, tuple(reversed(ggml_shape)), np.dtype(np.float32), nbytes, raw_dtype=qtype)
        data += w.ggml_pad(nbytes, w.data_alignment)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for f in w.fout or []:
        f.close()
    w.fout = None
    with open(tmp, "r+b") as fh:
        fh.seek(0, 2)
        fh.truncate(w.ggml_pad(fh.tell(), w.data_alignment) + data)
    os.replace(tmp, path)
    return path

"""GGUF files for tests, written with the `gguf` package's GGUFWriter.

Headers are real; the tensor data section is a sparse hole (the file is truncated to
its full size), so an 8B- or 70B-shaped model costs a few kB of disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np

Q8_0 = gguf.GGMLQuantizationType.Q8_0
F32 = gguf.GGMLQuantizationType.F32
F16 = gguf.GGMLQuantizationType.F16
Q4_K = gguf.GGMLQuantizationType.Q4_K
MXFP4 = gguf.GGMLQuantizationType.MXFP4


def nbytes(shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType) -> int:
    """Bytes of a tensor with ggml shape `shape` (ne[0] first)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = 1
    for d in shape:
        n *= d
    return n // block * size


@dataclass
class Shape:
    """A llama-style model: the numbers the hand computations in the tests use."""

    arch: str = "llama"
    n_layers: int = 2
    n_embd: int = 256
    n_heads: int = 8
    n_kv_heads: int | list[int] = 2
    head_dim: int | None = None  # default n_embd / n_heads
    n_ff: int = 512
    vocab: int = 1000
    context: int = 4096
    tied: bool = False
    n_experts: int = 0
    n_experts_used: int = 0
    qtype: gguf.GGMLQuantizationType = Q8_0
    expert_qtype: gguf.GGMLQuantizationType | None = None  # the routed experts' type, when not qtype
    file_type: int | None = 7  # LLAMA_FTYPE_MOSTLY_Q8_0
    name: str = "test model"
    tokens: bool = True  # write a tokenizer vocabulary (else {arch}.vocab_size)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def hd(self) -> int:
        return self.head_dim or self.n_embd // self.n_heads

    def kv_heads(self, layer: int) -> int:
        return self.n_kv_heads[layer] if isinstance(self.n_kv_heads, list) else self.n_kv_heads

    def tensors(self) -> list[tuple[str, tuple[int, ...], gguf.GGMLQuantizationType]]:
        """(name, ggml shape, type) of every tensor in llama.cpp's layout; norms and router f32."""
        from ggprof.model.layout import LlamaDims, llama_tensors

        dims = LlamaDims(self.n_layers, self.n_embd, self.n_heads, self.hd, self.n_ff, self.vocab, self.kv_heads)
        layout = llama_tensors(replace(dims, tied=self.tied, n_experts=self.n_experts))
        return [(t.name, t.shape, self._qtype_of(t.name) if t.role == "weight" else F32) for t in layout]

    def _qtype_of(self, name: str) -> gguf.GGMLQuantizationType:
        return self.expert_qtype if self.expert_qtype is not None and "_exps." in name else self.qtype


def write_model(path: Path, shape: Shape, split_max_tensors: int = 0) -> list[Path]:
    """Write the header(s) of `shape`; the data section is a hole. Returns the file(s)."""
    a = shape.arch
    w = gguf.GGUFWriter(path, a, split_max_tensors=split_max_tensors)
    w.add_name(shape.name)
    if shape.file_type is not None:
        w.add_file_type(shape.file_type)
    w.add_uint32(f"{a}.context_length", shape.context)
    w.add_uint32(f"{a}.embedding_length", shape.n_embd)
    w.add_uint32(f"{a}.block_count", shape.n_layers)
    w.add_uint32(f"{a}.feed_forward_length", shape.n_ff)
    w.add_uint32(f"{a}.attention.head_count", shape.n_heads)
    if isinstance(shape.n_kv_heads, list):
        w.add_array(f"{a}.attention.head_count_kv", shape.n_kv_heads)
    else:
        w.add_uint32(f"{a}.attention.head_count_kv", shape.n_kv_heads)
    if shape.head_dim:
        w.add_uint32(f"{a}.attention.key_length", shape.head_dim)
        w.add_uint32(f"{a}.attention.value_length", shape.head_dim)
    if shape.n_experts:
        w.add_uint32(f"{a}.expert_count", shape.n_experts)
        w.add_uint32(f"{a}.expert_used_count", shape.n_experts_used)
    for key, value in shape.extra.items():
        _add(w, key, value)
    if shape.tokens:
        w.add_string("tokenizer.ggml.model", "llama")
        w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(shape.vocab)])
        w.add_array("tokenizer.ggml.scores", [0.0] * shape.vocab)
    else:
        w.add_uint32(f"{a}.vocab_size", shape.vocab)
    for name, ggml_shape, qtype in shape.tensors():
        w.add_tensor_info(
            name, tuple(reversed(ggml_shape)), np.dtype(np.float32), nbytes(ggml_shape, qtype), raw_dtype=qtype
        )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    files = [Path(f.name) for f in w.fout or []]
    sizes = [sum(w.ggml_pad(ti.nbytes, w.data_alignment) for ti in t.values()) for t in w.tensors]
    for f in w.fout or []:
        f.close()
    w.fout = None
    for file, data_size in zip(files, sizes, strict=False):
        with open(file, "r+b") as fh:
            fh.seek(0, 2)
            start = w.ggml_pad(fh.tell(), w.data_alignment)
            fh.truncate(start + data_size)
    return files


def _add(w: gguf.GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    else:
        w.add_array(key, value)


# -- shapes of published models (data sections sparse), shared by the tests --------------------
# Llama-3.1-8B in f16: 32 layers of 4096, 32 heads, 8 KV heads of 128, FFN 14336, vocabulary 128256.
LLAMA_3_1_8B_F16 = Shape(
    n_layers=32, n_embd=4096, n_heads=32, n_kv_heads=8, n_ff=14336, vocab=128256, qtype=F16, file_type=1,
    tokens=False, context=131072,
)  # fmt: skip
# An 8B MHA model in fp16 whose weights are 16 GB (docs/physics.md's example): 32 KV heads, FFN
# 14560, vocabulary 32000; and the same with 8 KV heads (GQA).
LLAMA_8B_MHA_F16 = replace(LLAMA_3_1_8B_F16, n_kv_heads=32, n_ff=14560, vocab=32000)
LLAMA_8B_GQA_F16 = replace(LLAMA_8B_MHA_F16, n_kv_heads=8)
# Llama-2-70B / Llama-3.1-70B: 80 layers of 8192, 64 heads, 8 KV heads of 128, FFN 28672.
LLAMA_70B_F16 = replace(LLAMA_3_1_8B_F16, n_layers=80, n_embd=8192, n_heads=64, n_ff=28672, vocab=32000)
# An 8B-class Q4_K model whose token reads 4.7 GB (tied embeddings, 36 layers): docs/physics.md's
# "8B Q4_K_M 4.7 GB".
Q4_8B_TIED = replace(LLAMA_3_1_8B_F16, n_layers=36, qtype=Q4_K, file_type=15, tied=True, context=8192)
# The desktop table's Q4_K models (docs/physics.md): Llama-3-8B layers, 32000 tokens, N layers.
Q4_K_LLAMA = replace(LLAMA_3_1_8B_F16, vocab=32000, qtype=Q4_K, file_type=15, context=Shape.context)
# gpt-oss-120b as ggml-org/gpt-oss-120b-GGUF ships it (openai/gpt-oss-120b config.json: 36 layers
# of 2880, 64 heads of 64, 8 KV heads, 128 experts of 2880 of which 4 are used a token, vocabulary
# 201088, a 128-token window on every other layer): routed experts MXFP4 (17 bytes per 32
# weights), the rest Q8_0; file type MXFP4_MOE (38). 116.8B parameters, 63.3 GB (58.9 GiB; the
# real file's 59.02 GiB adds biases and attention sinks).
GPT_OSS_120B = Shape(
    arch="gpt-oss", n_layers=36, n_embd=2880, n_heads=64, n_kv_heads=8, head_dim=64, n_ff=2880, vocab=201088,
    context=131072, n_experts=128, n_experts_used=4, qtype=Q8_0, expert_qtype=MXFP4, file_type=38,
    name="gpt-oss-120b", tokens=False, extra={"gpt-oss.attention.sliding_window": 128},
)  # fmt: skip

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
    # a K-quant mix as llama-quant.cpp makes it: the output layer's type, and attn_v's and
    # ffn_down's on the layers `use_more_bits` picks (None: qtype)
    head_qtype: gguf.GGMLQuantizationType | None = None
    more_bits_qtype: gguf.GGMLQuantizationType | None = None
    shared_ff: int = 0  # a shared expert's width (ffn_*_shexp in every layer; 0: none)
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
        out = [(t.name, t.shape, self._qtype_of(t.name, t.layer) if t.role == "weight" else F32) for t in layout]
        e, ff = self.n_embd, self.shared_ff
        for i in range(self.n_layers if ff else 0):
            shexp = ((f"blk.{i}.ffn_gate_shexp.weight", (e, ff)), (f"blk.{i}.ffn_up_shexp.weight", (e, ff)))
            out += [(name, shape, self.qtype) for name, shape in (*shexp, (f"blk.{i}.ffn_down_shexp.weight", (ff, e)))]
        return out

    def _qtype_of(self, name: str, layer: int | None) -> gguf.GGMLQuantizationType:
        from ggprof.model.reference import use_more_bits

        if self.expert_qtype is not None and "_exps." in name:
            return self.expert_qtype
        if self.head_qtype is not None and name == "output.weight":
            return self.head_qtype
        more = layer is not None and use_more_bits(layer, self.n_layers)
        if self.more_bits_qtype is not None and more and name.endswith(("attn_v.weight", "ffn_down.weight")):
            return self.more_bits_qtype
        return self.qtype


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


def ssm_keys(arch: str, conv: int, inner: int, state: int, groups: int, rank: int) -> dict[str, int]:
    """A gated delta net's (or Mamba's) shape keys, as llama.cpp's converter writes them."""
    keys = {"conv_kernel": conv, "inner_size": inner, "state_size": state, "group_count": groups}
    return {**{f"{arch}.ssm.{k}": v for k, v in keys.items()}, f"{arch}.ssm.time_step_rank": rank}


# Qwen3.6-27B (https://huggingface.co/Qwen/Qwen3.6-27B/blob/main/config.json, the shape of
# Qwen3.5-27B): 64 layers of 5120, FFN 17408, vocabulary 248320, untied; every 4th layer attends
# (24 heads of 256, gated: q_proj 2 x 6144 wide; 4 KV heads), the others are gated delta nets
# (16 key heads and 48 value heads of 128, conv kernel 4), and one MTP block (mtp_num_hidden_layers
# 1). Parameters: 64 FFNs of 267.4M, 16 attentions of 104.9M, 48 delta nets of 115.9M (in_proj_qkv
# 5120 x 10240, in_proj_z 5120 x 6144, out_proj 6144 x 5120, a and b 5120 x 48), embedding and head
# 1,271.4M each: 26.90B. Written in llama's layout (attention of 73.4M a layer) with the FFN
# widened to 19968 so the layers hold the same 26.87B; the 65th block is the MTP head (nextn).
QWEN36_27B = Shape(
    arch="qwen35", n_layers=65, n_embd=5120, n_heads=24, n_kv_heads=4, head_dim=256, n_ff=19968, vocab=248320,
    context=262144, tokens=False, file_type=None, name="Qwen3.6-27B",
    extra={"qwen35.nextn_predict_layers": 1, **ssm_keys("qwen35", 4, 6144, 128, 16, 48)},
)  # fmt: skip
# Qwen3.6-35B-A3B (https://huggingface.co/Qwen/Qwen3.6-35B-A3B/blob/main/config.json): 40 layers of
# 2048, 256 routed experts of 512 (8 a token) and a shared expert of 512, vocabulary 248320,
# untied; every 4th layer attends (16 heads of 256, gated; 2 KV heads), the others are gated delta
# nets (16 key heads and 32 value heads of 128); one MTP block. 34.66B parameters, 2.95B a token
# (the head's 0.51B included). In llama's layout the shared expert is widened to 2560 to hold what
# the delta nets and the gate add beyond llama's attention (13.2M a layer): 34.63B, 2.90B a token.
QWEN36_35B_A3B = Shape(
    arch="qwen35moe", n_layers=41, n_embd=2048, n_heads=16, n_kv_heads=2, head_dim=256, n_ff=512, vocab=248320,
    n_experts=256, n_experts_used=8, shared_ff=2560, context=262144, tokens=False, file_type=None,
    name="Qwen3.6-35B-A3B",
    extra={"qwen35moe.nextn_predict_layers": 1, **ssm_keys("qwen35moe", 4, 4096, 128, 16, 32)},
)  # fmt: skip
# Llama-3.2-1B (https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct/blob/main/config.json):
# 16 layers of 2048, 32 heads of 64, 8 KV heads, FFN 8192, vocabulary 128256, tied.
LLAMA_3_2_1B = replace(
    LLAMA_3_1_8B_F16, n_layers=16, n_embd=2048, n_heads=32, n_kv_heads=8, head_dim=64, n_ff=8192, tied=True,
    name="Llama-3.2-1B",
)  # fmt: skip
# Qwen2.5-Coder-32B (https://huggingface.co/Qwen/Qwen2.5-Coder-32B-Instruct/blob/main/config.json):
# 64 layers of 5120, 40 heads, 8 KV heads of 128, FFN 27648, vocabulary 152064, untied (biases
# left out); Qwen2.5-Coder-3B (https://huggingface.co/Qwen/Qwen2.5-Coder-3B/blob/main/config.json):
# 36 layers of 2048, 16 heads, 2 KV heads of 128, FFN 11008, vocabulary 151936, tied.
QWEN25_CODER_32B = Shape(
    arch="qwen2", n_layers=64, n_embd=5120, n_heads=40, n_kv_heads=8, n_ff=27648, vocab=152064, context=32768,
    tokens=False, file_type=None, name="Qwen2.5-Coder-32B",
)  # fmt: skip
# Qwen2.5-Coder-1.5B (https://huggingface.co/Qwen/Qwen2.5-Coder-1.5B-Instruct/blob/main/config.json):
# 28 layers of 1536, 12 heads, 2 KV heads of 128, FFN 8960, vocabulary 151936, tied;
# Qwen2.5-Coder-0.5B (https://huggingface.co/Qwen/Qwen2.5-Coder-0.5B-Instruct/blob/main/config.json):
# 24 layers of 896, 14 heads, 2 KV heads of 64, FFN 4864, vocabulary 151936, tied.
QWEN25_CODER_1_5B = replace(
    QWEN25_CODER_32B, n_layers=28, n_embd=1536, n_heads=12, n_kv_heads=2, n_ff=8960, vocab=151936, tied=True,
    name="Qwen2.5-Coder-1.5B",
)  # fmt: skip
QWEN25_CODER_0_5B = replace(
    QWEN25_CODER_32B, n_layers=24, n_embd=896, n_heads=14, n_kv_heads=2, n_ff=4864, vocab=151936, tied=True,
    name="Qwen2.5-Coder-0.5B",
)  # fmt: skip
QWEN25_CODER_3B = replace(
    QWEN25_CODER_32B, n_layers=36, n_embd=2048, n_heads=16, n_kv_heads=2, n_ff=11008, vocab=151936, tied=True,
    name="Qwen2.5-Coder-3B",
)  # fmt: skip

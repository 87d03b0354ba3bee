"""`ggprof synth`: synthetic GGUF models of named shapes that llama.cpp loads and runs.

Decode speed depends on the bytes a token reads and the kernels that read them, not on
the weight values, so a random model profiles a machine for a model nobody downloaded.
Quantized blocks are written directly (random quants, one normal fp16 scale per block),
so writing costs little more than the disk: no NaN, no Inf, no denormals anywhere.
Files are cached in the user cache directory and written atomically.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ggprof.errors import BadInputError
from ggprof.model.ggml import GGML_TYPES_BY_NAME
from ggprof.model.layout import LlamaDims, llama_tensors
from ggprof.paths import cache_dir

SYNTH_VERSION = 1
# The weight types synth writes, with llama.cpp's file type (general.file_type) for each;
# block sizes and bytes per block come from ggml's one table (ggprof.model.ggml).
QUANTS = {"q4_0": 2, "q8_0": 7, "f16": 1}
_SCALE = np.float16(0.0125)  # every block's scale: small, normal, finite
_POOL_BYTES = 1 << 24
VOCAB = 32000


@dataclass(frozen=True)
class SynthShape:
    """A llama-architecture model shape (GQA; MoE when n_experts > 0)."""

    name: str
    n_embd: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    n_ff: int
    description: str
    tied: bool = False
    n_experts: int = 0
    n_experts_used: int = 0
    context: int = 8192
    vocab: int = VOCAB

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_heads

    def tensors(self) -> list[tuple[str, tuple[int, ...], bool]]:
        """(name, ggml shape, quantized?) in llama.cpp's layout (ggprof.model.layout); norms and
        the router stay f32."""
        kv = self.n_kv_heads
        dims = LlamaDims(self.n_layers, self.n_embd, self.n_heads, self.head_dim, self.n_ff, self.vocab, lambda _: kv)
        layout = llama_tensors(replace(dims, tied=self.tied, n_experts=self.n_experts))
        return [(t.name, t.shape, t.role == "weight") for t in layout]

    @property
    def n_params(self) -> int:
        return sum(int(np.prod(shape)) for _, shape, _ in self.tensors())

    def size_bytes(self, quant: str) -> int:
        return sum(_nbytes(shape, quant, q) for _, shape, q in self.tensors())


SHAPES: dict[str, SynthShape] = {
    s.name: s
    for s in (
        SynthShape("tiny", 512, 8, 8, 2, 1536, "dense llama, GQA 4:1 (~60M params)"),
        SynthShape("small", 1024, 24, 16, 4, 4096, "dense llama, GQA 4:1 (~430M params): the bench default"),
        SynthShape("small-tied", 1024, 24, 16, 4, 4096, "as small, tied embeddings (no output.weight)", tied=True),
        SynthShape("1b", 2048, 16, 32, 8, 8192, "Llama-3.2-1B-like, GQA 4:1 (~1.1B params)"),
        SynthShape("3b", 3072, 28, 24, 8, 8192, "Llama-3.2-3B-like, GQA 3:1 (~3.0B params)"),
        SynthShape("8b", 4096, 32, 32, 8, 14336, "Llama-3-8B-like, GQA 4:1 (~7.2B params)"),
        SynthShape(
            "moe",
            1024,
            8,
            16,
            4,
            2816,
            "Mixtral-like MoE, 8 experts, 2 active (~640M params)",
            n_experts=8,
            n_experts_used=2,
        ),
    )
}
DEFAULT_SHAPE = "small"
DEFAULT_QUANT = "q4_0"


def get_shape(name: str) -> SynthShape:
    if name not in SHAPES:
        raise BadInputError(f"unknown shape {name!r} (one of: {', '.join(SHAPES)})")
    return SHAPES[name]


def default_path(shape: str, quant: str) -> Path:
    return cache_dir() / "synth" / f"{shape}-{quant}-v{SYNTH_VERSION}.gguf"


def ensure_model(shape: str = DEFAULT_SHAPE, quant: str = DEFAULT_QUANT, path: Path | None = None) -> Path:
    """The cached synthetic model (written now if missing)."""
    target = path or default_path(shape, quant)
    if target.is_file() and target.stat().st_size >= get_shape(shape).size_bytes(quant):
        return target
    try:
        return write_model(get_shape(shape), quant, target)
    except OSError as e:
        raise BadInputError(
            f"cannot write the synthetic model {target}: {e.strerror or e} "
            "(set GGPROF_CACHE_DIR to a writable folder, or pass MODEL.gguf)"
        ) from None


def write_model(shape: SynthShape, quant: str, path: Path, rng_seed: int = 0) -> Path:
    import gguf

    if quant not in QUANTS:
        raise BadInputError(f"unknown quant {quant!r} (one of: {', '.join(QUANTS)})")
    qtype, ftype = GGML_TYPES_BY_NAME[quant].id, QUANTS[quant]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    rng = np.random.default_rng(rng_seed)
    pool = rng.integers(0, 256, _POOL_BYTES, dtype=np.uint8)
    w = gguf.GGUFWriter(tmp, "llama")
    _metadata(w, shape, ftype)
    tensors = shape.tensors()
    for name, ggml_shape, quantized in tensors:
        raw = gguf.GGMLQuantizationType(qtype) if quantized else gguf.GGMLQuantizationType.F32
        nbytes = _nbytes(ggml_shape, quant, quantized)
        w.add_tensor_info(name, tuple(reversed(ggml_shape)), np.dtype(np.float32), nbytes, raw_dtype=raw)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for i, (_, ggml_shape, quantized) in enumerate(tensors):
            w.write_tensor_data(_data(ggml_shape, quant, quantized, pool, i))
        w.close()
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _nbytes(shape: tuple[int, ...], quant: str, quantized: bool) -> int:
    n = int(np.prod(shape))
    if not quantized:
        return n * 4
    t = GGML_TYPES_BY_NAME[quant]
    return n // t.block_size * t.type_size


def _data(shape: tuple[int, ...], quant: str, quantized: bool, pool: np.ndarray, salt: int) -> np.ndarray:
    """One tensor's bytes: random quants from a pool (offset by `salt`), a normal scale per block."""
    n = int(np.prod(shape))
    if not quantized:
        return np.ones(n, dtype=np.float32)  # norms and the MoE router: finite, neutral
    if quant == "f16":
        return _f16(n, pool, salt)
    t = GGML_TYPES_BY_NAME[quant]
    blocks = np.empty((n // t.block_size, t.type_size), dtype=np.uint8)
    flat = blocks.reshape(-1)
    for start, chunk in _pool_chunks(flat.size, pool, salt):
        flat[start : start + chunk.size] = chunk
    blocks[:, 0:2] = np.frombuffer(_SCALE.tobytes(), dtype=np.uint8)
    return blocks.reshape(-1)


def _f16(n: int, pool: np.ndarray, salt: int) -> np.ndarray:
    """fp16 weights in +-[2^-10, 2^-5): random mantissa and sign, exponents only in the normal range."""
    bits = np.empty(n, dtype=np.uint16)
    raw = bits.view(np.uint8)
    for start, chunk in _pool_chunks(raw.size, pool, salt):
        raw[start : start + chunk.size] = chunk
    # keep sign and mantissa, force exponent field to 5..9 (2^-10 .. 2^-6 times 1.x): never 0 or 31
    exponent = (5 + (bits >> 10) % 5).astype(np.uint16)
    return ((bits & 0x83FF) | (exponent << 10)).view(np.float16)


def _pool_chunks(size: int, pool: np.ndarray, salt: int) -> Iterator[tuple[int, np.ndarray]]:
    offset = (salt * 7919) % pool.size
    start = 0
    while start < size:
        chunk = pool[offset : offset + min(size - start, pool.size - offset)]
        yield start, chunk
        start += chunk.size
        offset = 0


def _metadata(w: object, s: SynthShape, ftype: int) -> None:
    import gguf

    assert isinstance(w, gguf.GGUFWriter)
    w.add_name(f"ggprof synthetic {s.name}")
    w.add_file_type(ftype)
    w.add_context_length(s.context)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layers)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_heads)
    w.add_head_count_kv(s.n_kv_heads)
    w.add_rope_dimension_count(s.head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(s.vocab)
    if s.n_experts:
        w.add_expert_count(s.n_experts)
        w.add_expert_used_count(s.n_experts_used)
    _tokenizer(w, s.vocab)


def _tokenizer(w: object, vocab: int) -> None:
    """A SentencePiece-style vocabulary llama.cpp accepts: <unk> <s> </s>, 256 byte tokens, fillers."""
    import gguf

    assert isinstance(w, gguf.GGUFWriter)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"\u2581t{i}" for i in range(vocab - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (vocab - 259)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([-float(i) for i in range(vocab)])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)

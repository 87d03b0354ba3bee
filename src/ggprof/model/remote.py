"""A model's header from what a server says about it, for a model whose file is on another
machine: Ollama's `/api/show` with `verbose` lists the GGUF metadata (`model_info`) and the
tensor table (`tensors`: name, type, shape in GGUF order). The result is a GGUFHeader like
the one read from a file, so the same interpretation (ggprof.model.spec) applies.

The answer is untrusted: keys, types, shapes and counts are checked and bounded as the file
reader bounds them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ggprof.errors import GGUFError
from ggprof.model.ggml import GGML_TYPES_BY_NAME, ValueType
from ggprof.model.gguf import INLINE_ARRAY_MAX, MAX_DIMS, MAX_NAME_BYTES, ArrayValue, GGUFHeader, MetaValue, TensorInfo

MAX_TENSORS = 1 << 20
MAX_KEYS = 1 << 16
MAX_DIM = 1 << 40
# the shapes bounded in total, not only per dimension: four dimensions of 2^40 are 10^48 bytes.
# The largest open models are about 2 TB at 16 bits (2026).
MAX_MODEL_BYTES = 1 << 45  # 35 TB


def header_from_show(name: str, answer: Any) -> GGUFHeader:
    """The header of an Ollama model from `/api/show` verbose; GGUFError when it lacks the
    metadata or the tensor table (older Ollama versions do not send tensors)."""
    where = Path(f"ollama:{name}")
    info = answer.get("model_info") if isinstance(answer, dict) else None
    tensors = answer.get("tensors") if isinstance(answer, dict) else None
    if not isinstance(info, dict) or not info:
        raise GGUFError(where, "the server's /api/show has no model_info (the GGUF metadata)")
    if not isinstance(tensors, list) or not tensors:
        raise GGUFError(where, "the server's /api/show lists no tensors (an older Ollama): give the model file")
    if len(info) > MAX_KEYS or len(tensors) > MAX_TENSORS:
        raise GGUFError(where, "the server's /api/show lists more keys or tensors than a model has")
    metadata = {str(k)[:256]: _meta(where, str(k), v) for k, v in info.items()}
    table = tuple(_tensor(where, i, t) for i, t in enumerate(tensors))
    names = {t.name for t in table}
    if len(names) < len(table):  # as the file reader refuses them
        raise GGUFError(where, "the server's /api/show lists a tensor name twice")
    size = sum(t.n_bytes for t in table)
    if size > MAX_MODEL_BYTES:
        raise GGUFError(
            where, f"the server's /api/show lists tensors of {size / 1e12:,.0f} TB in all; no model is that large"
        )
    return GGUFHeader(
        path=where,
        file_size_bytes=size,
        version=3,
        alignment=32,
        data_offset=0,
        metadata=metadata,
        tensors=table,
    )


def _meta(where: Path, key: str, v: Any) -> MetaValue:
    if isinstance(v, bool):
        return MetaValue(ValueType.BOOL, v)
    if isinstance(v, int):
        if v < 0:
            return MetaValue(ValueType.INT64 if v < -(1 << 31) else ValueType.INT32, v)
        return MetaValue(ValueType.UINT64 if v >= 1 << 32 else ValueType.UINT32, v)
    if isinstance(v, float):
        return MetaValue(ValueType.FLOAT32, v)
    if isinstance(v, str):
        return MetaValue(ValueType.STRING, v[: 1 << 20])
    if isinstance(v, list):
        first = next((x for x in v if x is not None), 0)
        item = _meta(where, key, first).type if not isinstance(first, (list, dict)) else ValueType.UINT8
        items = tuple(v) if len(v) <= INLINE_ARRAY_MAX and all(not isinstance(x, (list, dict)) for x in v) else None
        return MetaValue(ValueType.ARRAY, ArrayValue(item, len(v), items))
    if v is None:
        return MetaValue(ValueType.ARRAY, ArrayValue(ValueType.UINT8, 0, None))
    raise GGUFError(where, f"model_info key {key[:80]!r} holds a {type(v).__name__}")


def _tensor(where: Path, index: int, t: Any) -> TensorInfo:
    if not isinstance(t, dict):
        raise GGUFError(where, f"tensor {index} is not an object")
    name, kind, shape = t.get("name"), t.get("type"), t.get("shape")
    if not isinstance(name, str) or not 0 < len(name.encode()) <= MAX_NAME_BYTES:
        raise GGUFError(where, f"tensor {index} has no valid name")
    ggml = GGML_TYPES_BY_NAME.get(str(kind).lower())
    if ggml is None:
        raise GGUFError(where, f"tensor {name!r} has an unknown type {str(kind)[:20]!r}")
    if not isinstance(shape, list) or not 0 < len(shape) <= MAX_DIMS:
        raise GGUFError(where, f"tensor {name!r} has no valid shape")
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 < d <= MAX_DIM for d in shape):
        raise GGUFError(where, f"tensor {name!r} has no valid shape")
    if shape[0] % ggml.block_size:
        raise GGUFError(where, f"tensor {name!r}: row length {shape[0]} is not a multiple of {ggml.name}'s block")
    return TensorInfo(name=name, shape=tuple(shape), ggml_type=ggml, offset=0, shard=0)

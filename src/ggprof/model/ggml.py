"""ggml tensor types, llama.cpp file types and GGUF value types (ABI numbers, stable on disk).

Block sizes and bytes per block follow ggml/src/ggml-common.h; tests cross-check them
against the `gguf` package's GGML_QUANT_SIZES.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from ggprof.runfacts import KV_CACHE_TYPES


@dataclass(frozen=True)
class GGMLType:
    """One ggml tensor type: `block_size` elements stored in `type_size` bytes."""

    id: int
    name: str
    block_size: int
    type_size: int

    @property
    def bytes_per_element(self) -> float:
        return self.type_size / self.block_size


_QK_K = 256
_TYPES = [
    GGMLType(0, "F32", 1, 4),
    GGMLType(1, "F16", 1, 2),
    GGMLType(2, "Q4_0", 32, 18),
    GGMLType(3, "Q4_1", 32, 20),
    GGMLType(6, "Q5_0", 32, 22),
    GGMLType(7, "Q5_1", 32, 24),
    GGMLType(8, "Q8_0", 32, 34),
    GGMLType(9, "Q8_1", 32, 36),
    GGMLType(10, "Q2_K", _QK_K, 84),
    GGMLType(11, "Q3_K", _QK_K, 110),
    GGMLType(12, "Q4_K", _QK_K, 144),
    GGMLType(13, "Q5_K", _QK_K, 176),
    GGMLType(14, "Q6_K", _QK_K, 210),
    GGMLType(15, "Q8_K", _QK_K, 292),
    GGMLType(16, "IQ2_XXS", _QK_K, 66),
    GGMLType(17, "IQ2_XS", _QK_K, 74),
    GGMLType(18, "IQ3_XXS", _QK_K, 98),
    GGMLType(19, "IQ1_S", _QK_K, 50),
    GGMLType(20, "IQ4_NL", 32, 18),
    GGMLType(21, "IQ3_S", _QK_K, 110),
    GGMLType(22, "IQ2_S", _QK_K, 82),
    GGMLType(23, "IQ4_XS", _QK_K, 136),
    GGMLType(24, "I8", 1, 1),
    GGMLType(25, "I16", 1, 2),
    GGMLType(26, "I32", 1, 4),
    GGMLType(27, "I64", 1, 8),
    GGMLType(28, "F64", 1, 8),
    GGMLType(29, "IQ1_M", _QK_K, 56),
    GGMLType(30, "BF16", 1, 2),
    GGMLType(34, "TQ1_0", _QK_K, 54),
    GGMLType(35, "TQ2_0", _QK_K, 66),
    GGMLType(39, "MXFP4", 32, 17),
    GGMLType(40, "NVFP4", 64, 36),
    GGMLType(41, "Q1_0", 128, 18),
    GGMLType(42, "Q2_0", 64, 18),
]
GGML_TYPES: dict[int, GGMLType] = {t.id: t for t in _TYPES}
GGML_TYPES_BY_NAME: dict[str, GGMLType] = {t.name.lower(): t for t in _TYPES}


def kv_cache_type(name: str) -> GGMLType:
    """The ggml type behind a KV cache type name; ValueError for names llama.cpp refuses."""
    key = name.strip().lower()
    if key not in KV_CACHE_TYPES:
        raise ValueError(f"unknown cache type {name!r} (one of: {', '.join(KV_CACHE_TYPES)})")
    return GGML_TYPES_BY_NAME[key]


# llama_ftype (include/llama.h): general.file_type -> the label people know.
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 4: "Q4_1_SOME_F16", 7: "Q8_0", 8: "Q5_0",
    9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S",
    15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS",
    21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S",
    27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
    36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}  # fmt: skip


class ValueType(IntEnum):
    """GGUF metadata value types (GGUF spec)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct format character and size of each fixed-size value type
SCALAR_FORMATS: dict[int, tuple[str, int]] = {
    ValueType.UINT8: ("B", 1),
    ValueType.INT8: ("b", 1),
    ValueType.UINT16: ("H", 2),
    ValueType.INT16: ("h", 2),
    ValueType.UINT32: ("I", 4),
    ValueType.INT32: ("i", 4),
    ValueType.FLOAT32: ("f", 4),
    ValueType.BOOL: ("?", 1),
    ValueType.UINT64: ("Q", 8),
    ValueType.INT64: ("q", 8),
    ValueType.FLOAT64: ("d", 8),
}

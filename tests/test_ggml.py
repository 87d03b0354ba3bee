"""ggprof's own ggml tables agree with the gguf package's (written by llama.cpp's authors)."""

import gguf

from ggprof.model.ggml import FILE_TYPES, GGML_TYPES, kv_cache_type
from ggprof.runfacts import KV_CACHE_TYPES


def test_block_and_type_sizes_match_gguf_package() -> None:
    for qtype, (block, size) in gguf.GGML_QUANT_SIZES.items():
        ours = GGML_TYPES[int(qtype)]
        if qtype.name == "Q8_1":  # gguf-py keeps the old 2 x float header; ggml-common.h: 2 x half + 32
            assert (ours.block_size, ours.type_size) == (32, 36)
            continue
        assert (ours.name, ours.block_size, ours.type_size) == (qtype.name, block, size)


def test_every_gguf_type_is_known() -> None:
    assert {int(t) for t in gguf.GGMLQuantizationType} <= set(GGML_TYPES)


def test_file_type_labels_match_llama_ftype() -> None:
    for ft in gguf.LlamaFileType:
        if int(ft) in FILE_TYPES and ft.name.startswith("MOSTLY_"):
            assert FILE_TYPES[int(ft)] == ft.name.removeprefix("MOSTLY_")
    assert FILE_TYPES[15] == "Q4_K_M"


def test_kv_cache_types() -> None:
    assert kv_cache_type("q8_0").bytes_per_element == 34 / 32
    assert kv_cache_type("F16").type_size == 2
    assert "q4_0" in KV_CACHE_TYPES

"""Every figure inspect reports, pinned to a hand computation on models written here."""

from __future__ import annotations

from pathlib import Path

import pytest
from ggufs import Shape, write_model

from ggprof.model.spec import ModelSpec, load_model

# Q8_0 stores 32 weights in 34 bytes; F32 norms 4 bytes a weight.
E, FF, V, HD = 256, 512, 1000, 32  # the default Shape: n_embd, n_ff, vocab, head dim (256 / 8 heads)


def q8(n: int) -> int:
    return n // 32 * 34


def load(tmp_path: Path, shape: Shape, name: str = "m.gguf") -> ModelSpec:
    files = write_model(tmp_path / name, shape)
    return load_model(files[0])


def test_dense_untied_figures(tmp_path: Path) -> None:
    spec = load(tmp_path, Shape())
    kv = 2 * HD  # 2 KV heads x 32
    per_layer = 2 * E * 4 + q8(E * E) * 2 + q8(E * kv) * 2 + q8(E * FF) * 3
    assert spec.layer_bytes() == [per_layer, per_layer]
    embd, output, norm = q8(E * V), q8(E * V), E * 4
    assert spec.tensor_bytes == 2 * per_layer + embd + output + norm
    # token_embd: one row (E weights) per token; output.weight read in full
    assert spec.decode_bytes_per_token == 2 * per_layer + q8(E) + output + norm == 1_461_136
    # 2 (K and V) x 2 layers x 2 KV heads x 32 dims x 2 bytes (f16)
    assert spec.kv_bytes_per_token() == 2 * 2 * 2 * 32 * 2 == 512
    assert spec.kv_bytes_per_token("q8_0", "q8_0") == 2 * 2 * (2 * 32 // 32 * 34) == 272
    assert spec.kv_bytes_per_token("f16", "q4_0") == 2 * (2 * 32 * 2) + 2 * (2 * 32 // 32 * 18) == 328
    n_params = 2 * (2 * E + E * E * 2 + E * kv * 2 + E * FF * 3) + E * V * 2 + E
    assert spec.n_params == n_params
    assert (spec.architecture, spec.quant_label, spec.name) == ("llama", "Q8_0", "test model")
    assert (spec.n_layers, spec.n_heads, spec.n_kv_heads, spec.head_dim_k, spec.head_dim_v) == (2, 8, 2, 32, 32)
    assert (spec.context_length, spec.vocab_size, spec.tied_embeddings) == (4096, 1000, False)
    assert spec.bytes_by_type() == {"Q8_0": spec.tensor_bytes - 5 * E * 4, "F32": 5 * E * 4}
    assert spec.tensors_by_type() == {"Q8_0": 16, "F32": 5}
    assert spec.file_size_bytes == (tmp_path / "m.gguf").stat().st_size


def test_tied_embeddings_lm_head_reads_all_of_token_embd(tmp_path: Path) -> None:
    untied = load(tmp_path, Shape(), "u.gguf")
    tied = load(tmp_path, Shape(tied=True), "t.gguf")
    assert tied.tied_embeddings and not untied.tied_embeddings
    # untied reads output.weight (E*V) + one embd row; tied reads token_embd (E*V) in full
    assert tied.decode_bytes_per_token == untied.decode_bytes_per_token - q8(E)
    assert tied.n_params == untied.n_params - E * V
    assert any("tied_embeddings" in r for r in tied.decode_rules())


def test_gqa_kv_per_token_8b_and_70b_shapes(tmp_path: Path) -> None:
    """docs/physics.md: 8B MHA 512 KiB/token, GQA-8 128 KiB/token, 70B MHA 2.5 MiB/token."""
    mha = load(
        tmp_path,
        Shape(n_layers=32, n_embd=4096, n_heads=32, n_kv_heads=32, n_ff=128, vocab=128, tokens=False),
        "8b-mha.gguf",
    )
    gqa = load(
        tmp_path,
        Shape(n_layers=32, n_embd=4096, n_heads=32, n_kv_heads=8, n_ff=128, vocab=128, tokens=False),
        "8b-gqa.gguf",
    )
    big = load(
        tmp_path,
        Shape(n_layers=80, n_embd=8192, n_heads=64, n_kv_heads=64, n_ff=128, vocab=128, tokens=False),
        "70b-mha.gguf",
    )
    assert mha.kv_bytes_per_token() == 2 * 32 * 32 * 128 * 2 == 512 * 1024
    assert mha.kv_bytes_at(8192) == 4 * 2**30
    assert gqa.kv_bytes_per_token() == 128 * 1024
    assert gqa.kv_bytes_at(8192) == 2**30
    assert big.kv_bytes_per_token() == int(2.5 * 2**20)
    assert mha.vocab_size == 128  # from {arch}.vocab_size when there is no tokenizer


def test_per_layer_kv_heads(tmp_path: Path) -> None:
    spec = load(tmp_path, Shape(n_layers=3, n_kv_heads=[2, 4, 1]))
    assert spec.n_kv_heads == [2, 4, 1]
    assert spec.kv_layer_bytes_per_token() == [2 * 32 * 2 * 2, 4 * 32 * 2 * 2, 1 * 32 * 2 * 2]
    assert spec.kv_bytes_per_token() == (2 + 4 + 1) * 32 * 2 * 2


def test_moe_counts_active_experts(tmp_path: Path) -> None:
    spec = load(tmp_path, Shape(n_experts=8, n_experts_used=2))
    exps = 3 * q8(E * FF * 8)  # gate, up, down: all 8 experts
    router = E * 8 * 4
    attn = 2 * E * 4 + q8(E * E) * 2 + q8(E * 2 * HD) * 2
    assert spec.layer_bytes() == [attn + router + exps] * 2
    # 2 of 8 experts per token; router and attention in full
    assert spec.decode_bytes_per_token == 2 * (attn + router + exps * 2 // 8) + q8(E) + q8(E * V) + E * 4
    assert (spec.n_experts, spec.n_experts_used) == (8, 2)
    assert any("moe" in r for r in spec.decode_rules())


def test_split_model_is_one_model(tmp_path: Path) -> None:
    whole = load(tmp_path, Shape(), "whole.gguf")
    files = write_model(tmp_path / "split.gguf", Shape(), split_max_tensors=7)
    assert [f.name for f in files] == [f"split-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for shard in files:  # any shard names the whole model
        spec = load_model(shard)
        assert spec.paths == tuple(files)
        assert spec.file_size_bytes == sum(f.stat().st_size for f in files)
        assert spec.n_params == whole.n_params
        assert spec.decode_bytes_per_token == whole.decode_bytes_per_token
        assert len(spec.tensors) == len(whole.tensors)


def test_sliding_window_default_pattern_and_explicit_array(tmp_path: Path) -> None:
    from ggprof.model.archs import SWA_DEFAULTS

    gemma = Shape(arch="gemma3", n_layers=12, extra={"gemma3.attention.sliding_window": 512})
    spec = load_model(write_model(tmp_path / "g.gguf", gemma)[0], swa_default=SWA_DEFAULTS.get)
    # llama.cpp gemma3: every 6th layer (5, 11) is global, the rest use the window
    assert [i for i, swa in enumerate(spec.swa_layers) if not swa] == [5, 11]
    assert spec.sliding_window == 512
    per_layer = 2 * HD * 2 * 2
    assert spec.kv_bytes_at(100) == 12 * per_layer * 100
    assert spec.kv_bytes_at(10_000) == 2 * per_layer * 10_000 + 10 * per_layer * 512
    pattern = [True, False] * 6
    explicit = Shape(
        arch="gemma3",
        n_layers=12,
        extra={"gemma3.attention.sliding_window": 64, "gemma3.attention.sliding_window_pattern": pattern},
    )
    spec2 = load_model(write_model(tmp_path / "e.gguf", explicit)[0])
    assert list(spec2.swa_layers) == pattern
    assert "metadata" in (spec2.swa_pattern_source or "")
    no_default = load_model(write_model(tmp_path / "n.gguf", gemma)[0])  # no rule known: no SWA
    assert not any(no_default.swa_layers)


def test_mla_caches_latent(tmp_path: Path) -> None:
    """A DeepSeek GGUF converted since llama.cpp PR #12801 states the heads' own widths
    (key_length_mla): llama.cpp caches one latent of kv_lora_rank + the rope's width a layer."""
    latent = {"deepseek2.attention.kv_lora_rank": 512, "deepseek2.rope.dimension_count": 64}
    shape = Shape(arch="deepseek2", extra=latent | {"deepseek2.attention.key_length_mla": 192})
    spec = load(tmp_path, shape)
    assert spec.kv_layout == "mla"
    assert spec.kv_bytes_per_token() == 2 * (512 + 64) * 2  # per layer: one latent of 576 f16


def test_an_older_deepseek_gguf_caches_every_head(tmp_path: Path) -> None:
    """One converted before it (no key_length_mla) is not cached as a latent: every head's K (its
    key_length, 192) and V (value_length, 128), as DeepSeek-R1's January 2025 GGUFs run."""
    shape = Shape(
        arch="deepseek2", n_heads=16, n_kv_heads=16, n_embd=256,
        extra={
            "deepseek2.attention.kv_lora_rank": 512, "deepseek2.rope.dimension_count": 64,
            "deepseek2.attention.key_length": 192, "deepseek2.attention.value_length": 128,
        },
    )  # fmt: skip
    spec = load(tmp_path, shape)
    assert spec.kv_layout == "gqa"
    assert spec.kv_bytes_per_token() == 2 * 16 * (192 + 128) * 2  # per layer: 16 heads' K and V in f16


@pytest.mark.parametrize("bad", [0, 3])
def test_per_layer_array_must_match_layers(tmp_path: Path, bad: int) -> None:
    from ggprof.errors import GGUFError

    files = write_model(
        tmp_path / "x.gguf",
        Shape(n_layers=2, n_kv_heads=[2] * bad) if bad else Shape(extra={"llama.attention.head_count_kv": "two"}),
    )
    with pytest.raises(GGUFError, match="head_count_kv"):
        load_model(files[0])


def test_real_gemma3_270m(gemma_path: Path) -> None:
    from ggprof.model.archs import SWA_DEFAULTS

    spec = load_model(gemma_path, swa_default=SWA_DEFAULTS.get)
    assert spec.architecture == "gemma3"
    assert (spec.n_layers, spec.n_heads, spec.n_kv_heads) == (18, 4, 1)
    assert (spec.head_dim_k, spec.head_dim_v) == (256, 256)
    assert spec.tied_embeddings
    assert spec.n_params == 268_098_176
    assert spec.vocab_size == 262_144
    assert spec.quant_label == "Q4_K_M"
    assert spec.file_size_bytes == 253_113_024
    assert spec.sliding_window == 512 and sum(spec.swa_layers) == 15
    # tied: the whole Q8_0 token_embd (640 x 262144) is the LM head
    embd = next(t for t in spec.tensors if t.name == "token_embd.weight")
    assert embd.ggml_type.name == "Q8_0" and embd.n_bytes == 640 * 262_144 // 32 * 34
    assert spec.decode_bytes_per_token == spec.tensor_bytes
    assert spec.kv_bytes_per_token() == 18 * 1 * (256 + 256) * 2
    assert sum(spec.layer_bytes()) + spec.non_layer_bytes == spec.tensor_bytes
    assert spec.bytes_by_type()["Q8_0"] > spec.bytes_by_type()["Q5_0"]

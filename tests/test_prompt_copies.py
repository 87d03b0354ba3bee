"""What a prompt's batch takes over the host link, and what the KV cache and flash attention
a report states change: each figure computed here from the model's shape by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ggufs import Shape, write_model
from support import in_process

from ggprof.model.spec import load_model
from ggprof.physics.placement import batch_expert_share, link_bytes_a_batch, placement
from ggprof.physics.roofline import PredictInputs

# 4 layers, 64 experts of which 2 are used a token, Q8_0 (34 bytes per 32 weights)
MOE = Shape(n_layers=4, n_embd=256, n_heads=8, n_ff=512, vocab=1000, n_experts=64, n_experts_used=2)
EXPERTS_A_LAYER = 3 * 256 * 512 * 64 * 34 // 32  # gate, up and down of the 64 experts


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("moe") / "moe.gguf", MOE)[0]


def test_a_batch_copies_only_the_experts_its_tokens_use(moe: Path) -> None:
    """ggml-backend copies, of an expert tensor in RAM, the experts a batch's tokens are routed to:
    the ceiling takes the 2 of 64 all tokens may share, the band 1 - (62/64)^B of them."""
    spec = load_model(moe)
    place = placement(spec, None, has_gpu=True, n_cpu_moe=4)
    assert place.cpu_expert_weight_bytes == 4 * EXPERTS_A_LAYER
    for batch in (32, 512):
        inputs = PredictInputs(prompt=batch, n_ubatch=batch)
        least = link_bytes_a_batch(spec, place, 0, inputs, least=True)
        assert least == 4 * EXPERTS_A_LAYER * 2 // 64  # only the experts: the rest of each layer is on the GPU
        routed = 1 - (62 / 64) ** batch
        assert batch_expert_share(spec, batch) == pytest.approx(routed, rel=1e-12)
        assert link_bytes_a_batch(spec, place, 0, inputs) == int(4 * EXPERTS_A_LAYER * routed)
    assert 1 - (62 / 64) ** 32 < 0.64  # a small batch of 32 uses well under every expert
    # below 32 tokens the CPU computes with what RAM holds: nothing crosses
    assert link_bytes_a_batch(spec, place, 0, PredictInputs(prompt=16, n_ubatch=16), least=True) == 0


def test_a_small_batch_still_reads_the_spilled_weights(moe: Path) -> None:
    """A batch under 32 tokens copies no weight in RAM to the GPU (the CPU computes them), but a
    GPU whose own weights spilled still reads them over the link: the expected reads every spilled
    byte, the ceiling none (a few tokens of a mixture use a few experts)."""
    spec = load_model(moe)
    place = placement(spec, None, has_gpu=True, n_cpu_moe=4)
    spilled = 10_000_000
    small = PredictInputs(prompt=16, n_ubatch=512)
    assert link_bytes_a_batch(spec, place, spilled, small) == spilled  # the experts in RAM: the CPU's
    assert link_bytes_a_batch(spec, place, spilled, small, least=True) == 0
    assert link_bytes_a_batch(spec, place, 0, small) == 0
    assert link_bytes_a_batch(spec, place, spilled, PredictInputs(prompt=0, n_ubatch=512)) == 0  # no prompt


def test_a_tied_embedding_is_not_copied_while_the_output_is_on_the_gpu(tmp_path: Path) -> None:
    """A tied token_embd: llama.cpp looks it up in RAM and gives the output layer its own copy on
    the GPU, so a fully offloaded prompt copies nothing and -ngl 4 (the output and layers 1-3)
    copies layer 0 alone; with -ngl 0 the output layer is the RAM's table, which a prompt runs for
    its last token only (a batch of 1, under the offload's 32): every layer crosses, not the table
    nor the output norm."""
    spec = load_model(write_model(tmp_path / "tied.gguf", Shape(n_layers=4, n_embd=256, n_heads=8, n_ff=512,
                                                                vocab=1000, tied=True))[0])  # fmt: skip
    embd = next(t.n_bytes for t in spec.tensors if t.name == "token_embd.weight")
    inputs = PredictInputs(prompt=512, n_ubatch=512)
    assert link_bytes_a_batch(spec, placement(spec, None, has_gpu=True), 0, inputs) == 0
    layer0 = sum(t.n_bytes for t in spec.tensors if t.layer == 0)
    assert link_bytes_a_batch(spec, placement(spec, 4, has_gpu=True), 0, inputs) == layer0
    layers = sum(t.n_bytes for t in spec.tensors if t.layer is not None)
    assert link_bytes_a_batch(spec, placement(spec, 0, has_gpu=True), 0, inputs) == layers
    assert layers > layer0 and sum(t.n_bytes for t in spec.tensors) > layers + embd  # the table and the norm stay


def test_check_reads_the_kv_cache_types_as_llama_cpp_spells_them(tmp_path: Path) -> None:
    """-ctk/-ctv (--cache-type-k/-v) on check, and a llama-bench row's type_k/type_v: q8_0 keeps
    34 bytes per 32 values where f16 keeps 64, so the KV cache at a depth is 17/32 of f16's."""
    dense = write_model(
        tmp_path / "dense.gguf", Shape(n_layers=4, n_embd=256, n_heads=8, n_kv_heads=8, n_ff=512, context=8192)
    )[0]
    args = ("check", str(dense), "--tg", "50", "--device", "rtx-4090", "--depth", "4096", "--json")

    def kv(*extra: str) -> int:
        r = in_process(*args, *extra)
        assert r.stderr == "" and r.stdout, r.stderr
        return int(json.loads(r.stdout)["predictions"][0]["kv_bytes_at_depth"])

    f16 = kv()
    assert f16 == 4096 * 4 * 2 * 256 * 2  # tokens x layers x (K and V) x width (8 KV heads of 32) x 2 bytes
    assert kv("-ctk", "q8_0", "-ctv", "q8_0") == f16 * 17 // 32
    assert kv("--cache-type-k", "Q8_0") == f16 // 2 + f16 // 2 * 17 // 32  # K alone, in llama.cpp's any case
    row = {"n_prompt": 0, "n_gen": 128, "n_depth": 4096, "backends": "CUDA", "n_gpu_layers": 99, "avg_ts": 50.0,
           "stddev_ts": 0.5, "type_k": "q8_0", "type_v": "q8_0"}  # fmt: skip
    (tmp_path / "rows.json").write_text(json.dumps([row]))
    r = in_process("check", str(dense), "--llama-bench", str(tmp_path / "rows.json"), "--device", "rtx-4090", "--json")
    assert json.loads(r.stdout)["predictions"][0]["kv_bytes_at_depth"] == f16 * 17 // 32
    bad = in_process(*args, "-ctk", "q9_9")
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: Invalid value for '-ctk'")


def test_flash_attention_stated_leaves_the_scores_out_of_the_compute_buffer(tmp_path: Path) -> None:
    """-fa on: no attention-score matrix (ubatch x context x heads, f32) in the compute buffer;
    llama.cpp's auto is counted with it (the estimate for a fit that must hold)."""
    dense = write_model(
        tmp_path / "dense.gguf", Shape(n_layers=4, n_embd=256, n_heads=8, n_kv_heads=8, n_ff=512, context=8192)
    )[0]
    args = ("check", str(dense), "--tg", "50", "--device", "rtx-4090", "--depth", "4096", "--json")

    def buffer(*extra: str) -> int:
        pools = json.loads(in_process(*args, *extra).stdout)["predictions"][0]["memory_pools"]
        return int(next(p for p in pools if p["pool"] == "gpu")["compute_buffer_bytes_estimate"])

    ctx = 4096 + 512 + 1  # what check allocates for a report: the depth, a prompt of 512 and the token decoded
    assert buffer() - buffer("-fa", "on") == 512 * ctx * 8 * 4
    assert buffer("-fa", "off") == buffer()


def test_an_allocated_context_counts_toward_the_gpus_memory(tmp_path: Path) -> None:
    """-c (--ctx-size) as llama-server takes it: the whole KV cache of that context is allocated,
    whatever the depth (4 layers x K and V x 256 values x 2 bytes = 4,096 bytes a token); -c 0 is
    the model's context; without -c, what the depth, a prompt of 512 and the token decoded need."""
    shape = Shape(n_layers=4, n_embd=256, n_heads=8, n_kv_heads=8, n_ff=512, context=8192)
    dense = write_model(tmp_path / "dense.gguf", shape)[0]
    args = ("check", str(dense), "--tg", "50", "--device", "rtx-4090", "--json")

    def kv(*extra: str) -> int:
        r = in_process(*args, *extra)
        assert r.stderr == "", r.stderr
        pools = json.loads(r.stdout)["predictions"][0]["memory_pools"]
        return int(next(p for p in pools if p["pool"] == "gpu")["kv_bytes"])

    assert kv() == (512 + 1) * 4096
    assert kv("-c", "4096") == 4096 * 4096
    assert kv("--ctx-size", "0") == 8192 * 4096
    (tmp_path / "rows.json").write_text("[]")
    both = in_process("check", str(dense), "--llama-bench", str(tmp_path / "rows.json"), "-c", "4096")
    assert both.exit_code == 2 and both.stderr.startswith("Error: -c: for --tg or --pp")
    types = in_process("check", str(dense), "--llama-bench", str(tmp_path / "rows.json"), "-ctk", "q8_0")
    assert types.exit_code == 2 and types.stderr.startswith("Error: -ctk: for --tg or --pp")

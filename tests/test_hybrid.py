"""Hybrid recurrent models read from the GGUF (ggprof.model.hybrid): only the attention layers
keep a KV cache, the others carry a fixed-size state, and draft (nextn) blocks are not part of a
plain decode. Each figure is worked by hand from the model's published shape, and checked
against llama.cpp's own recurrent-memory lines for the same shape."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ggufs import Q8_0, Shape, write_model
from support import in_process

from ggprof.machine.device import EfficiencyBand
from ggprof.model.spec import load_model
from ggprof.physics.roofline import PredictInputs, predict

LOGS = Path(__file__).parent / "data" / "logs"
MiB = 1 << 20


def _ssm(arch: str, conv: int, inner: int, state: int, groups: int, rank: int) -> dict[str, int]:
    return {
        f"{arch}.ssm.conv_kernel": conv,
        f"{arch}.ssm.inner_size": inner,
        f"{arch}.ssm.state_size": state,
        f"{arch}.ssm.group_count": groups,
        f"{arch}.ssm.time_step_rank": rank,
    }


# Qwen3-Next-80B-A3B as llama.cpp prints its hyperparameters (llama.cpp issue #17578's log:
# n_layer 48, n_head 16, n_head_kv 2, head dims 256, ssm_d_conv 4, ssm_d_inner 4096, ssm_d_state
# 128, ssm_dt_rank 32, ssm_n_group 16) and its config (full_attention_interval 4). The tensors
# are a small stand-in: KV and state sizes depend on the shape keys alone.
QWEN3_NEXT = Shape(
    arch="qwen3next",
    n_layers=48,
    n_embd=2048,
    n_heads=16,
    n_kv_heads=2,
    head_dim=256,
    n_ff=64,
    vocab=256,
    extra={"qwen3next.full_attention_interval": 4, **_ssm("qwen3next", 4, 4096, 128, 16, 32)},
)
# Qwen3.5/3.6-27B with its MTP block: 64 layers + 1 nextn, 4 KV heads of 256, value heads 48 of
# 128 (ssm inner 6144), key heads 16 of 128, conv kernel 4
QWEN35_27B = Shape(
    arch="qwen35",
    n_layers=65,
    n_embd=5120,
    n_heads=24,
    n_kv_heads=4,
    head_dim=256,
    n_ff=64,
    vocab=256,
    extra={"qwen35.nextn_predict_layers": 1, **_ssm("qwen35", 4, 6144, 128, 16, 48)},
)


def test_qwen3_next_keeps_kv_on_a_quarter_of_its_layers_and_a_state_on_the_rest(tmp_path: Path) -> None:
    spec = load_model(write_model(tmp_path / "q3n.gguf", QWEN3_NEXT)[0])
    # every 4th layer attends: 12 of 48; each keeps K and V of 2 heads x 256 at f16 (2 bytes)
    assert spec.n_attention_layers == 12 and sum(spec.recurrent_layers) == 36
    assert spec.kv_bytes_per_token() == 12 * 2 * (2 * 256 * 2) == 24_576  # was 98,304 on all 48 layers
    # a gated delta net's state: the convolution's last 3 inputs of (4096 + 2 x 16 x 128) values,
    # and a 128 x 4096 matrix, both f32
    per_layer = (3 * (4096 + 2 * 16 * 128) + 128 * 4096) * 4
    assert per_layer == 2_195_456
    assert spec.state_bytes_per_sequence == 36 * per_layer == 79_036_416  # 75.38 MiB
    assert spec.kv_bytes_at(32768) == 32768 * 24_576


def test_qwen35_27b_leaves_its_mtp_block_out_and_matches_llama_cpps_recurrent_memory(tmp_path: Path) -> None:
    spec = load_model(write_model(tmp_path / "q35.gguf", QWEN35_27B)[0])
    assert spec.n_layers == 64 and spec.n_nextn_layers == 1
    assert spec.n_attention_layers == 16 and sum(spec.recurrent_layers) == 48
    assert spec.kv_bytes_per_token() == 16 * 2 * (4 * 256 * 2) == 65_536  # was 266,240 on 65 layers
    r_values, s_values = 3 * (6144 + 2 * 16 * 128), 128 * 6144
    assert spec.state_bytes_per_layer == (r_values + s_values) * 4
    # llama.cpp's own lines for this shape at 3 sequences: R 16.88 MiB, S 432.00 MiB, 448.88 MiB
    line = next(ln for ln in (LOGS / "qwen35-27b-recurrent-memory.txt").read_text().splitlines() if "R (f32)" in ln)
    m = re.search(r"size = +([\d.]+) MiB .*R \(f32\): +([\d.]+) MiB, S \(f32\): +([\d.]+) MiB", line)
    assert m is not None
    total, r_mib, s_mib = (float(x) for x in m.groups())
    assert 3 * 48 * r_values * 4 / MiB == pytest.approx(r_mib, abs=0.005)
    assert 3 * 48 * s_values * 4 / MiB == pytest.approx(s_mib, abs=0.005)
    assert spec.state_bytes_per_sequence is not None
    assert 3 * spec.state_bytes_per_sequence / MiB == pytest.approx(total, abs=0.005)
    # the MTP block's weights are not read by a plain decode: the same model without it reads as much
    trunk = load_model(
        write_model(
            tmp_path / "trunk.gguf",
            Shape(**{**QWEN35_27B.__dict__, "n_layers": 64, "extra": _ssm("qwen35", 4, 6144, 128, 16, 48)}),
        )[0]
    )
    assert spec.decode_bytes_per_token == trunk.decode_bytes_per_token
    assert spec.tensor_bytes > trunk.tensor_bytes  # though the file holds it


def test_decode_at_depth_moves_with_the_attention_layers_only(tmp_path: Path) -> None:
    spec = load_model(write_model(tmp_path / "q3n.gguf", QWEN3_NEXT)[0])
    dense_like = load_model(
        write_model(tmp_path / "dense.gguf", Shape(**{**QWEN3_NEXT.__dict__, "arch": "llama", "extra": {}}))[0]
    )
    band = EfficiencyBand(low=0.5, high=0.9, source="test")
    from test_placements import _devices

    gpu, _ = _devices()
    deep = predict(spec, gpu, PredictInputs(depth=32768, ctx=32768), band)
    # a token at depth 32k reads the weights, 12 layers' KV of 32,768 tokens, and the state twice
    # (read, then written back)
    assert deep.kv_bytes_at_depth == 32768 * 24_576 + 2 * 79_036_416
    assert deep.decode_seconds_per_token == pytest.approx(
        (spec.decode_bytes_per_token + deep.kv_bytes_at_depth) / 1000e9
    )
    as_if_dense = predict(dense_like, gpu, PredictInputs(depth=32768, ctx=32768), band)
    assert as_if_dense.kv_bytes_at_depth == 32768 * 98_304  # what every layer attending would read


def test_inspect_prints_attention_layers_kv_and_state(tmp_path: Path) -> None:
    path = write_model(tmp_path / "q35.gguf", QWEN35_27B)[0]
    r = in_process("inspect", str(path), "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["n_layers"], d["attention_layers"], d["recurrent_layers"], d["nextn_layers"]) == (64, 16, 48, 1)
    assert d["kv_bytes_per_token"] == 65_536
    assert d["state_bytes_per_sequence"] == 48 * (3 * (6144 + 4096) + 128 * 6144) * 4
    text = in_process("inspect", str(path)).stdout
    assert "  recurrent    48 of 64 layers (a 157 MB state a sequence); KV on 16\n" in text
    assert "  draft heads  1 nextn (MTP) block(s), run only when they draft\n" in text


@pytest.mark.parametrize(
    ("arch", "kv", "ffn", "recurrent"),
    [
        ("granitehybrid", [0, 0, 0, 8], [64] * 4, [True, True, True, False]),  # no KV heads: a Mamba layer
        ("nemotron_h", [0, 0, 8, 0], [0, 64, 0, 0], [True, False, False, True]),  # no KV and no FFN
        ("jamba", [0, 8, 0, 0], [64] * 4, [True, False, True, True]),
    ],
)
def test_hybrids_that_mark_their_layers_by_kv_heads(
    tmp_path: Path, arch: str, kv: list[int], ffn: list[int], recurrent: list[bool]
) -> None:
    # the per-layer counts as metadata (the tensors written are a plain layout's: sizes do not matter here)
    extra = {f"{arch}.feed_forward_length": ffn, f"{arch}.attention.head_count_kv": kv, **_ssm(arch, 4, 512, 16, 1, 8)}
    shape = Shape(arch=arch, n_layers=4, n_embd=256, n_heads=8, n_kv_heads=8, head_dim=32, n_ff=64, extra=extra)
    spec = load_model(write_model(tmp_path / f"{arch}.gguf", shape)[0])
    assert list(spec.recurrent_layers) == recurrent
    assert spec.state_bytes_per_layer == (3 * (512 + 2 * 1 * 16) + 16 * 512) * 4
    assert spec.kv_bytes_per_token() == sum(h * 32 * 2 * 2 for h in kv)


def test_a_plain_transformer_is_unchanged(tmp_path: Path) -> None:
    spec = load_model(write_model(tmp_path / "llama.gguf", Shape(n_layers=4, qtype=Q8_0))[0])
    assert spec.recurrent_layers == () and spec.state_bytes_per_sequence == 0 and spec.n_nextn_layers == 0
    assert spec.n_attention_layers == 4

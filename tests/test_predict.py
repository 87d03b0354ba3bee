"""`ggprof predict`: the worked figures of docs/physics.md, on GGUFs with those shapes
(headers written here, data sections sparse holes), and bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from ggufs import LLAMA_8B_GQA_F16, LLAMA_8B_MHA_F16, LLAMA_70B_F16, Q4_8B_TIED, Q4_K_LLAMA, Shape, write_model
from support import RunCli

from ggprof.figures import Figure
from ggprof.machine.device import Device, EfficiencyBand
from ggprof.machine.profiles import ProfileDB
from ggprof.machine.target import device_from_profile
from ggprof.model.spec import ModelSpec, load_model
from ggprof.physics.placement import layers_on_gpu
from ggprof.physics.roofline import (
    PredictInputs,
    batch_max,
    compute_buffer_bytes,
    predict,
    prefill_flops,
)

BAND = EfficiencyBand(low=0.5, high=0.9, source="test")
GiB = 2**30


def model(tmp_path: Path, shape: Shape, name: str) -> ModelSpec:
    return load_model(write_model(tmp_path / name, shape)[0])


def user_device(gbs: float, tflops: float | None = None, memory_gb: float | None = None) -> Device:
    return Device(
        id="user",
        name="user",
        backend="cuda",
        memory_bytes=int(memory_gb * 1e9) if memory_gb else None,
        memory_source="user",
        bandwidth=Figure(gbs * 1e9, "user"),
        peak_flops=Figure(tflops * 1e12, "user") if tflops else None,
    )


def test_8b_fp16_at_3_3_tb_s(tmp_path: Path) -> None:
    spec = model(tmp_path, LLAMA_8B_MHA_F16, "8b.gguf")
    assert spec.decode_bytes_per_token == pytest.approx(16.0e9, rel=0.002)  # "16 GB of weights"
    dev = user_device(3300)
    p0 = predict(spec, dev, PredictInputs(depth=0, ctx=8192), BAND)
    assert p0.tpot_floor_ms == pytest.approx(spec.decode_bytes_per_token / 3.3e12 * 1e3)
    assert p0.tpot_floor_ms == pytest.approx(4.8, abs=0.1)  # docs/physics.md: ~4.8 ms
    assert p0.decode_ceiling_tok_s == pytest.approx(206, abs=5)  # ~200 tok/s
    p8k = predict(spec, dev, PredictInputs(depth=8192, ctx=8192), BAND)
    assert p8k.kv_bytes_at_depth == 4 * GiB  # 512 KiB x 8192
    assert p8k.tpot_floor_ms == pytest.approx((spec.decode_bytes_per_token + 4 * GiB) / 3.3e12 * 1e3)
    assert p8k.tpot_floor_ms == pytest.approx(6.0, abs=0.25)  # ~6 ms
    p128k = predict(spec, dev, PredictInputs(depth=131072, ctx=131072), BAND)
    assert p128k.kv_bytes_at_depth == 64 * GiB
    assert p128k.tpot_floor_ms == pytest.approx(24, rel=0.08)  # "+64 GB KV -> ~24 ms"
    assert p0.expected is not None
    assert (p0.expected.low_tok_s, p0.expected.high_tok_s) == pytest.approx(
        (0.5 * p0.decode_ceiling_tok_s, 0.9 * p0.decode_ceiling_tok_s)
    )


def test_prefill_flops_8b_1000_tokens(tmp_path: Path) -> None:
    spec = model(tmp_path, LLAMA_8B_MHA_F16, "8b.gguf")
    # the textbook rule: 2 x 8e9 x 1000 = 1.6e13 (every token through the whole model)
    assert prefill_flops(spec, 1000, logits_every_token=True) == pytest.approx(1.6e13, rel=0.03)
    # by hand: 2 x params x tokens + attention 2 x layers x heads x (128 + 128) x (1000 x 1001 / 2)
    attention = 2 * 32 * 32 * 256 * (1000 * 1001 // 2)
    assert prefill_flops(spec, 1000, logits_every_token=True) == 2 * spec.active_params * 1000 + attention
    # llama.cpp computes logits once per batch: the LM head runs once for a 1000-token prompt
    head = 4096 * 32000
    assert prefill_flops(spec, 1000) == 2 * (spec.active_params - head) * 1000 + 2 * head + attention


def test_70b_fp16_at_3_35_tb_s(tmp_path: Path) -> None:
    spec = model(tmp_path, LLAMA_70B_F16, "70b.gguf")
    p = predict(spec, user_device(3350, 989.4), PredictInputs(ctx=4096), BAND)
    assert p.tpot_floor_ms == pytest.approx(42, rel=0.04)  # "~42 ms per token"
    assert p.decode_intensity_flops_per_byte == pytest.approx(1.0, rel=0.01)  # "intensity ~1 FLOP/byte"
    assert p.ridge_flops_per_byte == pytest.approx(295, abs=1)  # H100: 990 TFLOP/s / 3.35 TB/s
    assert p.ridge_flops_per_byte is not None
    assert p.prefill_intensity_flops_per_byte > p.ridge_flops_per_byte  # prefill sits under the compute roof


def test_llama_3_1_70b_kv_at_128k(tmp_path: Path) -> None:
    spec = model(tmp_path, LLAMA_70B_F16, "70b.gguf")
    assert spec.kv_bytes_at(131072) == 2 * 80 * 8 * 128 * 2 * 131072
    assert spec.kv_bytes_at(131072) / 1e9 == pytest.approx(42.9, abs=0.1)


def test_depth_table_at_90_gb_s(tmp_path: Path) -> None:
    spec = model(tmp_path, Q4_8B_TIED, "8b-q4.gguf")
    assert spec.decode_bytes_per_token / 1e9 == pytest.approx(4.7, abs=0.05)
    p = predict(spec, user_device(90), PredictInputs(), BAND)
    assert p.decode_ceiling_tok_s == pytest.approx(19, abs=0.5)  # docs/physics.md's table: 19 tok/s
    assert 50 * spec.decode_bytes_per_token / 1e9 == pytest.approx(235, abs=3)  # 50 tok/s needs ~235 GB/s


@pytest.mark.parametrize(("n_layers", "size_gb", "ceiling"), [(6, 0.8, 112), (16, 2.0, 45), (69, 8.5, 11)])
def test_desktop_table_at_90_gb_s(tmp_path: Path, n_layers: int, size_gb: float, ceiling: float) -> None:
    """The desktop table at 90 GB/s (DDR5-5600 dual channel): Q4_K models whose token reads
    0.8, 2.0 and 8.5 GB decode at most 112, 45 and 11 tok/s."""
    shape = replace(Q4_K_LLAMA, n_layers=n_layers)
    spec = model(tmp_path, shape, f"{n_layers}.gguf")
    assert spec.decode_bytes_per_token / 1e9 == pytest.approx(size_gb, abs=0.06)
    p = predict(spec, user_device(90), PredictInputs(), BAND)
    assert p.decode_ceiling_tok_s == pytest.approx(ceiling, abs=1.0)  # the table rounds to whole tok/s


def test_batch_max_on_an_80_gb_gpu(tmp_path: Path) -> None:
    """docs/physics.md: 80 GB GPU, 8B fp16 (16 GB), ctx 8192: about 15 sequences with MHA, about 60 with GQA."""
    h100 = device_from_profile(ProfileDB.default().get("h100-sxm"))
    mha = model(tmp_path, LLAMA_8B_MHA_F16, "mha.gguf")
    gqa = model(tmp_path, LLAMA_8B_GQA_F16, "gqa.gguf")
    p_mha = predict(mha, h100, PredictInputs(ctx=8192), BAND)
    p_gqa = predict(gqa, h100, PredictInputs(ctx=8192), BAND)
    available = int(80 * GiB * 0.95)  # a profile's 80 GB is binary (81,920 MiB); no free-memory reading: 5% kept
    embd = 4096 * 32000 * 2  # the input embedding stays in host RAM (llama.cpp)
    weights = mha.tensor_bytes - embd
    assert p_mha.placement.gpu_weight_bytes == weights
    # what is left after the weights holds batch_max sequences of 4 GiB of KV each (8192 tokens x
    # 32 layers x 32 heads x 128 x 2 x 2 bytes), the compute buffers less than one more
    assert p_mha.batch_max is not None
    assert weights + p_mha.batch_max * 4 * GiB <= available < weights + (p_mha.batch_max + 1) * 4 * GiB + GiB
    assert 12 <= (p_mha.batch_max or 0) <= 15
    assert 50 <= (p_gqa.batch_max or 0) <= 62
    gqa_weights = p_gqa.placement.gpu_weight_bytes
    assert batch_max(gqa, PredictInputs(ctx=8192), gqa_weights, available) == p_gqa.batch_max


def test_memory_fit_verdicts(tmp_path: Path) -> None:
    spec = model(tmp_path, LLAMA_70B_F16, "70b.gguf")
    on_4090 = predict(spec, device_from_profile(ProfileDB.default().get("rtx-4090")), PredictInputs(ctx=4096), BAND)
    assert on_4090.memory[0].verdict == "does_not_fit" and on_4090.memory[0].fits is False
    on_mi300 = predict(spec, device_from_profile(ProfileDB.default().get("mi300x")), PredictInputs(ctx=4096), BAND)
    assert on_mi300.memory[0].verdict == "fits"
    gpu_weights = spec.tensor_bytes - 8192 * 32000 * 2  # all but the input embedding, which stays in RAM
    assert on_mi300.memory[0].required_bytes == gpu_weights + spec.kv_bytes_at(4096) + compute_buffer_bytes(spec, 4096)
    unknown = predict(spec, user_device(1000), PredictInputs(), BAND)
    assert unknown.memory[0].verdict == "unknown" and unknown.max_ctx_fits is None


def test_partial_offload_sums_both_parts(tmp_path: Path) -> None:
    spec = model(tmp_path, Shape(n_layers=4, n_embd=256, n_ff=512), "small.gguf")
    gpu = user_device(1000, memory_gb=24)
    cpu = Device(
        id="cpu",
        name="cpu",
        backend="cpu",
        memory_bytes=64 * 10**9,
        memory_source="os",
        bandwidth=Figure(50e9, "measured"),
        memory_available_bytes=10**10,
    )
    assert layers_on_gpu(4, 2) == ((3,), True)  # llama.cpp: the output layer first, then the last layers
    assert layers_on_gpu(4, 99) == ((0, 1, 2, 3), True)
    assert layers_on_gpu(4, -1) == ((0, 1, 2, 3), True)
    p = predict(spec, gpu, PredictInputs(n_gpu_layers=2), BAND, cpu=cpu)
    pl = p.placement
    assert pl.gpu_decode_bytes + pl.cpu_decode_bytes == spec.decode_bytes_per_token
    assert p.decode_seconds_per_token == pytest.approx(pl.gpu_decode_bytes / 1000e9 + pl.cpu_decode_bytes / 50e9)
    assert [f.pool for f in p.memory] == ["gpu", "cpu"]
    full = predict(spec, gpu, PredictInputs(n_gpu_layers=1000), BAND, cpu=cpu)  # more than the model has: all
    assert full.placement.cpu_decode_bytes == spec.decode_bytes_per_token - full.placement.gpu_decode_bytes
    assert full.decode_seconds_per_token < p.decode_seconds_per_token


def test_kv_cache_type_changes_bytes(tmp_path: Path) -> None:
    spec = model(tmp_path, LLAMA_8B_MHA_F16, "8b.gguf")
    f16 = predict(spec, user_device(100), PredictInputs(depth=4096, ctx=4096), BAND)
    q8 = predict(
        spec, user_device(100), PredictInputs(depth=4096, ctx=4096, cache_type_k="q8_0", cache_type_v="q8_0"), BAND
    )
    assert q8.kv_bytes_at_depth == f16.kv_bytes_at_depth * 34 // 64
    assert q8.decode_ceiling_tok_s > f16.decode_ceiling_tok_s


# -- the command ---------------------------------------------------------------------------------
PREDICT_KEYS = {
    "bandwidth_bytes_per_s",
    "bandwidth_source",
    "device_id",
    "decode_bytes_per_token",
    "kv_bytes_per_token",
    "depth",
    "decode_ceiling_tok_s",
    "tpot_floor_ms",
    "expected_tok_s_low",
    "expected_tok_s_high",
    "prefill_flops_per_token",
    "prefill_ceiling_tok_s",
    "ttft_floor_ms",
    "ridge_flops_per_byte",
    "memory_required_bytes",
    "memory_available_bytes",
    "fits",
}


def test_predict_json_with_profile_device(tmp_path: Path, run_cli: RunCli) -> None:
    path = write_model(tmp_path / "8b.gguf", Q4_8B_TIED)[0]
    r = run_cli("predict", str(path), "--device", "ddr5-5600-dual", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) >= PREDICT_KEYS
    assert (d["device_id"], d["bandwidth_source"]) == ("ddr5-5600-dual", "profile")
    assert d["bandwidth_bytes_per_s"] == pytest.approx(89.6e9)
    assert d["decode_ceiling_tok_s"] == pytest.approx(89.6e9 / d["decode_bytes_per_token"])
    assert d["expected_tok_s_low"] < d["decode_ceiling_tok_s"] * 0.7 < d["expected_tok_s_high"]
    assert [row["depth"] for row in d["depth_table"]] == [0, 4096, 8192]
    assert d["prefill_ceiling_tok_s"] is None  # no peak FLOP/s in a DDR profile: unknown, not a guess
    r = run_cli("predict", str(path), "--bandwidth", "1.2TB/s", "--flops", "100", "--json")
    d = json.loads(r.stdout)
    assert (d["bandwidth_bytes_per_s"], d["bandwidth_source"]) == (1.2e12, "user")
    assert d["ridge_flops_per_byte"] == pytest.approx(100e12 / 1.2e12)
    text = run_cli("predict", str(path), "--device", "rtx-4090", "--depth", "2000").stdout
    assert "ceiling" in text and "GB/s" in text and all(len(x) <= 80 for x in text.splitlines())


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--depth", "5000", "--ctx", "4096"], "Error: --depth 5000 is larger than --ctx 4096"),
        (["--prompt", "4000", "--gen", "200", "--ctx", "4096"], "does not fit in --ctx 4096"),
        (["--prompt", "-5"], "Error: Invalid value for '--prompt'"),
        (["--cache-type-k", "q3_x"], "Error: Invalid value for '-ctk'"),
        (["--bandwidth", "0"], "Error: bandwidth must be positive"),
        (["--bandwidth", "90 furlongs"], "Error: unknown bandwidth unit"),
        (["--bandwidth", "1e9"], "check the units"),
        (["--bandwidth", "fast"], "Error: cannot read bandwidth"),
        (["--bandwidth", "90", "--flops", "-3"], "--flops '-3'"),
        (["--device", "rtx-4099"], "Error: unknown device 'rtx-4099'; closest: rtx-4090"),
        (["--n-gpu-layers", "-2", "--device", "rtx-4090"], "Error: Invalid value for '-ngl'"),
    ],
)
def test_bad_flags_one_line_exit_2(args: list[str], error: str, tmp_path: Path, run_cli: RunCli) -> None:
    path = write_model(tmp_path / "m.gguf", Shape())[0]
    r = run_cli("predict", str(path), *args)
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and error in r.stderr, r.stderr


def test_default_device_is_this_host_with_cached_measurement(
    tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    path = write_model(tmp_path / "m.gguf", Shape())[0]
    from ggprof.machine.host import describe_host
    from ggprof.plugins import extensions

    ext = extensions()

    # a host whose memory modules say nothing (so no theoretical figure): only a measurement helps
    monkeypatch.setattr("ggprof.machine.host.detect_memory", lambda: None)
    cpu = describe_host(ext.backends.values(), ext.profiles, measure=False).cpu
    assert cpu is not None and cpu.bandwidth is None
    r = run_cli("predict", str(path))
    assert r.exit_code == 2 and "run `ggprof host` to measure it" in r.stderr
    run_cli("host", "--quick", "--json")
    d = json.loads(run_cli("predict", str(path), "--json").stdout)
    assert d["device_id"] == "cpu" and d["bandwidth_source"] == "measured"
    assert "(cached)" in d["device_description"]


@pytest.mark.parametrize(
    ("prompt", "depth", "window"), [(10, 0, 4), (10, 3, 4), (10, 10, 4), (5, 0, 100), (1000, 200, 512)]
)
def test_keys_attended_closed_form(prompt: int, depth: int, window: int) -> None:
    from ggprof.physics.roofline import _keys_attended

    assert _keys_attended(prompt, depth, window) == sum(min(depth + i, window) for i in range(1, prompt + 1))
    assert _keys_attended(prompt, depth, None) == sum(depth + i for i in range(1, prompt + 1))

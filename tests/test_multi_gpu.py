"""A model over several GPUs (llama.cpp's -dev, -sm, -ts, -mg): the devices come from hardware
profiles (this machine has no GPU), every figure computed by hand from the model's shape, and
the real CLI's text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ggufs import Shape, write_model
from support import in_process

from ggprof.machine.profiles import ProfileDB
from ggprof.machine.target import DeviceChoice, gpus_of, parse_device
from ggprof.model.spec import OUTPUT_LAYER_TENSORS, ModelSpec, load_model
from ggprof.physics.devices import LINK_BYTES_PER_S, SYNC_LATENCY_S, plan_devices

BW_3090, BW_3060 = 936e9, 360e9  # the profiles' bandwidths (rtx-3090, rtx-3060)
DENSE = Shape(n_layers=8, n_embd=256, n_heads=8, n_ff=512, vocab=1000)


def _model(tmp_path: Path) -> tuple[Path, ModelSpec]:
    path = write_model(tmp_path / "dense.gguf", DENSE)[0]
    return path, load_model(path)


def _layer_bytes(spec: ModelSpec, layer: int) -> int:
    return sum(t.n_bytes for t in spec.tensors if t.layer == layer)


def _output_bytes(spec: ModelSpec) -> int:
    return sum(t.n_bytes for t in spec.tensors if t.name in OUTPUT_LAYER_TENSORS)


def _predict(*args: str) -> dict[str, object]:
    r = in_process("predict", *args, "--json")
    assert r.exit_code == 0, r.stderr
    out: dict[str, object] = json.loads(r.stdout)
    return out


def test_a_layer_split_adds_each_gpus_bytes_over_its_bandwidth(tmp_path: Path) -> None:
    """-ts 3,1 over 8 layers and the output layer (9 slots): slot i goes to the first device whose
    cumulative share (0.75, 1) exceeds i/9, so layers 0-6 on CUDA0 and layer 7 + output on
    CUDA1 (llama-model.cpp); the devices run one after the other, with one hand-over between them."""
    model, spec = _model(tmp_path)
    on_first = sum(_layer_bytes(spec, il) for il in range(7))
    on_second = _layer_bytes(spec, 7) + _output_bytes(spec)
    hand_over = SYNC_LATENCY_S[0] + 4 * 256 / LINK_BYTES_PER_S
    floor = on_first / BW_3090 + on_second / BW_3060 + hand_over
    given = ("--device", "rtx-3090,rtx-3060", "-ts", "3,1")
    p = _predict(str(model), *given)
    assert p["tpot_floor_ms"] == pytest.approx(floor * 1e3, rel=1e-6)
    devices = p["devices"]
    assert isinstance(devices, dict)
    first, second = devices["memories"]
    assert (first["label"], first["layers"], first["read_bytes_per_token"]) == ("CUDA0", list(range(7)), on_first)
    assert (second["label"], second["layers"], second["output_layer"]) == ("CUDA1", [7], True)
    assert second["bandwidth_source"] == "profile: rtx-3060" and devices["shares_source"] == "-ts 3,1"
    assert devices["exchanges"][0]["transfers_per_token"] == 1
    # llama.cpp's own spelling gives the same placement, each device mapped to its profile
    same = _predict(
        str(model), "-dev", "CUDA0,CUDA1", "--device-profile", "CUDA0=rtx-3090,CUDA1=rtx-3060", "-ts", "3,1"
    )
    assert same["tpot_floor_ms"] == pytest.approx(p["tpot_floor_ms"], rel=1e-9)
    text = in_process("predict", str(model), *given)
    words = " ".join(text.stdout.split())  # the text wraps at 80 columns
    assert "devices: -sm layer, the GPUs run in sequence; shares CUDA0 75%, CUDA1 25% (-ts 3,1)" in words
    assert "CUDA1 (NVIDIA GeForce RTX 3060 (12 GB)) holds layers 7-7 + output" in words
    assert "[profile: rtx-3060]" in words


def test_without_ts_llama_cpp_splits_by_each_devices_memory(tmp_path: Path) -> None:
    """24 GB and 12 GB: shares 2/3 and 1/3, so slots 0-5 (i/9 < 2/3) on CUDA0, the rest on CUDA1."""
    _, spec = _model(tmp_path)
    profiles = ProfileDB.default()
    gpus = gpus_of(DeviceChoice(profile_ids=("rtx-3090", "rtx-3060")), profiles)
    split = plan_devices(spec, gpus, None)
    assert split.shares == pytest.approx((2 / 3, 1 / 3))
    assert split.terms[0].layers == tuple(range(6)) and split.terms[1].layers == (6, 7)


def test_a_row_or_tensor_split_runs_the_gpus_in_parallel(tmp_path: Path) -> None:
    """-sm tensor over two equal GPUs: each reads half of every weight at once (the slowest share
    sets the pace) and the GPUs add their results twice a layer (16 all-reduces for 8 layers)."""
    model, spec = _model(tmp_path)
    layers = sum(int(t.n_bytes * spec.decode_share(t)) for t in spec.tensors if t.layer is not None)
    output = _output_bytes(spec)
    ring = 2 * 1 * 4 * 256 // 2  # 2(n-1)/n of a 4 x n_embd row through each GPU
    floor = (layers + output) / 2 / BW_3090 + 16 * (SYNC_LATENCY_S[0] + ring / LINK_BYTES_PER_S)
    p = _predict(str(model), "--device", "rtx-3090,rtx-3090", "-sm", "tensor")
    assert p["tpot_floor_ms"] == pytest.approx(floor * 1e3, rel=1e-4)
    layer = _predict(str(model), "--device", "rtx-3090,rtx-3090", "-sm", "layer")
    # a model this small reads its weights in microseconds: the all-reduces cost more than half
    # the bytes save, so the layer split is the faster one
    assert p["decode_ceiling_tok_s"] < layer["decode_ceiling_tok_s"]  # type: ignore[operator]
    row = _predict(str(model), "--device", "rtx-3090,rtx-3090", "-sm", "row")
    exchanges = row["devices"]["exchanges"]  # type: ignore[index]
    assert exchanges[0]["transfers_per_token"] == 2 * (7 * 8 + 1)  # 7 matrices a layer and the head, two transfers
    # -sm none: the whole model on -mg's device alone
    alone = _predict(str(model), "--device", "rtx-3090,rtx-3060", "-sm", "none", "-mg", "1")
    assert alone["devices"] is None and alone["device_id"] == "rtx-3060"


PUBLIC = {  # benchmarks/data/placement-results.jsonl: XiongjieDai's 2 x RTX 3090, Llama 3 70B Q4_K_M
    "backends": "CUDA",
    "model_filename": "Meta-Llama-3-70B-Instruct-Q4_K_M.gguf",
    "n_gpu_layers": 99,
    "split_mode": "layer",
    "main_gpu": 0,
    "devices": "CUDA0/CUDA1",
    "tensor_split": "0.00",
    "n_cpu_moe": 0,
    "n_prompt": 0,
    "n_gen": 512,
    "n_depth": 0,
    "avg_ts": 16.57,
    "stddev_ts": 0.05,
}


def test_a_public_two_gpu_row_is_judged_on_both_gpus(tmp_path: Path) -> None:
    """llama-bench's row names its devices: each is an RTX 3090 (--device-profile), the layers
    split by their memory; the published 16.57 tok/s is plausible, a third of it is not."""
    from ggprof.model.reference import reference_path

    model = reference_path("llama3-70b-q4_k_m", tmp_path)
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([PUBLIC]))
    r = in_process("check", str(model), "--llama-bench", str(rows), "--device-profile", "rtx-3090", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    predicted = json.loads(r.stdout)["predictions"][0]
    assert [m["label"] for m in predicted["devices"]["memories"]] == ["CUDA0", "CUDA1"]
    # docs/physics.md's worked figure: 41.9 GB a token over two 936 GB/s halves
    assert predicted["decode_ceiling_tok_s"] == pytest.approx(22.3, abs=0.05)
    assert [round(m["read_bytes_per_token"] / 1e9, 1) for m in predicted["devices"]["memories"]] == [21.0, 20.9]
    # a row of llama.cpp's own choice of devices (`auto`): --device says which GPUs it had
    rows.write_text(json.dumps([PUBLIC | {"devices": "auto"}]))
    one_gpu = in_process("check", str(model), "--llama-bench", str(rows), "--device", "rtx-3090")
    assert one_gpu.exit_code == 4  # on one 24 GB GPU the 42 GB model cannot have run
    two = in_process("check", str(model), "--llama-bench", str(rows), "--device", "rtx-3090,rtx-3090")
    assert two.exit_code == 0, two.stdout
    rows.write_text(json.dumps([PUBLIC | {"avg_ts": 16.57 / 3}]))
    slow = in_process("check", str(model), "--llama-bench", str(rows), "--device-profile", "rtx-3090")
    assert slow.exit_code == 3, slow.stdout  # below the band (4.5 tok/s of a 22.3 ceiling), not above a ceiling
    assert "DECODE_BELOW_BAND" in slow.stdout


def test_an_unbalanced_split_is_named_as_a_cause(tmp_path: Path) -> None:
    """-sm tensor -ts 9,1 over two equal GPUs: the first reads 90% of every layer while the other
    waits; a slow run names it, with what a split by bandwidth would take."""
    from ggprof.model.reference import reference_path

    model = reference_path("qwen2.5-14b-q4_k_m", tmp_path)  # 9 GB: 90% of it fits on one 24 GB GPU
    base = ("--device", "rtx-3090,rtx-3090", "-sm", "tensor", "-ngl", "99")
    ceiling = _predict(str(model), *base, "-ts", "9,1")["decode_ceiling_tok_s"]
    assert isinstance(ceiling, float)
    r = in_process("check", str(model), "--tg", f"{ceiling * 0.2:.1f}", *base, "-ts", "9,1", "--json")
    assert r.exit_code == 3, r.stdout + r.stderr
    causes = [c for f in json.loads(r.stdout)["findings"] for c in f["causes"]]
    assert any(c.startswith("an unbalanced split (-ts 9,1)") for c in causes), causes
    even = in_process("check", str(model), "--tg", f"{ceiling * 0.2:.1f}", *base, "-ts", "1,1", "--json")
    causes = [c for f in json.loads(even.stdout)["findings"] for c in f["causes"]]
    assert not any(c.startswith("an unbalanced split") for c in causes)


def test_a_split_a_gpu_cannot_hold_is_impossible_and_says_which(tmp_path: Path) -> None:
    from ggprof.model.reference import reference_path

    model = reference_path("llama3-70b-q4_k_m", tmp_path)
    r = in_process("check", str(model), "--tg", "15", "--device", "rtx-3090,rtx-3090", "-ts", "9,1", "-ngl", "99")
    assert r.exit_code == 4, r.stdout
    words = " ".join(r.stdout.split())
    assert (
        "MODEL_DOES_NOT_FIT: a full offload needs" in words and "CUDA0 (NVIDIA GeForce RTX 3090) has 25.8 GB" in words
    )
    assert "CUDA0 (NVIDIA GeForce RTX 3090) is given" in words and "(-ts 9,1), more than its 25.8 GB" in words


def test_device_means_a_profile_first_and_llama_cpps_list_otherwise() -> None:
    profiles = ("rtx-3090", "rtx-3060")
    known = profiles.__contains__
    assert parse_device("rtx-3090", known) == (("rtx-3090",), ())
    assert parse_device("rtx-3090,rtx-3060", known) == (profiles, ())
    assert parse_device("CUDA0,CUDA1", known) == ((), ("CUDA0", "CUDA1"))
    assert parse_device("RPC0[10.0.0.2:50052],Vulkan0", known) == ((), ("RPC0[10.0.0.2:50052]", "Vulkan0"))
    assert parse_device("none", known) == ((), ("none",))
    assert parse_device("CUDA0", lambda name: name == "CUDA0") == (("CUDA0",), ())  # both: the profile
    with pytest.raises(ValueError, match=r"mixes profiles and llama\.cpp devices"):
        parse_device("CUDA0,rtx-3090", known)


def test_device_errors_are_one_line(tmp_path: Path) -> None:
    model, _ = _model(tmp_path)
    r = in_process("predict", str(model), "-dev", "CUDA0,CUDA1")
    assert r.exit_code == 2
    assert (
        r.stderr == "Error: which device is CUDA0? give --device-profile CUDA0=PROFILE (`ggprof profiles` lists them)\n"
    )
    r = in_process("predict", str(model), "--device", "rtx-3090,rtx-3090", "-ts", "1,1,1")
    assert r.exit_code == 2 and r.stderr == "Error: -ts 1,1,1: 3 shares for 2 devices (CUDA0, CUDA1)\n"
    r = in_process("predict", str(model), "--device", "CUDA0,rtx-3090")
    assert r.exit_code == 2 and r.stderr.startswith(
        "Error: Invalid value for '--device' / '-dev': 'CUDA0,rtx-3090' mixes"
    )
    one = _predict(str(model), "-dev", "CUDA1", "--device-profile", "CUDA1=rtx-3060")  # one device: its profile
    assert one["device_id"] == "rtx-3060" and one["devices"] is None


def test_an_rpc_device_in_a_device_list_is_reached_over_its_network(tmp_path: Path) -> None:
    """-dev CUDA0,RPC[10.0.0.2:50052] -ts 3,1 with the remote 3060 behind Gigabit Ethernet: layers
    0-6 here, layer 7 and the output there (as the -ts 3,1 test above). The remote stretch is one
    blocking round trip a token (ggml-rpc): the activation sent (4 x 256 bytes), the logits back
    (4 x 1000) and the activation's return leg (4 x 256), over 1e9 x 1448/1538 / 8 B/s, plus 1GbE's
    0.2 ms round trip and a hop's 0.15 ms (the fixed cost calibrated for --rpc)."""
    model, spec = _model(tmp_path)
    on_first = sum(_layer_bytes(spec, il) for il in range(7))
    on_second = _layer_bytes(spec, 7) + _output_bytes(spec)
    gbe = 1e9 * 1448 / 1538 / 8
    trip = 0.2e-3 + 0.15e-3 + (2 * 4 * 256 + 4 * 1000) / gbe
    floor = on_first / BW_3090 + on_second / BW_3060 + trip
    remote = "RPC[10.0.0.2:50052]"
    given = ("-dev", f"CUDA0,{remote}", "-ts", "3,1", "--device-profile", f"CUDA0=rtx-3090,{remote}=rtx-3060@1GbE")
    p = _predict(str(model), *given)
    assert p["tpot_floor_ms"] == pytest.approx(floor * 1e3, rel=1e-6)
    devices = p["devices"]
    assert isinstance(devices, dict)
    (exchange,) = devices["exchanges"]
    assert exchange["transfers_per_token"] == 1 and exchange["latency_s"] == pytest.approx([0.35e-3, 0.8e-3])
    # its link not given: loopback at the floor (50 us + 0.15 ms, 2 GB/s), Gigabit Ethernet at the slow end
    unknown = _predict(
        str(model), "-dev", f"CUDA0,{remote}", "-ts", "3,1", "--device-profile", f"CUDA0=rtx-3090,{remote}=rtx-3060"
    )
    loopback = 0.05e-3 + 0.15e-3 + (2 * 4 * 256 + 4 * 1000) / 2e9
    assert unknown["tpot_floor_ms"] == pytest.approx((on_first / BW_3090 + on_second / BW_3060 + loopback) * 1e3)
    # a link belongs to a device behind an rpc-server
    r = in_process(
        "predict", str(model), "-dev", "CUDA0,CUDA1", "--device-profile", "CUDA0=rtx-3090,CUDA1=rtx-3060@1GbE"
    )
    assert r.exit_code == 2 and r.stderr.startswith("Error: --device-profile CUDA1=rtx-3060@1GbE: a network link")

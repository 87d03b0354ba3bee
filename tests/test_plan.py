"""`ggprof plan`: the capacity method on the worked example, and its bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ggufs import LLAMA_3_1_8B_F16, write_model
from support import RunCli

EXAMPLE = ("--qps", "10", "--prompt", "1500", "--gen", "500", "--tpot-slo", "20", "--device", "h100-sxm")


@pytest.fixture(scope="module")
def llama8b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("plan") / "llama-3.1-8b-f16.gguf", LLAMA_3_1_8B_F16)[0]


def test_the_worked_example(llama8b: Path, run_cli: RunCli) -> None:
    """10 requests/s, 500 output tokens, TPOT 20 ms -> about 10 s a request -> about 100 in flight;
    at 2,000 tokens each holds about 0.25 GB of KV, about 25 GB in all, plus 16 GB of fp16
    weights: about 41 GB, so one 80 GB GPU suffices, its batch below the ridge point."""
    r = run_cli("plan", str(llama8b), *EXAMPLE, "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and d["ctx"] == 2000
    assert d["request_s"] == pytest.approx(10.0, rel=0.01)
    assert d["concurrency"] == pytest.approx(100, rel=0.01)
    assert d["kv_bytes_per_sequence"] == 2 * 32 * 8 * 128 * 2 * 2000  # 262 MB: "about 0.25 GB"
    assert d["kv_bytes_total"] == pytest.approx(25e9, rel=0.07)
    assert d["weights_bytes"] == pytest.approx(16e9, rel=0.01)
    assert d["weights_bytes"] + d["kv_bytes_total"] == pytest.approx(41e9, rel=0.05)
    assert (d["devices_needed"], d["below_ridge"]) == (1, True)
    # memory's limit: (81.6 GB usable, 95% of 80 GiB, - 16 GB of weights) / 262 MB of KV per sequence, less the buffers
    limits = d["batch_limits"]
    assert limits["memory"] == pytest.approx(
        (80 * 2**30 * 0.95 - d["weights_bytes"]) / d["kv_bytes_per_sequence"], rel=0.03
    )
    # the smallest limit binds: on 80 GiB, the 20 ms TPOT's bandwidth (about 195) before memory (about 249)
    assert d["binding_constraint"] == min(limits, key=limits.__getitem__) == "bandwidth"
    assert d["batch_per_device"] == 101
    assert d["step_time_ms"] <= 20 and d["memory_per_device_bytes"] == int(80 * 2**30 * 0.95)


def test_the_steps_are_shown_with_their_figures(llama8b: Path, run_cli: RunCli) -> None:
    text = run_cli("plan", str(llama8b), *EXAMPLE).stdout
    assert "1. Little's law: a request stays TTFT" in text and "10 requests/s x 10.0 s = 100 in flight" in text
    assert "2. Memory: KV 262 MB per sequence at 2,000 tokens x 101 = 26.5 GB" in text
    assert "below the ridge 295: bandwidth-bound" in text
    assert "4. Answer: 1 x NVIDIA H100 SXM5 80GB, batch 101 each" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_more_traffic_needs_more_devices(llama8b: Path, run_cli: RunCli) -> None:
    one = json.loads(run_cli("plan", str(llama8b), *EXAMPLE, "--json").stdout)
    args = list(EXAMPLE)
    args[1] = "100"  # ten times the traffic
    d = json.loads(run_cli("plan", str(llama8b), *args, "--json").stdout)
    limit = min(v for v in d["batch_limits"].values() if v is not None)
    assert d["devices_needed"] == -(-1002 // limit) and d["devices_needed"] > one["devices_needed"]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (("--qps", "0"), "Invalid value for '--qps'"),
        (("--qps", "-3"), "Invalid value for '--qps'"),
        (("--gen", "0"), "Invalid value for '--gen'"),
        (("--prompt", "-1"), "Invalid value for '--prompt'"),
        (("--tpot-slo", "1"), "--tpot-slo 1 ms is below the physical floor"),
        (("--ttft-slo", "0.5"), "--ttft-slo 0.5 ms is below the physical floor"),
    ],
)
def test_bad_input(change: tuple[str, str], error: str, llama8b: Path, run_cli: RunCli) -> None:
    args = list(EXAMPLE)
    if change[0] in args:
        args[args.index(change[0]) + 1] = change[1]
    else:
        args += change
    r = run_cli("plan", str(llama8b), *args)
    assert r.exit_code == 2 and error in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_a_device_without_a_memory_size(llama8b: Path, run_cli: RunCli) -> None:
    r = run_cli(
        "plan", str(llama8b), "--qps", "1", "--prompt", "100", "--gen", "100", "--tpot-slo", "50", "--bandwidth", "3000"
    )
    assert r.exit_code == 2 and "user-given device has no memory size" in r.stderr


# -- more than one device: llama.cpp's layer split, and a split over RPC ----------------------------
SMALL_LOAD = ("--qps", "0.2", "--prompt", "100", "--gen", "100", "--tpot-slo", "200")
RTX_3060_BYTES_PER_S = 360e9  # profiles/rtx-3060.toml: 360 GB/s, 12 GB
LINK = "100MB/s,2ms"  # 1e8 bytes/s each way, a 2 ms round trip
LINK_BYTES_PER_S, LINK_RTT_S = 1e8, 2e-3
N_EMBD, N_VOCAB = 4096, 128256  # LLAMA_3_1_8B_F16
DEPTH = 100 + 100 // 2  # a sequence's average depth: the prompt and half the generated tokens


def _plan(llama8b: Path, run_cli: RunCli, *args: str) -> dict[str, Any]:
    r = run_cli("plan", str(llama8b), *SMALL_LOAD, *args, "--json")
    assert r.exit_code == 0, r.stderr
    d: dict[str, Any] = json.loads(r.stdout)
    return d


def test_a_model_split_over_two_devices_gains_memory_not_speed(llama8b: Path, run_cli: RunCli) -> None:
    """16 GB of f16 weights on 12 GB cards: two of them hold one copy, and a step visits each in
    turn, so batch 1 takes the whole model's bytes over one card's bandwidth."""
    d = _plan(llama8b, run_cli, "--device", "rtx-3060")
    assert d["group_size"] == 2 and not d["split_over_rpc"] and d["devices_needed"] % 2 == 0
    kv_read = 2 * 32 * 8 * 128 * 2 * DEPTH  # K and V, 32 layers, 8 KV heads of 128, f16
    read = d["weights_bytes"] - N_VOCAB * N_EMBD * 2  # every weight but the embedding table (a lookup)
    assert d["tpot_floor_ms"] == pytest.approx((read + kv_read) / RTX_3060_BYTES_PER_S * 1e3, rel=0.01)


def test_one_device_short_of_memory_is_planned_over_the_rpc_machines(llama8b: Path, run_cli: RunCli) -> None:
    """The local 12 GB card and a remote one behind a 100 MB/s link: a step reads half the
    model on each card, and crosses the link once each way with one activation per sequence."""
    d = _plan(llama8b, run_cli, "--device", "rtx-3060", "--rpc-device", f"rtx-3060@{LINK}")
    assert d["split_over_rpc"] and "2 x NVIDIA GeForce RTX 3060" in d["why_split"]
    assert [s["label"] for s in d["shards"]] == ["remote 1", "this host"]
    assert d["links"] == [{"label": "remote 1", "link": "100MB/s,2ms", "returns_logits": False}]
    kv_read = 2 * 32 * 8 * 128 * 2 * DEPTH
    read = d["weights_bytes"] - N_VOCAB * N_EMBD * 2
    sent = 4 * N_EMBD + 4 + 2 * DEPTH + 64  # activation, position, mask row, the command
    network = LINK_RTT_S + (sent + 4 * N_EMBD) / LINK_BYTES_PER_S
    expected_ms = ((read + kv_read) / RTX_3060_BYTES_PER_S + network) * 1e3
    assert d["tpot_floor_ms"] == pytest.approx(expected_ms, rel=0.01)
    assert d["group_size"] == 2 and d["devices_needed"] % 2 == 0  # whole copies of the split


def test_all_layers_remote_bring_every_sequences_logits_over_the_link(llama8b: Path, run_cli: RunCli) -> None:
    """Both cards behind links, the output layer on the last: each sequence's logits (4 bytes x
    128,256) cross back every step, and a step at batch B moves B times as much."""
    remote = ("--rpc-device", f"rtx-3060@{LINK}")
    d = _plan(llama8b, run_cli, "--device", "ddr5-4800-dual", *remote, *remote)
    assert d["split_over_rpc"] and [w["returns_logits"] for w in d["links"]] == [False, True]
    sent = 4 * N_EMBD + 4 + 2 * DEPTH
    b = d["batch_per_device"]
    fixed = 2 * (LINK_RTT_S + 64 / LINK_BYTES_PER_S)
    per_sequence = (2 * sent + 4 * N_EMBD + 4 * N_VOCAB) / LINK_BYTES_PER_S
    assert d["network_ms"] == pytest.approx((fixed + b * per_sequence) * 1e3, rel=1e-6)


def test_a_model_one_device_holds_is_not_split(llama8b: Path, run_cli: RunCli) -> None:
    alone = _plan(llama8b, run_cli, "--device", "h100-sxm")
    d = _plan(llama8b, run_cli, "--device", "h100-sxm", "--rpc-device", f"rtx-3060@{LINK}")
    assert not d["split_over_rpc"] and d["why_split"] is None and d["links"] == []
    assert (d["devices_needed"], d["tpot_floor_ms"]) == (alone["devices_needed"], alone["tpot_floor_ms"])

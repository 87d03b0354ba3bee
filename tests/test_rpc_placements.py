"""Placements read back and predicted: a small runnable MoE over two real local rpc-servers and
the CPU, placed with -ncmoe, -ot, -dev/-sm layer/-ts and llama.cpp's own --fit, and each
device's model buffer ggprof predicts from the placement it reads (the JSON's facts, the log's
command line or --fit's lines) within 5% of the size llama.cpp prints. The recorded logs
(tests/data/logs/own-*-rpc-moe-*, tests/data/SOURCES.md) are judged without starting anything."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rpc_placements import (
    BENCH_CASES,
    FIT_ROOM_MIB,
    MOE,
    SERVER_CASES,
    bench,
    buffer_name,
    free_mib,
    moe_model,
    printed_buffers,
    server_log,
)
from rpc_relay import start_rpc_server
from support import as_process, kept

from ggprof.logs.parse import parse_lines
from ggprof.logs.text import Line
from ggprof.model.spec import load_model
from ggprof.physics.buffers import model_buffers
from ggprof.runfacts import from_json

DATA = Path(__file__).parent / "data"
LOGS = DATA / "logs"
MIB = 1 << 20
WITHIN = 0.05
# the small MoE's tensors (Q8_0: 34 bytes a block of 32): a layer's attention (256x256 q and o,
# 256x128 k and v), experts (3 x 8 x 256x256), router (256x8 f32) and two norms (256 f32)
ATTN = (2 * 256 * 256 + 2 * 256 * 128) * 34 // 32
EXPERTS = 3 * 8 * 256 * 256 * 34 // 32
LAYER = ATTN + EXPERTS + 256 * 8 * 4 + 2 * 256 * 4
TABLE = 1024 * 256 * 34 // 32  # token_embd and output, each
OUTPUT = TABLE + 256 * 4  # output and output_norm


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return moe_model(tmp_path_factory.mktemp("moe") / "rpc-moe-q8_0.gguf")


# -- the physics, pinned to a hand computation ----------------------------------------------------
def test_buffers_of_ncmoe_over_two_devices_by_hand(model: Path) -> None:
    """8 layers + output = 9 slots, equal shares: layers 0-4 on RPC0, 5-7 and the output on RPC1;
    -ncmoe 2 keeps layers 0-1's experts in RAM. The file runs token_embd, output_norm, output,
    then the layers: memory-mapped, the CPU's buffer spans token_embd to layer 1's last tensor."""
    b = model_buffers(load_model(model), ["RPC0", "RPC1"], [1, 1], n_gpu_layers=99, n_cpu_moe=2)
    assert dict(b.devices) == {"RPC0": 5 * LAYER - 2 * EXPERTS, "RPC1": 3 * LAYER + OUTPUT}
    assert b.cpu_name == "CPU_Mapped" and b.cpu_held_bytes == TABLE + 2 * EXPERTS
    assert b.cpu_bytes == TABLE + OUTPUT + 2 * LAYER  # the span, whatever lies between
    unmapped = model_buffers(load_model(model), ["RPC0", "RPC1"], [1, 1], n_cpu_moe=2, mapped=False)
    assert unmapped.cpu_name == "CPU" and unmapped.cpu_bytes == TABLE + 2 * EXPERTS


def test_buffers_of_a_tensor_split_and_overrides(model: Path) -> None:
    """-ts 3,1: slot i on RPC0 while i/9 < 0.75 (layers 0-6), layer 7 and the output on RPC1;
    -ot exps=CPU: every layer's experts in RAM, the devices keep the rest."""
    spec = load_model(model)
    assert dict(model_buffers(spec, ["RPC0", "RPC1"], [3, 1]).devices) == {"RPC0": 7 * LAYER, "RPC1": LAYER + OUTPUT}
    ot = model_buffers(spec, ["RPC0", "RPC1"], [1, 1], overrides=(("exps", "CPU"),))
    assert dict(ot.devices) == {"RPC0": 5 * (LAYER - EXPERTS), "RPC1": 3 * (LAYER - EXPERTS) + OUTPUT}


# -- recorded logs and JSON, judged without running anything ----------------------------------------
def _placement(*args: str) -> dict[str, Any]:
    r = as_process("check", *args, "--json")
    assert r.exit_code == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    return dict(run["placement"])


def _close(placement: dict[str, Any]) -> dict[str, float]:
    """Each buffer's MiB as printed, after checking ggprof's bytes are within 5% of it."""
    out = {}
    for b in placement["buffers"]:
        assert b["predicted_bytes"] == pytest.approx(b["model_bytes"], rel=WITHIN), b
        out[b["name"]] = b["model_bytes"] / MIB
    return out


def test_a_fit_log_is_read_as_its_placement() -> None:
    """--fit on two devices left 7 MiB each: RPC0 7 layers, all 7 overflowing (their experts in
    RAM), RPC1 2 layers (layer 7 and the output; its overflowing one is the output, no experts):
    -ngl 9 -ts 7,2 and layers 0-6's experts in RAM, i.e. -ncmoe 7."""
    p = _placement("--log", str(LOGS / "own-llama-server-rpc-moe-fit.txt"))
    assert p["flags"] == "-ngl 9 -ts 7,2 -ncmoe 7" and p["source"] == "as --fit set it (lines 125-126)"
    assert [(f["device"], f["where"], f["layers"], f["overflowing"]) for f in p["fit"]] == [
        ("RPC0", "127.0.0.1:50052", 7, 7),
        ("RPC1", "127.0.0.1:50053", 2, 1),
    ]
    assert p["fit_status"] == "fit"
    assert _close(p) == pytest.approx({"CPU_Mapped": 13.15, "RPC0": 1.46, "RPC1": 2.07}, abs=0.006)
    assert p["memory_breakdown_mib"]["Host"] == {"self": 17, "model": 13, "context": 0, "compute": 4}
    text = as_process("check", "--log", str(LOGS / "own-llama-server-rpc-moe-fit.txt")).stdout
    assert "placement: -ngl 9 -ts 7,2 -ncmoe 7, as --fit set it (lines 125-126)" in text
    assert "--fit chose: RPC0 (127.0.0.1:50052) 7 layers (7 overflowing); RPC1 (127.0.0.1:50053) 2 layers" in text
    assert "RPC1 (127.0.0.1:50053): weights 2.07 MiB (line 226), KV cache 0.25 MiB; ggprof for" in text


def test_a_server_log_with_ncmoe_is_read_from_its_command_line(model: Path) -> None:
    """The model beside the log gives its own header: the buffers to the byte of the hand sums."""
    p = _placement(str(model), "--log", str(LOGS / "own-llama-server-rpc-moe-ncmoe.txt"))
    assert p["flags"] == "-ngl 99 -ncmoe 2" and p["source"].startswith("from the command line")
    assert _close(p) == pytest.approx({"CPU_Mapped": 4.14, "RPC0": 5.83, "RPC1": 5.67}, abs=0.006)
    predicted = {b["name"]: b["predicted_bytes"] for b in p["buffers"]}
    assert predicted == {
        "CPU_Mapped": TABLE + OUTPUT + 2 * LAYER,
        "RPC0": 5 * LAYER - 2 * EXPERTS,
        "RPC1": 3 * LAYER + OUTPUT,
    }


def test_a_bench_log_and_its_json_row_give_one_placement(model: Path) -> None:
    row = json.loads((DATA / "llama-bench-rpc-moe-ncmoe.json").read_text())[0]
    facts = from_json(row)
    assert (facts["n_cpu_moe"], facts["n_gpu_layers"], facts["devices"], facts["split_mode"]) == (2, 99, (), "layer")
    p = _placement("--log", str(LOGS / "own-llama-bench-rpc-moe-ncmoe.txt"))
    assert p["flags"] == "-ngl 99 -ncmoe 2"
    assert _close(p) == pytest.approx({"CPU_Mapped": 4.14, "RPC0": 5.83, "RPC1": 5.67}, abs=0.006)


# -- real runs: llama-bench and llama-server over two rpc-servers ----------------------------------
@pytest.fixture(scope="module")
def servers(llama_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two real rpc-servers at one thread each, kept while the module runs."""
    folder = tmp_path_factory.mktemp("rpc")
    a, first = start_rpc_server(llama_tools, folder / "a.txt", threads=1)
    with kept(a):
        b, second = start_rpc_server(llama_tools, folder / "b.txt", threads=1)
        with kept(b):
            yield [first, second]


def _predicted(model: Path, facts: dict[str, Any]) -> dict[str, float]:
    """ggprof's MiB per printed buffer name, from the facts of a llama-bench row."""
    shares = list(facts.get("tensor_split") or (1.0, 1.0))  # both servers report this host's memory
    b = model_buffers(
        load_model(model),
        ["RPC0", "RPC1"],
        shares,
        mode=facts["split_mode"],
        n_gpu_layers=facts["n_gpu_layers"],
        n_cpu_moe=facts["n_cpu_moe"],
        overrides=facts["tensor_buft_overrides"],
    )
    return {b.cpu_name: b.cpu_bytes / MIB, **{n: v / MIB for n, v in b.devices}}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BENCH_CASES))
def test_llama_bench_rows_placements_predict_its_buffers(
    case: str, llama_tools: Path, model: Path, servers: list[str]
) -> None:
    row, log, _ = bench(llama_tools, model, servers, *BENCH_CASES[case])
    printed = printed_buffers(log)
    predicted = _predicted(model, from_json(row))
    for device, mib in predicted.items():
        name = device if device.startswith("CPU") else buffer_name(device, servers)
        if name in printed or mib > 0.01:
            assert mib == pytest.approx(printed[name], rel=WITHIN), (case, name, printed)
    # ggprof's reading of the same lines: each buffer, its bytes as printed
    run = parse_lines(Line(i + 1, t) for i, t in enumerate(log.splitlines())).runs[-1]
    assert {n: f.value / MIB for n, f in run.model_buffers.items()} == pytest.approx(printed, abs=0.006)


def _server_placement(llama_tools: Path, model: Path, servers: list[str], tmp: Path, *flags: str) -> dict[str, Any]:
    log, args = server_log(llama_tools, model, servers, tmp / "server.log", *flags)
    pasted = tmp / "pasted.txt"
    pasted.write_text(f"$ llama-server -m {model.name} {' '.join(args)}\n{log}")
    p = _placement("--log", str(pasted))
    printed = printed_buffers(log)
    for b in p["buffers"]:
        name = b["name"] if b["name"].startswith("CPU") else buffer_name(b["name"], servers)
        assert b["model_bytes"] / MIB == pytest.approx(printed[name], abs=0.006)
        assert b["predicted_bytes"] / MIB == pytest.approx(printed[name], rel=WITHIN), (flags, b)
    return p


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SERVER_CASES))
def test_llama_server_logs_placements_predict_its_buffers(
    case: str, llama_tools: Path, model: Path, servers: list[str], tmp_path: Path
) -> None:
    p = _server_placement(llama_tools, model, servers, tmp_path, *SERVER_CASES[case])
    assert p["source"].startswith("from the command line")


@pytest.mark.slow
def test_llama_server_fit_places_experts_on_the_cpu_and_ggprof_reads_it(
    llama_tools: Path, model: Path, servers: list[str], tmp_path: Path
) -> None:
    """--fit with each device left 7 MiB must move experts to the CPU: ggprof reads what it chose
    from its lines, and that placement predicts the buffers llama.cpp then printed."""
    target = min(free_mib(llama_tools, s) for s in servers) - FIT_ROOM_MIB
    p = _server_placement(llama_tools, model, servers, tmp_path, "--fit", "on", "--fit-target", str(target))
    assert p["fit_status"] == "fit" and p["source"].startswith("as --fit set it")
    assert sum(f["layers"] for f in p["fit"]) == MOE.n_layers + 1 and any(f["overflowing"] for f in p["fit"])
    assert "-ncmoe" in p["flags"] or "-ot" in p["flags"]

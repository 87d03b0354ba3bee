"""A small runnable MoE over two local rpc-servers and the CPU: the model, llama-bench's JSON row
and load log, llama-server's load log, and llama.cpp's printed model buffers read with plain
string operations (never ggprof's parser: they are what ggprof's prediction is checked against).
Shared by tests/test_rpc_placements.py and tests/data/logs/record_rpc_logs.py."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from llamacpp_tools import start_llama_server

from ggprof.model.synth import SynthShape, write_model

# 8 layers of 256, 8 experts of 256 (2 used), Q8_0, random weights: 14 MB, each layer's experts
# 1.6 MiB, so a buffer is a few MiB and 5% of it far above llama.cpp's 0.01 MiB rounding
MOE = SynthShape("rpc-moe", 256, 8, 4, 2, 256, "a small MoE", n_experts=8, n_experts_used=2, context=2048, vocab=1024)
BENCH_FLAGS = ("-p", "0", "-n", "4", "-r", "1", "--repack", "0", "-t", "1", "-o", "json", "-v")
# the placements tested: llama-bench's spellings (its -dev and -ts separate with `/`)
BENCH_CASES = {
    "ncmoe": ("-ngl", "99", "-ncmoe", "2"),
    "ot": ("-ngl", "99", "-ot", "exps=CPU"),
    "dev-ts": ("-ngl", "99", "-dev", "RPC0/RPC1", "-sm", "layer", "-ts", "3/1"),
}
SERVER_CASES = {
    "ncmoe": ("-ngl", "99", "-ncmoe", "2", "--fit", "off"),
    "dev-ts": ("-ngl", "99", "-dev", "RPC0,RPC1", "-sm", "layer", "-ts", "3,1", "--fit", "off"),
}
# --fit must move experts to the CPU: each RPC device (its server reports this host's memory)
# is left this many MiB after --fit-target's margin
FIT_ROOM_MIB = 7


def moe_model(path: Path) -> Path:
    return path if path.is_file() else write_model(MOE, "q8_0", path)


def bench(tools: Path, model: Path, servers: list[str], *flags: str) -> tuple[dict[str, Any], str, list[str]]:
    """llama-bench's JSON row, its load log (stderr) and its command line."""
    command = [str(tools / "llama-bench"), "-m", str(model), "--rpc", ",".join(servers), *flags, *BENCH_FLAGS]
    r = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    (row,) = json.loads(r.stdout)
    return row, r.stderr, command


def server_log(tools: Path, model: Path, servers: list[str], log: Path, *flags: str) -> tuple[str, list[str]]:
    """llama-server's log at trace verbosity (`-lv 4`: the load log and --fit's lines) from its
    start to its exit (the memory breakdown), and its flags."""
    args = ["--rpc", ",".join(servers), "-c", "512", "-t", "1", "-np", "1", "-lv", "4", *flags]
    proc, _ = start_llama_server(tools, model, log, *args)
    try:
        time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(30)
    return log.read_text(), args


def free_mib(tools: Path, server: str) -> int:
    """The free memory an rpc-server reports for its device (llama-server --list-devices)."""
    out = subprocess.run(
        [str(tools / "llama-server"), "--rpc", server, "--list-devices"], capture_output=True, text=True, timeout=60
    ).stdout
    line = next(x for x in out.splitlines() if "MiB free" in x)
    return int(line.rsplit(",", 1)[1].split()[0])


def printed_buffers(log: str) -> dict[str, float]:
    """llama.cpp's `load_tensors: NAME model buffer size = N MiB` lines: NAME -> MiB, read with
    string operations (an RPC device's buffer names its server: `RPC0[127.0.0.1:50053]`)."""
    out: dict[str, float] = {}
    for line in log.splitlines():
        if "load_tensors:" in line and " model buffer size = " in line:
            head, _, size = line.partition(" model buffer size = ")
            out[head.split("load_tensors:", 1)[1].strip()] = float(size.split()[0])
    return out


def buffer_name(device: str, servers: list[str]) -> str:
    """The buffer llama.cpp prints for device RPCi (the i-th server's first device)."""
    return f"RPC0[{servers[int(device.removeprefix('RPC'))]}]"

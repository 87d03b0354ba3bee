"""Record llama.cpp's placement lines on this machine, with two local rpc-servers as devices:
llama-server's load log with `-ncmoe 2` and with `--fit on` (a --fit-target that leaves each
device 7 MiB, so --fit must move experts to the CPU), and llama-bench's JSON and load log with
`-ncmoe 2`, on the small MoE of tests/rpc_placements.py. Each log starts with its command line,
as a report would paste it; paths are cut to file names, each server's port made 50052/50053.
Run from the repository root:

    python tests/data/logs/record_rpc_logs.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1]))

from llamacpp_tools import tools_dir  # noqa: E402
from rpc_placements import BENCH_CASES, FIT_ROOM_MIB, bench, free_mib, moe_model, server_log  # noqa: E402
from rpc_relay import start_rpc_server  # noqa: E402

PORTS = ("50052", "50053")


def plain(text: str, model: Path, servers: list[str]) -> str:
    text = text.replace(str(model), model.name).replace(str(model.parent) + "/", "")
    for server, port in zip(servers, PORTS, strict=True):
        text = text.replace(server, f"127.0.0.1:{port}")
    return text


def main() -> None:
    tools = tools_dir()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = moe_model(work / "rpc-moe-q8_0.gguf")
        procs = [start_rpc_server(tools, work / f"rpc{i}.log", threads=1) for i in range(2)]
        servers = [endpoint for _, endpoint in procs]
        try:
            row, err, command = bench(tools, model, servers, *BENCH_CASES["ncmoe"])
            (HERE.parent / "llama-bench-rpc-moe-ncmoe.json").write_text(
                plain(json.dumps([row], indent=2), model, servers) + "\n"
            )
            said = " ".join(["llama-bench", *command[1:]])
            (HERE / "own-llama-bench-rpc-moe-ncmoe.txt").write_text(plain(f"$ {said}\n{err}", model, servers))
            cases = {
                "own-llama-server-rpc-moe-ncmoe.txt": ("-ngl", "99", "-ncmoe", "2", "--fit", "off"),
                "own-llama-server-rpc-moe-fit.txt": (
                    "--fit", "on", "--fit-target", str(min(free_mib(tools, s) for s in servers) - FIT_ROOM_MIB),
                ),
            }  # fmt: skip
            for name, flags in cases.items():
                log, args = server_log(tools, model, servers, work / "server.log", *flags)
                said = " ".join(["llama-server", "-m", model.name, *args])
                (HERE / name).write_text(plain(f"$ {said}\n{log}", model, servers))
        finally:
            for proc, _ in procs:
                proc.terminate()
                proc.wait(30)


if __name__ == "__main__":
    main()

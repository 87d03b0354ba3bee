"""A llama-bench markdown table of several models (`llama-bench -m A -m B`): each row judged
with its own model's size and parameters, not the first row's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import in_process

TABLE = Path(__file__).parent / "data" / "logs" / "llamacpp-llama-bench-readme-two-models.txt"
RTX_4090_BYTES_PER_S = 1008e9  # its profile's bandwidth


def test_each_model_of_a_llama_bench_table_is_judged_with_its_own_size() -> None:
    """llama-bench's README: 7B Q4_0 (3.56 GiB) at 132.19 tok/s and 13B Q4_0 (6.86 GiB) at 82.17
    tok/s. Judged as one model, the 13B's rows would read the 7B's 3.82 GB a token; each run
    reads its own: 3.56 GiB and 6.86 GiB, their ceilings 1008 GB/s over each."""
    r = in_process("check", "--log", str(TABLE), "--device", "rtx-4090", "--json")
    assert r.stdout, r.stderr
    d = json.loads(r.stdout)
    assert len(d["runs"]) == 2
    by_run: dict[int, list[dict[str, object]]] = {}
    for m in d["measurements"]:
        by_run.setdefault(int(m["run"]), []).append(m)
    first, second = (by_run[k] for k in sorted(by_run))
    assert [m["tok_s"] for m in first] == [132.19, 129.37, 123.83]
    assert [m["tok_s"] for m in second] == [82.17, 80.74, 78.08]
    for rows, gib in ((first, 3.56), (second, 6.86)):
        for m in rows:
            assert m["decode_ceiling_tok_s"] == pytest.approx(RTX_4090_BYTES_PER_S / (gib * 2**30), rel=0.01)
    assert not any(m["verdict"] == "impossible" for m in d["measurements"])
    # the command line read once goes with each run
    assert all("-p 0 -n 128,256,512" in json.dumps(run) for run in d["runs"])

"""A run's physical batch (-ub, at most -b) as a fact of its slow prompt: public llama-bench runs
at each size (benchmarks/data/ubatch-effects.jsonl) give how much speed a smaller batch costs; a
slow GPU prompt names a batch under llama.cpp's default 512 and rules the cause out at 512 or
more. The fact comes from `check -ub`, llama-bench's JSON and table, and a log's context line."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from ggprof_backends._diagnosis import UBATCH_DEVICES, UBATCH_PREFILL_SHARE
from ggprof_backends._gpu import UBATCH_TO_CHECK, ubatch_share
from support import RunCli, in_process

from ggprof.machine.profiles import ProfileDB
from ggprof.pipelines.calibrate import References

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "ubatch-effects.jsonl"
TESTS = Path(__file__).parent / "data"
LOGS = TESTS / "logs"


@pytest.fixture(scope="module")
def refs(tmp_path_factory: pytest.TempPathFactory) -> References:
    return References(tmp_path_factory.mktemp("refs"))


def test_the_shares_are_the_public_runs() -> None:
    """Each row is a llama.cpp pull request's table row on a profiled device; the shares each
    size keeps of the same table's -ub 512 speed span exactly what the table in _diagnosis says."""
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    profiles = ProfileDB.default()
    at_512 = {(r["source"], r["model"]): r["tok_s"] for r in rows if r["n_ubatch"] == 512}
    shares: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        assert re.fullmatch(r"https://github\.com/ggml-org/llama\.cpp/pull/\d+", r["source"]), r
        assert profiles.get(r["device"]).name and r["backend"] in ("cuda", "rocm") and r["tok_s"] > 0
        shares[r["n_ubatch"]].append(r["tok_s"] / at_512[r["source"], r["model"]])
    assert set(at_512) == {(r["source"], r["model"]) for r in rows}  # every table has its -ub 512 row
    for size, (low, high) in UBATCH_PREFILL_SHARE.items():
        assert (low, high) == pytest.approx((min(shares[size]), max(shares[size])), abs=0.006)
    devices = {profiles.get(r["device"]).name for r in rows}
    assert len(devices) == 4 and all(name in UBATCH_DEVICES for name in ("RTX 4090", "RX 6800", "MI50", "MI100"))


def test_a_share_between_two_sizes_and_outside_them() -> None:
    assert ubatch_share(32) == (0.33, 0.57, "at -ub 32")
    low, high, where = ubatch_share(45) or (0.0, 0.0, "")
    assert 0.33 < low < 0.52 and 0.57 < high < 0.68 and where == "between -ub 32 and 64"
    assert ubatch_share(4) == (0.19, 0.38, "at -ub 16, less is slower still")
    assert ubatch_share(512) is None and ubatch_share(4096) is None
    lows = [(ubatch_share(n) or (1.0,))[0] for n in range(1, 520)]
    assert all(a <= b for a, b in itertools.pairwise(lows))  # a bigger batch never keeps less
    assert math.isclose((ubatch_share(511) or (0.0,))[0], 1.0, abs_tol=0.01)


def prefill_finding(run_cli: RunCli, model: str, pp: float, *args: str) -> dict[str, Any]:
    r = run_cli("check", model, "--pp", f"{pp:.2f}", "--device", "rtx-4090", "--backend", "cuda", *args, "--json")
    f: dict[str, Any] = next(f for f in json.loads(r.stdout)["findings"] if f["code"].startswith("PREFILL"))
    return f


def test_a_slow_gpu_prompt_names_its_small_physical_batch(refs: References, run_cli: RunCli) -> None:
    """An RTX 4090's Llama 2 7B Q4_0 prompt below its band: at -ub 32 and 0.6x the band's bottom
    (above the 33%-57% public runs kept) the batch is the cause; at 0.1x it is named with the
    other causes to check; at -ub 512 it is ruled out; not given, it stays a cause to check."""
    model = str(refs.spec("llama2-7b-q4_0").path)
    unknown = prefill_finding(run_cli, model, 1000)
    band = re.match(r"([\d,.]+) tok/s to", unknown["expected"])
    assert band is not None, unknown["expected"]
    bottom = float(band[1].replace(",", ""))
    assert unknown["severity"] == "suspicious" and UBATCH_TO_CHECK in unknown["causes"]

    explained = prefill_finding(run_cli, model, bottom * 0.6, "-ub", "32")
    assert explained["severity"] == "suspicious"
    assert explained["causes"] == [
        "a physical batch of 32 tokens (-ub 32; llama.cpp's default is 512): public llama-bench runs kept "
        f"33%-57% of their -ub 512 prompt speed at -ub 32 ({UBATCH_DEVICES})"
    ]
    assert "physical batch 32 tokens (-ub)" in explained["evidence"]

    beyond = prefill_finding(run_cli, model, bottom * 0.1, "--ubatch-size", "32")
    assert beyond["causes"][0].startswith("a physical batch of 32 tokens") and len(beyond["causes"]) >= 3
    assert UBATCH_TO_CHECK not in beyond["causes"]

    default = prefill_finding(run_cli, model, bottom * 0.6, "-ub", "512")
    assert default["severity"] == "suspicious" and UBATCH_TO_CHECK not in default["causes"]
    assert not any("physical batch of" in c for c in default["causes"])
    assert "physical batch 512 tokens (-ub), llama.cpp's default 512 or more: not the cause" in default["evidence"]


def test_llama_bench_json_gives_each_rows_physical_batch(gemma_path: Path, run_cli: RunCli) -> None:
    """A real llama-bench JSON of Gemma 3 270M at -ub 16 and 512 (tests/data/SOURCES.md): each
    row's batch is read, capped by its -b; judged as an RTX 4090's (far below its band) the
    -ub 16 row names its batch beside the other causes, the -ub 512 row rules it out."""
    from ggprof.bench.llamabench import read_rows, rows_from_text

    src = TESTS / "llama-bench-gemma3-270m-cpu-ubatch.json"
    assert [r.physical_batch for r in read_rows(str(src))] == [16, 512]
    row = json.loads(src.read_text())[1]
    assert rows_from_text(json.dumps([{**row, "n_batch": 32}]), "x")[0].physical_batch == 32
    assert rows_from_text(json.dumps([{**row, "n_ubatch": "big"}]), "x")[0].physical_batch is None
    r = run_cli("check", str(gemma_path), "--llama-bench", str(src), "--device", "rtx-4090", "--backend", "cuda",
                "--json")  # fmt: skip
    rows = json.loads(r.stdout)["rows"]
    judged = [next(f for f in row["findings"] if f["code"].startswith("PREFILL")) for row in rows]
    assert [f["severity"] for f in judged] == ["suspicious", "suspicious"]
    assert judged[0]["causes"][0].startswith("a physical batch of 16 tokens (-ub 16;")
    assert UBATCH_TO_CHECK not in judged[0]["causes"] and len(judged[0]["causes"]) >= 3
    assert "physical batch 512 tokens (-ub), llama.cpp's default 512 or more: not the cause" in judged[1]["evidence"]
    for given in (("--llama-bench", str(src)), ("--log", str(LOGS / "own-llama-bench-gemma3-270m-cpu-ubatch.txt"))):
        r = run_cli("check", str(gemma_path), *given, "-ub", "32")  # each row's, each speed's own
        assert r.exit_code == 2 and "no build options or -ub" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("name", "batches"),
    [
        ("own-llama-bench-gemma3-270m-cpu-ubatch.txt", [16, 32]),  # -ub 16,64 -b 32: its two columns
        ("own-llama-bench-gemma3-270m-cpu.txt", [512, 512]),  # no columns: llama-bench's defaults
    ],
)
def test_a_llama_bench_table_gives_each_rows_physical_batch(name: str, batches: list[int]) -> None:
    from ggprof.logs.parse import parse_lines
    from ggprof.logs.text import read_log

    (run, *_) = parse_lines(read_log(str(LOGS / name)).lines).runs
    assert [s.n_ubatch for s in run.speeds] == batches


@pytest.mark.parametrize(
    ("name", "n_ubatch", "batch"),
    [
        ("llamacpp-9881-cuda-full-offload.txt", 512, 512),  # n_batch 2048
        ("ik-llama-450-deepseek-cpu-buffers.txt", 1024, 1024),  # n_batch 1024
        ("llamacpp-9505-sycl-two-devices-offload.txt", 2048, 2048),  # n_batch 2048
        ("llamacpp-6758-mamba-cuda-buffers.txt", None, None),  # n_batch 2048 alone: not known
    ],
)
def test_a_logs_context_gives_its_physical_batch(name: str, n_ubatch: int | None, batch: int | None) -> None:
    """The smaller of the context lines' `n_batch` and `n_ubatch` is the physical batch the causes
    read; `n_ubatch` is among the facts the log shows."""
    from ggprof.bench.context import RunContext
    from ggprof.logs.parse import parse_lines
    from ggprof.logs.text import read_log
    from ggprof.pipelines.logcheck import build_facts

    (run, *_) = parse_lines(read_log(str(LOGS / name)).lines).runs
    build = build_facts(run, "cuda", RunContext(backends_used=("cuda",)))
    assert (build.n_ubatch if build is not None else None) == batch
    facts = json.loads(in_process("check", "--log", str(LOGS / name), "--json").stdout)["runs"][0]["facts"]
    assert facts.get("n_ubatch") == n_ubatch  # llama.cpp prints it capped by n_batch already


def test_a_profiles_own_run_records_its_physical_batch() -> None:
    from ggprof.bench.results import BenchParams

    assert BenchParams(model=Path("m.gguf")).physical_batch == 512
    assert BenchParams(model=Path("m.gguf"), n_batch=32, n_ubatch=512).physical_batch == 32

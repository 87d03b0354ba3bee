"""`ggprof bench`: real llama.cpp runs on the Gemma 3 270M model and synthetic models, the
child-process failure paths, output formats, and bad flags."""

from __future__ import annotations

import csv
import io
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from ggufs import Shape, write_model
from support import RunCli, llama_child, started

from ggprof.model.synth import SHAPES
from ggprof.model.synth import write_model as write_synth

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synth(SHAPES["tiny"], "q4_0", tmp_path_factory.mktemp("synth") / "tiny.gguf")


def bench_json(run_cli: RunCli, *args: str) -> list[dict[str, Any]]:
    r = run_cli("bench", *args, "--json")
    assert r.exit_code == 0, r.stderr
    rows: list[dict[str, Any]] = json.loads(r.stdout)
    return rows


def test_gemma_pp_tg_consistent(gemma_path: Path, run_cli: RunCli) -> None:
    rows = bench_json(run_cli, str(gemma_path), "-p", "32", "-n", "8", "-r", "2")
    pp, tg = rows
    assert (pp["n_prompt"], pp["n_gen"], tg["n_prompt"], tg["n_gen"]) == (32, 0, 0, 8)
    for row in rows:
        tokens = row["n_prompt"] + row["n_gen"]
        assert row["avg_ts"] > 0 and len(row["samples_ns"]) == 2
        for ts, ns in zip(row["samples_ts"], row["samples_ns"], strict=True):
            assert ts * ns / 1e9 == pytest.approx(tokens)  # tok/s x time = tokens
        assert row["avg_ts"] == pytest.approx(sum(row["samples_ts"]) / 2)
        assert row["model_type"].startswith("gemma3") and row["model_n_params"] == 268_098_176
        assert row["n_threads"] >= 1 and row["backends"] == "CPU"
    assert pp["ttft_ms"] > pp["avg_ns"] / 1e6  # TTFT = the prompt + the first generated token
    assert tg["itl_p50_ms"] <= tg["itl_p95_ms"] <= tg["itl_p99_ms"]


def test_step_times_add_up_to_the_sample(tiny: Path) -> None:
    from ggprof.bench.results import BenchParams
    from ggprof.engines.python.runner import run_bench
    from ggprof.machine.facts import gather_facts

    result = run_bench(BenchParams(model=tiny, n_prompt=(16,), n_gen=(6,), reps=3, n_threads=1), gather_facts())
    tg = result.row("tg")
    assert tg is not None and len(tg.itl_ns) == 6 * 3
    for rep, sample in enumerate(tg.samples_ns):
        steps = sum(tg.itl_ns[rep * 6 : (rep + 1) * 6])
        assert 0.9 * sample <= steps <= sample  # the sample is the steps plus nothing much
    pp = result.row("pp")
    assert pp is not None and len(pp.ttft_ns) == 3
    assert all(t > s for t, s in zip(pp.ttft_ns, pp.samples_ns, strict=True))


def test_depths_and_output_formats(tiny: Path, run_cli: RunCli) -> None:
    args = (str(tiny), "-p", "16", "-n", "4", "-d", "0,64", "-r", "2")
    rows = bench_json(run_cli, *args)
    assert [(r["n_prompt"], r["n_gen"], r["n_depth"]) for r in rows] == [(16, 0, 0), (0, 4, 0), (16, 0, 64), (0, 4, 64)]
    jsonl = run_cli("bench", *args, "-o", "jsonl").stdout.splitlines()
    assert [json.loads(line)["n_depth"] for line in jsonl] == [0, 0, 64, 64]
    table = list(csv.DictReader(io.StringIO(run_cli("bench", *args, "-o", "csv").stdout)))
    assert len(table) == 4 and float(table[0]["avg_ts"]) > 0 and json.loads(table[0]["samples_ns"])
    md = run_cli("bench", *args, "-o", "md").stdout.splitlines()
    assert md[0] == "| model | size | params | backend | threads | test | t/s |" and len(md) == 6
    assert md[4].split("|")[6].strip() == "pp16 @ d64"
    text = run_cli("bench", *args).stdout
    assert "ITL ms p50 / p95 / p99" in text


def test_run_context_is_recorded(tiny: Path) -> None:
    from ggprof.bench.results import BenchParams
    from ggprof.engines.python.runner import run_bench
    from ggprof.machine.facts import gather_facts

    facts = gather_facts()
    params = BenchParams(model=tiny, n_prompt=(8,), n_gen=(2,), reps=1, n_threads=facts.default_threads)
    result = run_bench(params, facts)
    ctx = result.context
    assert ctx.physical_cores is not None
    assert ctx.n_threads == ctx.physical_cores - (ctx.efficiency_cores or 0)
    assert ctx.backends_used == ("cpu",) and ctx.n_gpu_layers_offloaded == 0
    assert "cpu" in ctx.backends_compiled and ctx.llama_cpp_python_version
    assert any(flag in ctx.simd_compiled for flag in ("AVX2", "AVX", "NEON", "SSE3"))
    assert ctx.page_cache_fraction_before is not None and 0 <= ctx.page_cache_fraction_before <= 1
    assert ctx.ram_available_before_bytes and ctx.ram_available_after_bytes
    assert ctx.cpu_load_during_percent is not None and 0 <= ctx.cpu_load_during_percent <= 100


def test_model_llama_cpp_refuses(tmp_path: Path, run_cli: RunCli) -> None:
    """A header our reader accepts but llama.cpp refuses (no output_norm): the child's reason, exit 2."""
    shape = Shape(n_layers=1, n_embd=64, n_heads=2, n_kv_heads=2, n_ff=64, vocab=300)
    path = write_model(tmp_path / "broken.gguf", shape)[0]
    r = run_cli("bench", str(path), "-p", "8", "-n", "2", "-r", "1")
    assert r.exit_code == 2, r.stderr
    assert r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"Error: {path}: llama.cpp cannot load this model: ")


def test_killed_child_becomes_one_error(gemma_path: Path, tmp_path: Path) -> None:
    proc = started(
        "bench", str(gemma_path), "-p", "64", "-n", "400", "-r", "50", env={"GGPROF_CACHE_DIR": str(tmp_path)}
    )
    deadline = time.monotonic() + 60
    child = llama_child(proc)  # skips the short-lived helpers (a zombie's cmdline raises)
    while child.cpu_times().user < 1.0 and time.monotonic() < deadline:  # loaded (~0.3 s) and measuring
        time.sleep(0.1)
    child.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 5, err
    assert err.count("\n") == 1
    assert "killed by SIGKILL" in err and "gemma-3-270m-q4_k_m.gguf" in err and "llama.cpp last said:" in err
    assert out == ""


def test_timeout(gemma_path: Path, run_cli: RunCli) -> None:
    r = run_cli("bench", str(gemma_path), "-p", "512", "-n", "128", "-r", "20", "--timeout", "2")
    assert r.exit_code == 5
    assert "timed out after 2 s (--timeout)" in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["-r", "0"], "Invalid value for '-r'"),
        (["-p", "-1"], "-p values must be 0 or more"),
        (["-n", "x"], "-n takes whole numbers"),
        (["-p", "0", "-n", "0"], "nothing to run"),
        (["-d", "9000"], "over the model's context length 8,192"),
        (["-ctk", "q9_9"], "Invalid value for '-ctk'"),
        (["-t", "0"], "-t values must be 1 or more"),
    ],
)
@pytest.mark.parametrize("command", ["bench", "profile"])
def test_bad_flags(command: str, args: list[str], error: str, tiny: Path, run_cli: RunCli) -> None:
    """One line, before anything is measured (profile says when it starts measuring the host)."""
    r = run_cli(command, str(tiny), *args)
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and error in r.stderr, r.stderr


def test_progress_on_stderr_json_on_stdout(tiny: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGPROF_PROGRESS", "1")
    from ggprof.cli import progress

    monkeypatch.setattr(progress.ProgressBar.__init__, "__defaults__", (None, 0.0))
    r = run_cli("bench", str(tiny), "-p", "8", "-n", "2", "-r", "2", "--json")
    assert "[" in r.stderr and "rep 2/2" in r.stderr
    assert json.loads(r.stdout)[0]["n_prompt"] == 8


def test_default_model_is_synthetic(run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path))
    rows = bench_json(run_cli, "-p", "8", "-n", "2", "-r", "1")
    assert "synth" in rows[0]["model_filename"] and rows[0]["model_n_params"] == SHAPES["small"].n_params

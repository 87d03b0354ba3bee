"""Files from outside and many rows: nothing blocks (FIFOs, hostile patterns), nothing SIGBUSes,
the host is detected once for thousands of rows, and common path mistakes are one line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from ggufs import Shape, write_model
from support import (
    RunCli,
    as_process,
    bench_rows,
    row,
)

from ggprof.pipelines.extensions import Extensions
from ggprof.pipelines.judged import Judged
from ggprof.verdict.finding import Severity


# -- 3. nothing blocks: FIFOs and hostile patterns ---------------------------------------------------
@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", [["inspect"], ["predict", "--bandwidth", "90"], ["check", "--tg", "5"], ["bench"]])
def test_a_fifo_as_the_model_is_refused(command: list[str], fifo: Path) -> None:
    r = as_process(command[0], str(fifo), *command[1:], timeout_s=60)
    assert r.exit_code == 2 and "not a regular file" in r.stderr, r.stderr


def test_a_fifo_as_llama_bench_results_or_named_inside_them(tmp_path: Path, fifo: Path, gemma_path: Path) -> None:
    results_fifo = tmp_path / "results.json"
    os.mkfifo(results_fifo)
    r = as_process("check", str(gemma_path), "--llama-bench", str(results_fifo))
    assert r.exit_code == 2 and "not a regular file" in r.stderr
    rows = bench_rows(tmp_path / "r.json", [row(model_filename=str(fifo))])
    r = as_process("check", "--llama-bench", str(rows), "--bandwidth", "90")
    assert r.exit_code == 2 and "not a regular file" in r.stderr


def test_a_fifo_as_a_split_shard(tmp_path: Path) -> None:
    first = write_model(tmp_path / "m-00001-of-00002.gguf", Shape())[0]
    os.mkfifo(tmp_path / "m-00002-of-00002.gguf")
    r = as_process("inspect", str(first))
    assert r.exit_code == 2 and "not a regular file" in r.stderr


def test_a_fifo_as_a_profile(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    os.mkfifo(tmp_path / "profiles" / "mine.toml")
    r = as_process("profiles", env={"GGPROF_CONFIG_DIR": str(tmp_path)})
    assert r.exit_code == 2 and "not a regular file" in r.stderr


def test_catastrophic_match_pattern_does_not_hang_host(tmp_path: Path) -> None:
    """A user profile whose pattern backtracks exponentially on the detected GPU's name."""
    (tmp_path / "cfg" / "profiles").mkdir(parents=True)
    (tmp_path / "cfg" / "profiles" / "evil.toml").write_text(
        'id = "evil"\nname = "Evil"\nkind = "gpu"\nbackends = ["cuda"]\nsource = "x"\n'
        'memory_bandwidth_gbs = 100\nmatch = ["^(a|aa)+$"]\n'
    )
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, " + "a" * 40 + "b, 1024, 1000, 5000'\n")
    smi.chmod(0o755)
    env = {"GGPROF_CONFIG_DIR": str(tmp_path / "cfg"), "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    r = as_process("host", "--no-measure", "--json", env=env)
    cuda = next(d for d in json.loads(r.stdout)["backends"] if d["backend"] == "cuda")
    assert r.exit_code == 0 and "catastrophic backtracking" in cuda["reason"]


# -- 6. common paths ------------------------------------------------------------------------------
def test_partial_offload_without_a_cpu_figure_says_what_to_do(
    tmp_path: Path, gemma_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run: nothing measured, and (as in a VM) no memory modules to read a figure from."""
    from ggprof.machine import host

    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(host, "detect_memory", lambda: None)
    r = run_cli("predict", str(gemma_path), "--device", "rtx-4090", "-ngl", "0")
    assert (
        r.exit_code == 2
        and "CPU bandwidth is unknown: give --ram-bandwidth BW or --cpu NAME, or run `ggprof host` first" in r.stderr
    )


def test_partial_offload_with_a_measured_host_is_predicted(
    tmp_path: Path, gemma_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert as_process("host", "--quick", env={"GGPROF_CACHE_DIR": str(tmp_path)}).exit_code == 0
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path))
    r = run_cli("predict", str(gemma_path), "--device", "rtx-4090", "-ngl", "0", "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and d["n_gpu_layers"] == 0 and d["bandwidth_source"] == "profile"


def test_a_split_shard_that_does_not_exist_is_refused(tmp_path: Path, run_cli: RunCli) -> None:
    for i in (1, 2):
        write_model(tmp_path / f"m-0000{i}-of-00002.gguf", Shape())
    r = run_cli("inspect", str(tmp_path / "m-00009-of-00002.gguf"))
    assert r.exit_code == 2 and "names shard 9 of a 2-file split model: there is no such shard" in r.stderr


# -- 8. scale: detect once, never SIGBUS -------------------------------------------------------------------
def test_llama_bench_rows_detect_the_host_once(tmp_path: Path, gemma_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    calls = tmp_path / "calls"
    for tool in ("nvidia-smi", "vulkaninfo", "amd-smi", "rocm-smi"):
        (tools / tool).write_text(f"#!/bin/sh\necho {tool} >> '{calls}'\nexit 1\n")
        (tools / tool).chmod(0o755)
    rows = bench_rows(tmp_path / "r.json", [row(avg_ts=50.0 + i % 7) for i in range(1000)])
    env = {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "GGPROF_CACHE_DIR": str(tmp_path)}
    r = as_process("check", str(gemma_path), "--llama-bench", str(rows), "--json", env=env)
    d = json.loads(r.stdout)
    assert r.exit_code == d["exit_status"] and len(d["rows"]) == 1000
    assert sorted(calls.read_text().split()) == ["amd-smi", "nvidia-smi", "rocm-smi", "vulkaninfo"]


def test_check_json_lists_each_shared_prediction_once(tmp_path: Path, gemma_path: Path) -> None:
    """2,500 rows at three depths (judged in worker processes): three predictions, each written
    once, and every row points at the one made for its depth (the KV it reads there)."""
    depths = (0, 256, 1024)
    rows = bench_rows(tmp_path / "r.json", [row(avg_ts=50.0 + i % 7, n_depth=depths[i % 3]) for i in range(2500)])
    r = as_process("check", str(gemma_path), "--llama-bench", str(rows), "--bandwidth", "90", "--json")
    d = json.loads(r.stdout)
    assert len(d["rows"]) == 2500 and len(d["predictions"]) == 3
    for i, judged in enumerate(d["rows"]):
        prediction = d["predictions"][judged["prediction_index"]]
        assert judged["depth"] == prediction["depth"] == depths[i % 3]
    kv = [d["predictions"][d["rows"][i]["prediction_index"]]["kv_bytes_at_depth"] for i in range(3)]
    assert kv[0] == 0 < kv[1] < kv[2]


def test_a_file_truncated_while_it_is_read_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process truncates the file after its size was taken: a memory map would SIGBUS
    here. The size the reader takes is the one from before the truncation."""
    from ggprof.errors import GGUFError
    from ggprof.model.gguf import read_header

    path = write_model(tmp_path / "m.gguf", Shape(vocab=50_000))[0]
    size_before = path.stat().st_size
    real_fstat = os.fstat

    def fstat_before_the_truncation(fd: int) -> os.stat_result:
        fields = list(real_fstat(fd)[:10])
        fields[6] = size_before  # st_size
        return os.stat_result(fields)

    os.truncate(path, 1000)
    monkeypatch.setattr(os, "fstat", fstat_before_the_truncation)
    with pytest.raises(GGUFError, match="ended at byte 1000 while it was read"):
        read_header(path)


def _verdicts_and_lines(index: int, judged: Iterator[Judged]) -> list[tuple[int, Severity, list[str]]]:
    from ggprof.report.verdict import judged_lines

    return [(index, j.verdict.severity, judged_lines(j)) for j in judged]


def test_many_rows_judged_on_every_core_give_what_one_process_gives(gemma_path: Path, ext: Extensions) -> None:
    """2,500 rows (over the threshold for worker processes): the same verdicts and lines, in
    the same order, as judged in this process."""
    from ggprof.figures import Figure
    from ggprof.machine.target import DeviceChoice
    from ggprof.model.spec import load_model
    from ggprof.pipelines.check import PARALLEL_MIN_ROWS, Checker, Reported, judge_chunks

    reports = [Reported(tg_tok_s=30.0 + i * 0.1, depth=(i % 3) * 256, backend="cpu") for i in range(2500)]
    assert len(reports) >= PARALLEL_MIN_ROWS
    choice = DeviceChoice(bandwidth=Figure(90e9, "user", "--bandwidth 90"))
    spec = load_model(gemma_path)
    alone = list(judge_chunks(Checker(spec, choice, ext), reports, _verdicts_and_lines, processes=1))
    shared = list(judge_chunks(Checker(spec, choice, ext), reports, _verdicts_and_lines, processes=2))
    assert shared == alone and [index for chunk in shared for index, _, _ in chunk][::1000] == [0, 1, 2]
    assert {severity for chunk in shared for _, severity, _ in chunk} == {"plausible", "suspicious"}

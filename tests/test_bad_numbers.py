"""Numbers and flags from outside: each one checked where it enters, named when bad, and never
bending a verdict (a huge stddev, a nonsense value, a flag out of range)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest
from ggufs import Shape, write_model
from support import RunCli, as_process, bench_rows, row


# -- 1. a noisy claim does not escape its verdict -----------------------------------------------
def test_huge_stddev_does_not_make_an_impossible_claim_plausible(
    tmp_path: Path, gemma_path: Path, run_cli: RunCli
) -> None:
    rows = bench_rows(tmp_path / "r.json", [row(avg_ts=1000.0, stddev_ts=1000.0)])
    r = run_cli("check", str(gemma_path), "--llama-bench", str(rows), "--device", "ddr5-5600-dual", "--json")
    d = json.loads(r.stdout)
    codes = {f["code"] for f in d["findings"]}
    assert (r.exit_code, d["verdict"]) == (4, "impossible")
    assert {"DECODE_ABOVE_CEILING", "RUN_TOO_NOISY"} <= codes
    # the ceiling from the source: Gemma's tied embedding makes decode read every weight, which
    # is the file less its header (the tokenizer of 262,144 tokens: under 16 MiB)
    size = gemma_path.stat().st_size
    assert 89.6e9 / size < d["decode_ceiling_tok_s"] < 89.6e9 / (size - 16 * 2**20)


def test_tiny_claim_with_huge_stddev_is_suspicious(tmp_path: Path, gemma_path: Path, run_cli: RunCli) -> None:
    rows = bench_rows(tmp_path / "r.json", [row(avg_ts=1.0, stddev_ts=100.0)])
    r = run_cli("check", str(gemma_path), "--llama-bench", str(rows), "--device", "ddr5-5600-dual", "--json")
    d = json.loads(r.stdout)
    assert (r.exit_code, d["verdict"]) == (3, "suspicious")
    assert {"DECODE_BELOW_BAND", "RUN_TOO_NOISY"} <= {f["code"] for f in d["findings"]}


# -- 2. nonsense numbers are bad input, named -----------------------------------------------------
@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--tg", "nan"], "Invalid value for '--tg'"),
        (["--tg", "inf"], "Invalid value for '--tg'"),
        (["--tg", "-3"], "Invalid value for '--tg'"),
        (["--tg", "10", "--depth", "9" * 300], "Invalid value for '--depth'"),
        (["--tg", "10", "--prompt", "0"], "Invalid value for '--prompt'"),
        (["--tg", "10", "-ngl", str(2**40)], "Invalid value for '-ngl'"),
        (["--tg", "10", "--bandwidth", "nan"], "cannot read bandwidth"),
        (["--tg", "10", "--flops", "inf"], "--flops 'inf' TFLOP/s is outside"),
    ],
)
def test_check_flags_refuse_nonsense(args: list[str], error: str, gemma_path: Path, run_cli: RunCli) -> None:
    r = run_cli("check", str(gemma_path), "--bandwidth", "90", *args)
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and error in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"avg_ts": True}, "row 1: field 'avg_ts' must be a finite number above 0, at most 1,000,000,000, got True"),
        ({"avg_ts": "fast"}, "field 'avg_ts' must be a finite number above 0"),
        ({"avg_ts": None}, "field 'avg_ts' must be a finite number above 0, at most 1,000,000,000, got None"),
        ({"avg_ts": [1]}, "field 'avg_ts' must be a finite number above 0"),
        ({"avg_ts": -5}, "field 'avg_ts' must be a finite number above 0, at most 1,000,000,000, got -5"),
        ({"avg_ts": 2e9}, "field 'avg_ts' must be a finite number above 0, at most 1,000,000,000, got 2000000000.0"),
        ({"avg_ts": 10**400}, "field 'avg_ts' must be a finite number above 0, at most 1,000,000,000, got 1000"),
        ({"stddev_ts": -1}, "field 'stddev_ts' must be a finite number, 0 or more"),
        ({"n_depth": -1}, "field 'n_depth' must be a whole number from 0 to 2147483647"),
        ({"n_depth": 10**300}, "field 'n_depth' must be a whole number from 0 to 2147483647"),
        ({"n_gen": 0, "n_prompt": 0}, "n_prompt and n_gen are both 0"),
        ({"n_gpu_layers": "all"}, "field 'n_gpu_layers' must be a whole number from -1"),
    ],
)
def test_llama_bench_rows_are_validated(
    fields: dict[str, object], error: str, tmp_path: Path, gemma_path: Path, run_cli: RunCli
) -> None:
    rows = bench_rows(tmp_path / "r.json", [row(**fields)])
    r = run_cli("check", str(gemma_path), "--llama-bench", str(rows), "--bandwidth", "90")
    assert r.exit_code == 2 and error in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_deeply_nested_json_is_bad_input(tmp_path: Path, gemma_path: Path, run_cli: RunCli) -> None:
    deep = tmp_path / "deep.json"
    # within the items one row may parse into, nested past what the parser recurses through
    deep.write_text('[{"avg_ts": 1, "x": ' + "[" * 1200 + "]" * 1200 + "}]")
    r = run_cli("check", str(gemma_path), "--llama-bench", str(deep), "--bandwidth", "90")
    assert r.exit_code == 2 and "nested too deeply" in r.stderr
    # far more than that is refused before it is parsed
    deep.write_text("[" * 100_000 + "]" * 100_000)
    r = run_cli("check", str(gemma_path), "--llama-bench", str(deep), "--bandwidth", "90")
    assert r.exit_code == 2 and "more JSON items than 0 llama-bench rows hold (at most 1,000); not parsed" in r.stderr


def test_model_with_no_tensors_is_bad_input(tmp_path: Path, run_cli: RunCli) -> None:
    import gguf

    path = tmp_path / "empty.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(0)
    w.add_context_length(128)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    assert run_cli("inspect", str(path)).exit_code == 0  # a valid header: inspect shows it
    for args in (["predict", str(path), "--bandwidth", "90"], ["check", str(path), "--tg", "5", "--bandwidth", "90"]):
        r = run_cli(*args)
        assert r.exit_code == 2 and "has no weight tensors" in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("field", "value"),
    [("memory_bandwidth_gbs", "inf"), ("memory_bandwidth_gbs", "1e308"), ("memory_gb", "nan"), ("gpu_cores", "10**12")],
)
def test_profile_figures_are_bounded(field: str, value: str, run_cli: RunCli) -> None:
    user = Path(os.environ["GGPROF_CONFIG_DIR"]) / "profiles"
    user.mkdir(parents=True, exist_ok=True)
    toml_value = str(eval(value)) if value == "10**12" else value
    base = {"memory_bandwidth_gbs": "50", "memory_gb": "8", "gpu_cores": "4"}
    fields = "\n".join(f"{k} = {toml_value if k == field else v}" for k, v in base.items())
    (user / "bad.toml").write_text(
        f'id = "bad"\nname = "Bad"\nkind = "gpu"\nbackends = ["cuda"]\nsource = "x"\n{fields}\n'
    )
    try:
        r = run_cli("profiles")
        assert r.exit_code == 2 and f"field '{field}': must be a positive" in r.stderr, r.stderr
    finally:
        (user / "bad.toml").unlink()


@pytest.mark.parametrize("value", ["abc", "nan", "-1", "1e9"])
def test_tool_timeout_environment_is_validated(value: str) -> None:
    r = as_process("host", "--no-measure", env={"GGPROF_TOOL_TIMEOUT_S": value})
    assert r.exit_code == 2 and r.stderr.startswith("Error: GGPROF_TOOL_TIMEOUT_S=")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["-b", "4294967296"], "Invalid value for '-b'"),
        (["-ub", "0"], "Invalid value for '-ub'"),
        (["--timeout", "nan"], "Invalid value for '--timeout'"),
        (["--timeout", "inf"], "Invalid value for '--timeout'"),
        (["-t", "600"], "-t values must be at most 512"),
        (["-p", "99999999999"], "-p values must be at most 2147483647"),
        (["--json", "-o", "csv"], "--json and -o csv contradict each other"),
    ],
)
def test_bench_flags_refuse_nonsense(args: list[str], error: str, gemma_path: Path, run_cli: RunCli) -> None:
    r = run_cli("bench", str(gemma_path), *args)
    assert r.exit_code == 2 and error in r.stderr, r.stderr


# -- 9. flags are never silently wrong --------------------------------------------------------------------
@pytest.mark.slow
def test_threads_above_the_cores_are_warned(gemma_path: Path, run_cli: RunCli) -> None:
    n = psutil.cpu_count(logical=True) + 1
    r = run_cli("bench", str(gemma_path), "-p", "8", "-n", "2", "-r", "1", "-t", str(n), "--json")
    assert r.exit_code == 0 and f"warning: -t {n} is more than this machine's" in r.stderr


@pytest.mark.slow
def test_an_unknown_architecture_says_what_llama_cpp_said(tmp_path: Path, run_cli: RunCli) -> None:
    path = write_model(tmp_path / "odd.gguf", Shape(arch="notanarch"))[0]
    r = run_cli("bench", str(path), "-p", "8", "-n", "2", "-r", "1")
    assert r.exit_code == 2 and "unknown model architecture" in r.stderr, r.stderr

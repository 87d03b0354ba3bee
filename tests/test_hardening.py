"""Hostile inputs, faults and noisy numbers: each test is a case that once lost a result, bent a
verdict, hung, crashed or leaked control codes to the terminal, kept as it was found."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from ggufs import Shape, write_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_plugins import ggprof, install_example

CONTROL = ("\x1b", "\x07", "\x9b")
GEMMA_CEILING_AT_89_6 = 363  # tok/s: Gemma 3 270M at 89.6 GB/s, depth 0 (README, `ggprof predict`)


def clean_output(text: str) -> bool:
    return not any(c in text for c in CONTROL)


def bench_rows(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps(rows))
    return path


def row(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 100.0, "stddev_ts": 1.0}
    return {**base, **fields}


# -- 1. a noisy claim does not escape its verdict -----------------------------------------------
def test_huge_stddev_does_not_make_an_impossible_claim_plausible(tmp_path: Path, gemma_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    rows = bench_rows(tmp_path / "r.json", [row(avg_ts=1000.0, stddev_ts=1000.0)])
    r = run_cli("check", str(gemma_path), "--llama-bench", str(rows), "--device", "ddr5-5600-dual", "--json")
    d = json.loads(r.stdout)
    codes = {f["code"] for f in d["findings"]}
    assert (r.exit_code, d["verdict"]) == (4, "impossible")
    assert {"DECODE_ABOVE_CEILING", "RUN_TOO_NOISY"} <= codes
    assert d["decode_ceiling_tok_s"] == pytest.approx(GEMMA_CEILING_AT_89_6, rel=0.01)


def test_tiny_claim_with_huge_stddev_is_suspicious(tmp_path: Path, gemma_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
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
        (["--tg", "10", "-ngl", str(2**40)], "Invalid value for '--n-gpu-layers'"),
        (["--tg", "10", "--bandwidth", "nan"], "cannot read bandwidth"),
        (["--tg", "10", "--flops", "inf"], "--flops 'inf' TFLOP/s is outside"),
    ],
)
def test_check_flags_refuse_nonsense(args: list[str], error: str, gemma_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    r = run_cli("check", str(gemma_path), "--bandwidth", "90", *args)
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and error in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"avg_ts": True}, "row 1: field 'avg_ts' must be a finite number above 0, got True"),
        ({"avg_ts": "fast"}, "field 'avg_ts' must be a finite number above 0"),
        ({"avg_ts": None}, "field 'avg_ts' must be a finite number above 0, got None"),
        ({"avg_ts": [1]}, "field 'avg_ts' must be a finite number above 0"),
        ({"avg_ts": -5}, "field 'avg_ts' must be a finite number above 0, got -5"),
        ({"stddev_ts": -1}, "field 'stddev_ts' must be a finite number, 0 or more"),
        ({"n_depth": -1}, "field 'n_depth' must be a whole number from 0 to 2147483647"),
        ({"n_depth": 10**300}, "field 'n_depth' must be a whole number from 0 to 2147483647"),
        ({"n_gen": 0, "n_prompt": 0}, "n_prompt and n_gen are both 0"),
        ({"n_gpu_layers": "all"}, "field 'n_gpu_layers' must be a whole number from -1"),
    ],
)
def test_llama_bench_rows_are_validated(  # type: ignore[no-untyped-def]
    fields: dict[str, object], error: str, tmp_path: Path, gemma_path: Path, run_cli
) -> None:
    rows = bench_rows(tmp_path / "r.json", [row(**fields)])
    r = run_cli("check", str(gemma_path), "--llama-bench", str(rows), "--bandwidth", "90")
    assert r.exit_code == 2 and error in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_deeply_nested_json_is_bad_input(tmp_path: Path, gemma_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    r = run_cli("check", str(gemma_path), "--llama-bench", str(deep), "--bandwidth", "90")
    assert r.exit_code == 2 and "nested too deeply" in r.stderr


def test_model_with_no_tensors_is_bad_input(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
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
def test_profile_figures_are_bounded(field: str, value: str, run_cli) -> None:  # type: ignore[no-untyped-def]
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
    r = ggprof("host", "--no-measure", env={"GGPROF_TOOL_TIMEOUT_S": value})
    assert r.returncode == 2 and r.stderr.startswith("Error: GGPROF_TOOL_TIMEOUT_S=")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["-b", "4294967296"], "Invalid value for '-b'"),
        (["-ub", "0"], "Invalid value for '-ub'"),
        (["--timeout", "nan"], "Invalid value for '--timeout'"),
        (["--timeout", "inf"], "Invalid value for '--timeout'"),
        (["-t", "600"], "-t values must be at most 512"),
        (["-p", "99999999999"], "-p takes whole numbers"),
        (["--json", "-o", "csv"], "--json and -o csv contradict each other"),
    ],
)
def test_bench_flags_refuse_nonsense(args: list[str], error: str, gemma_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    r = run_cli("bench", str(gemma_path), *args)
    assert r.exit_code == 2 and error in r.stderr, r.stderr


# -- 3. nothing blocks: FIFOs and hostile patterns ---------------------------------------------------
@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", [["inspect"], ["predict", "--bandwidth", "90"], ["check", "--tg", "5"], ["bench"]])
def test_a_fifo_as_the_model_is_refused(command: list[str], fifo: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "ggprof", command[0], str(fifo), *command[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr


def test_a_fifo_as_llama_bench_results_or_named_inside_them(tmp_path: Path, fifo: Path, gemma_path: Path) -> None:
    results_fifo = tmp_path / "results.json"
    os.mkfifo(results_fifo)
    r = ggprof_timed("check", str(gemma_path), "--llama-bench", str(results_fifo))
    assert r.returncode == 2 and "not a regular file" in r.stderr
    rows = bench_rows(tmp_path / "r.json", [row(model_filename=str(fifo))])
    r = ggprof_timed("check", "--llama-bench", str(rows), "--bandwidth", "90")
    assert r.returncode == 2 and "not a regular file" in r.stderr


def test_a_fifo_as_a_split_shard(tmp_path: Path) -> None:
    first = write_model(tmp_path / "m-00001-of-00002.gguf", Shape())[0]
    os.mkfifo(tmp_path / "m-00002-of-00002.gguf")
    r = ggprof_timed("inspect", str(first))
    assert r.returncode == 2 and "not a regular file" in r.stderr


def test_a_fifo_as_a_profile(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    os.mkfifo(tmp_path / "profiles" / "mine.toml")
    r = ggprof_timed("profiles", env={"GGPROF_CONFIG_DIR": str(tmp_path)})
    assert r.returncode == 2 and "not a regular file" in r.stderr


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
    r = ggprof_timed("host", "--no-measure", "--json", env=env)
    cuda = next(d for d in json.loads(r.stdout)["backends"] if d["backend"] == "cuda")
    assert r.returncode == 0 and "catastrophic backtracking" in cuda["reason"]


# -- 4. no terminal control codes from outside, no huge lines -----------------------------------------
def test_control_codes_in_llama_bench_json_never_reach_the_terminal(tmp_path: Path) -> None:
    rows = bench_rows(tmp_path / "r.json", [row(model_filename="\x1b]0;pwned\x07evil.gguf")])
    r = ggprof_timed("check", "--llama-bench", str(rows), "--bandwidth", "90")
    assert r.returncode == 2 and "pwned" in r.stderr and clean_output(r.stderr + r.stdout)


def test_a_huge_key_gives_a_short_error_line(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = write_model(tmp_path / "m.gguf", Shape(extra={"k" * 5_000_000: 1}))[0]
    r = run_cli("inspect", str(path))
    assert r.exit_code == 2 and len(r.stderr) < 600 and "at most 65,536 allowed" in r.stderr


def test_plugin_text_is_cleaned(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install_example(site)
    (site / "ggprof_example_plugin.py").write_text(
        (site / "ggprof_example_plugin.py")
        .read_text()
        .replace('code="EXAMPLE_SUSPICIOUS_ROUND_NUMBER"', 'code="EXAMPLE\\x1b[2J\\x07CODE"')
    )
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    env = {"PYTHONPATH": str(site), "EXAMPLE_JUDGE": "1"}
    r = ggprof_timed("check", str(model), "--tg", "1000000", "--bandwidth", "50", env=env)
    assert "EXAMPLE[2JCODE" in r.stdout and clean_output(r.stdout + r.stderr)


# -- 5. a finished measurement is never thrown away ---------------------------------------------------
def raising_plugin(site: Path, hook: str) -> None:
    """A real plugin package on sys.path whose `hook` raises (or whose import calls sys.exit)."""
    install_example(site, module="ggprof_bad_plugin")
    body = {
        "judge": "@hookimpl\ndef judge(case):\n    raise RuntimeError('judge exploded')\n",
        "register_commands": "@hookimpl\ndef register_commands(cli):\n    raise RuntimeError('commands exploded')\n",
        "import": "import sys\nsys.exit(3)\n",
    }[hook]
    (site / "ggprof_bad_plugin.py").write_text("from ggprof import hookimpl\n\n" + body)


def test_a_plugin_raising_in_judge_loses_nothing(tmp_path: Path) -> None:
    raising_plugin(tmp_path / "site", "judge")
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    r = ggprof_timed("check", str(model), "--tg", "1000000", "--bandwidth", "50", "--json", env=site_env(tmp_path))
    d = json.loads(r.stdout)
    codes = {f["code"]: f for f in d["findings"]}
    assert (r.returncode, d["verdict"]) == (4, "impossible") and "DECODE_ABOVE_CEILING" in codes
    assert codes["PLUGIN_FAILED"]["plugin"] == "example" and "judge exploded" in codes["PLUGIN_FAILED"]["evidence"][0]
    assert "warning: plugin 'example' failed in its judge hook: RuntimeError: judge exploded" in r.stderr


def test_a_plugin_raising_in_register_commands_breaks_no_command(tmp_path: Path) -> None:
    raising_plugin(tmp_path / "site", "register_commands")
    r = ggprof_timed("--help", env=site_env(tmp_path))
    assert r.returncode == 0 and "profile" in r.stdout and "failed in its register_commands hook" in r.stderr
    assert ggprof_timed("--version", env=site_env(tmp_path)).returncode == 0


def test_a_plugin_calling_sys_exit_at_import_is_reported(tmp_path: Path) -> None:
    raising_plugin(tmp_path / "site", "import")
    r = ggprof_timed("plugins", env=site_env(tmp_path))
    assert r.returncode == 0 and "example" in r.stdout and "FAILED: SystemExit" in r.stdout


def test_ggprof_plugins_naming_a_missing_plugin_warns() -> None:
    r = ggprof_timed("plugins", env={"GGPROF_PLUGINS": "cpu,nosuch"})
    assert r.returncode == 0 and "GGPROF_PLUGINS names 'nosuch', but no installed plugin has that name" in r.stderr


def test_a_file_shaped_cache_dir_is_a_warning_not_a_lost_measurement(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    r = ggprof_timed("host", "--quick", "--json", env={"GGPROF_CACHE_DIR": str(cache)})
    assert r.returncode == 0 and json.loads(r.stdout)["measured_read_bandwidth_bytes_per_s"] > 0
    assert "warning: could not cache the measurement" in r.stderr


@pytest.mark.parametrize(
    "corrupt",
    [
        "[]",
        '{"version": 1, "measured_at": NaN, "bandwidth": {}, "sgemm": {}}',
        "EMPTY_SAMPLES",
        "NEGATIVE_SAMPLES",
    ],
)
def test_a_corrupt_host_cache_is_ignored(corrupt: str, tmp_path: Path) -> None:
    env = {"GGPROF_CACHE_DIR": str(tmp_path)}
    ggprof_timed("host", "--quick", env=env)  # a valid cache to spoil
    (path,) = tmp_path.glob("host-*.json")
    good = json.loads(path.read_text())
    if corrupt == "EMPTY_SAMPLES":
        good["bandwidth"]["read"]["samples_bytes_per_s"] = []
        corrupt = json.dumps(good)
    elif corrupt == "NEGATIVE_SAMPLES":
        good["bandwidth"]["read"]["samples_bytes_per_s"] = [-1e9]
        corrupt = json.dumps(good)
    path.write_text(corrupt)
    r = ggprof_timed("host", "--no-measure", "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["measured_read_bandwidth_bytes_per_s"] is None


# -- 6. common paths ------------------------------------------------------------------------------
def test_partial_offload_without_a_cpu_figure_says_what_to_do(  # type: ignore[no-untyped-def]
    tmp_path: Path, gemma_path: Path, run_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run: nothing measured, and (as in a VM) no memory modules to read a figure from."""
    from ggprof.machine import host

    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(host, "detect_memory", lambda: None)
    r = run_cli("predict", str(gemma_path), "--device", "rtx-4090", "-ngl", "0")
    assert r.exit_code == 2 and "CPU bandwidth is unknown: run `ggprof host` first" in r.stderr


def test_partial_offload_with_a_measured_host_is_predicted(  # type: ignore[no-untyped-def]
    tmp_path: Path, gemma_path: Path, run_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ggprof_timed("host", "--quick", env={"GGPROF_CACHE_DIR": str(tmp_path)}).returncode == 0
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path))
    r = run_cli("predict", str(gemma_path), "--device", "rtx-4090", "-ngl", "0", "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and d["n_gpu_layers"] == 0 and d["bandwidth_source"] == "profile"


def test_a_split_shard_that_does_not_exist_is_refused(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    for i in (1, 2):
        write_model(tmp_path / f"m-0000{i}-of-00002.gguf", Shape())
    r = run_cli("inspect", str(tmp_path / "m-00009-of-00002.gguf"))
    assert r.exit_code == 2 and "names shard 9 of a 2-file split model: there is no such shard" in r.stderr


# -- 7. interrupts end the run and its llama.cpp child ---------------------------------------------------
def start_bench(model: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ggprof", "bench", str(model), "-p", "0", "-n", "30000", "-r", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def llama_child(proc: subprocess.Popen[str], timeout_s: float = 60) -> psutil.Process:
    """The llama.cpp child of a running `ggprof bench`, once it is decoding."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for kid in psutil.Process(proc.pid).children():
            try:  # a short-lived helper can be a zombie (or gone) by the time it is asked
                if "ggprof.bench.child" in " ".join(kid.cmdline()) and kid.cpu_times().user > 0.5:
                    return kid
            except psutil.Error:
                continue
        time.sleep(0.2)
    raise AssertionError("the llama.cpp child did not start")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "status", "word"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_a_signal_ends_bench_and_its_child(sig: int, status: int, word: str, gemma_path: Path) -> None:
    proc = start_bench(gemma_path)
    try:
        child = llama_child(proc)
    except BaseException:  # the run ends (and its pipes close) even when the child was not found
        proc.kill()
        proc.communicate(timeout=60)
        raise
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status and f"Error: {word}" in err
    child.wait(timeout=10)
    assert not child.is_running()


@pytest.mark.slow
def test_kill_9_of_ggprof_ends_the_child_too(gemma_path: Path) -> None:
    proc = start_bench(gemma_path)
    try:
        child = llama_child(proc)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    child.wait(timeout=10)
    assert not child.is_running()


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
    r = ggprof_timed("check", str(gemma_path), "--llama-bench", str(rows), "--json", env=env)
    d = json.loads(r.stdout)
    assert r.returncode == d["exit_status"] and len(d["rows"]) == 1000
    assert sorted(calls.read_text().split()) == ["amd-smi", "nvidia-smi", "rocm-smi", "vulkaninfo"]


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


# -- 9. flags are never silently wrong --------------------------------------------------------------------
@pytest.mark.slow
def test_threads_above_the_cores_are_warned(gemma_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    n = psutil.cpu_count(logical=True) + 1
    r = run_cli("bench", str(gemma_path), "-p", "8", "-n", "2", "-r", "1", "-t", str(n), "--json")
    assert r.exit_code == 0 and f"warning: -t {n} is more than this machine's" in r.stderr


@pytest.mark.slow
def test_an_unknown_architecture_says_what_llama_cpp_said(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = write_model(tmp_path / "odd.gguf", Shape(arch="notanarch"))[0]
    r = run_cli("bench", str(path), "-p", "8", "-n", "2", "-r", "1")
    assert r.exit_code == 2 and "unknown model architecture" in r.stderr, r.stderr


def site_env(tmp_path: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(tmp_path / "site")}


def ggprof_timed(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`ggprof ARGS` in a subprocess that must finish (a hang fails the test instead of blocking it)."""
    return subprocess.run(
        [sys.executable, "-m", "ggprof", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


# -- fuzz: llama-bench rows and hardware profiles, as the GGUF reader is fuzzed ----------------------------
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
row_fields = st.sampled_from(
    ["n_prompt", "n_gen", "n_depth", "avg_ts", "stddev_ts", "n_gpu_layers", "backends", "model_filename"]
)
fuzzed_rows = st.lists(
    st.dictionaries(row_fields, json_values, max_size=8).map(lambda d: {**row(), **d}), min_size=1, max_size=3
)


def run_in_process(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from ggprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=fuzzed_rows, as_jsonl=st.booleans())
def test_fuzz_llama_bench_rows(rows: list[dict[str, object]], as_jsonl: bool, tmp_path: Path, gemma_path: Path) -> None:
    path = tmp_path / "fuzz.json"
    text = "\n".join(json.dumps(r) for r in rows) if as_jsonl else json.dumps(rows)
    path.write_text(text)
    code, out, err = run_in_process("check", str(gemma_path), "--llama-bench", str(path), "--bandwidth", "90", "--json")
    assert code in (0, 2, 3, 4), err  # a verdict or bad input; never an internal error
    assert clean_output(out + err)
    if code == 2:
        assert err.startswith("Error: ") and err.count("\n") == 1 and out == ""
    else:
        assert json.loads(out)["exit_status"] == code


toml_values = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(str),
    st.sampled_from(["inf", "-inf", "nan", "1e308", "0", "0.0", "true", "[]", '["a", 1]', "{}", '"x"', '"\\u001b[2J"']),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(alphabet="abc()[]|*+?.^$\\{}1", max_size=12).map(lambda t: json.dumps([t])),
)
profile_fields = st.sampled_from(
    [
        "id",
        "name",
        "kind",
        "backends",
        "memory_bandwidth_gbs",
        "source",
        "memory_gb",
        "peak_fp16_tflops",
        "gpu_cores",
        "match",
        "notes",
        "sources",
        "\\u001bzz",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.dictionaries(profile_fields, toml_values, max_size=6), garbage=st.binary(max_size=20))
def test_fuzz_hardware_profiles(fields: dict[str, str], garbage: bytes, tmp_path: Path) -> None:
    base = {
        "id": '"fuzz"',
        "name": '"Fuzz"',
        "kind": '"gpu"',
        "backends": '["cuda"]',
        "source": '"x"',
        "memory_bandwidth_gbs": "100",
    }
    lines = [f'"{k}" = {v}' if "\\" in k else f"{k} = {v}" for k, v in {**base, **fields}.items()]
    user = tmp_path / "cfg" / "profiles"
    user.mkdir(parents=True, exist_ok=True)
    (user / "fuzz.toml").write_bytes("\n".join(lines).encode() + b"\n" + garbage)
    before = os.environ["GGPROF_CONFIG_DIR"]  # set per test by conftest's fixture
    os.environ["GGPROF_CONFIG_DIR"] = str(tmp_path / "cfg")
    try:
        code, out, err = run_in_process("profiles")
    finally:
        os.environ["GGPROF_CONFIG_DIR"] = before
    assert code in (0, 2), err
    assert clean_output(out + err)
    if code == 2:
        assert err.startswith("Error: ") and err.count("\n") == 1 and "fuzz.toml" in err


def test_a_backend_plugin_raising_while_judging_is_named(tmp_path: Path, gemma_path: Path) -> None:
    site = tmp_path / "site"
    install_example(site, module="ggprof_bad_backend")
    (site / "ggprof_bad_backend.py").write_text(
        "from ggprof import Backend, Detection, hookimpl\n\n"
        "class Broken(Backend):\n"
        "    name = 'broken'\n"
        "    def detect(self, host):\n"
        "        return Detection(backend=self.name, reason='none here')\n"
        "    def efficiency_band(self, model, device):\n"
        "        raise ZeroDivisionError('band exploded')\n"
        "    def compute_roof(self, case):\n"
        "        raise ZeroDivisionError('roof exploded')\n\n"
        "@hookimpl\n"
        "def register_backends(register):\n"
        "    register(Broken())\n"
    )
    r = ggprof_timed(
        "check",
        str(gemma_path),
        "--tg",
        "50",
        "--bandwidth",
        "90",
        "--backend",
        "broken",
        "--json",
        env=site_env(tmp_path),
    )
    d = json.loads(r.stdout)
    failed = next(f for f in d["findings"] if f["code"] == "PLUGIN_FAILED")
    assert (r.returncode, d["verdict"], failed["plugin"]) == (0, "unknown", "broken")
    assert failed["evidence"] == ["ZeroDivisionError: roof exploded"]

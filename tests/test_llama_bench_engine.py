"""The llama-bench engine: the real llama-bench (built from the installed llama-cpp-python's
llama.cpp) on the real Gemma model, end to end, and llama-bench programs that misbehave."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from support import RunCli, as_process, judged, started

from ggprof.machine.profiles import ProfileDB

SMALL = ("-p", "32", "-n", "8", "-r", "2")


def engine(tools: Path) -> str:
    return f"llama-bench={tools / 'llama-bench'}"


def script(tmp_path: Path, body: str, name: str = "llama-bench") -> Path:
    """A program that stands in for a broken llama-bench."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def real_row(tools: Path, gemma: Path) -> str:
    """One real JSONL row of this llama-bench, for the scripts to replay."""
    r = as_process(
        "bench", str(gemma), "--engine", engine(tools), "-p", "0", "-n", "4", "-r", "1", "--no-save", "-o", "jsonl"
    )
    assert r.exit_code == 0, r.stderr
    return r.stdout.splitlines()[0]


@pytest.mark.slow
def test_profile_through_llama_bench_judges_keeps_and_reports(
    llama_tools: Path, gemma_path: Path, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    # the host pinned (--bandwidth 0.1 GB/s: a ceiling of 0.4 tok/s that any real decode is above),
    # so that the verdict is one certain code whatever this machine is; one thread, so that a
    # busy machine cannot make it spin at every barrier (two threads beside a busy loop on two
    # cores decoded below 0.4 tok/s)
    r = as_process(
        "profile", str(gemma_path), "--engine", engine(llama_tools), *SMALL, "--db", str(db), "--json",
        "--bandwidth", "0.1", "-t", "1", timeout_s=300,
    )  # fmt: skip
    d = judged(r)
    assert d["engine"].startswith("llama.cpp's llama-bench (")
    assert [(b["n_prompt"], b["n_gen"]) for b in d["bench"]] == [(32, 0), (0, 8)]
    first = d["bench"][0]
    assert first["engine"] == "llama-bench" and first["backends"] == "CPU" and first["build_commit"]
    assert len(first["samples_ns"]) == 2 and first["avg_ts"] > 0
    assert d["context"]["backends_used"] == ["cpu"] and isinstance(d["context"]["repack"], bool)
    # judged as any run is: the decode against the ceiling, the thread probe at half the threads
    (decode,) = [f for f in d["findings"] if f["code"].startswith("DECODE_")]
    assert (decode["code"], d["verdict"], r.exit_code) == ("DECODE_ABOVE_CEILING", "impossible", 4)
    threads = d["context"]["n_threads"]
    assert d["depths"][0]["probe_threads"] == (threads // 2 if threads >= 2 else None)
    # kept, listed and reported like a python-engine run
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from runs").fetchone()[0] == 1
    listed = as_process("history", "--db", str(db), "--json")
    assert listed.exit_code == 0 and json.loads(listed.stdout)[0]["kind"] == "profile"
    report = as_process("report", "--db", str(db))
    assert report.exit_code == 0 and "llama-bench engine" in report.stdout
    # compared with the same tests through the python engine: the engine is named as a difference
    judged(as_process("profile", str(gemma_path), *SMALL, "--db", str(db), "--json", timeout_s=300))
    compared = as_process("compare", "1", "2", "--db", str(db))
    assert compared.exit_code == 0 and "| pp32 |" in compared.stdout and "| tg8 |" in compared.stdout
    assert "engine: llama-bench vs python" in compared.stdout
    # and drawn as any kept profile is
    pytest.importorskip("matplotlib")
    drawn = as_process("plot", "1", "--db", str(db), "-o", str(tmp_path / "roofline.svg"))
    assert drawn.exit_code == 0 and (tmp_path / "roofline.svg").read_text().lstrip().startswith("<?xml")


@pytest.mark.slow
def test_without_r_llama_bench_repeats_until_the_answer_is_known(llama_tools: Path, gemma_path: Path) -> None:
    """Without -r, llama-bench runs each test 3 times first (another invocation costs a load and
    a warm-up), then again where the answer is not known yet; each row says why it stopped,
    and the report says so, from 3 (one invocation cannot stop after 1)."""
    # --ignore-load: the rule in full whatever else runs here (a busy machine gets a shorter one)
    args: tuple[str, ...] = ("profile", str(gemma_path), "--engine", engine(llama_tools), "-p", "32", "-n", "8")
    args += ("--no-save", "--ignore-load")
    d = judged(as_process(*args, "--json", timeout_s=300))
    assert all(3 <= len(b["samples_ns"]) <= 10 and b["stop_reason"] for b in d["bench"])
    said = " ".join(as_process(*args, timeout_s=300).stdout.split())  # the report wraps its lines
    assert "repetitions until tok/s is known within 3% (95% CI; 3-10) or its verdict cannot change," in said


@pytest.mark.slow
def test_with_r_llama_bench_runs_that_count(llama_tools: Path, gemma_path: Path) -> None:
    args = ("profile", str(gemma_path), "--engine", engine(llama_tools), "-p", "32", "-n", "8", "-r", "2")
    d = judged(as_process(*args, "--json", "--no-save", timeout_s=300))
    assert [(len(b["samples_ns"]), b["stop_reason"]) for b in d["bench"]] == [(2, None), (2, None)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("n_prompt", "n_gen", "target", "samples", "reason"),
    [
        # 1000%: known after the first invocation
        (0, 64, 10.0, 3, "stopped after 3: "),
        # never known; a repetition of tg256 on 1 thread (3 s on a 2-core EPYC VM, 8-16 s on
        # slower ones) outweighs a load and a one-token warm-up (about 1 s there: with tg64, at
        # 0.75 s a repetition, it did not): one more invocation of 1 tells it is too noisy
        (0, 256, 1e-9, 4, "too noisy to pin down: "),
        # never known; a repetition of pp16 (under 0.1 s) weighs less than the load and the
        # warm-up another invocation would cost: it stops and says so
        (16, 0, 1e-9, 3, "1 more would take another llama-bench invocation"),
    ],
)
def test_another_invocation_adds_repetitions_where_they_are_worth_it(
    llama_tools: Path, gemma_path: Path, n_prompt: int, n_gen: int, target: float, samples: int, reason: str
) -> None:
    from ggprof.bench.results import BenchParams
    from ggprof.bench.stopping import StopRule
    from ggprof.engines.llama_bench import LlamaBenchEngine
    from ggprof.machine.facts import gather_facts
    from ggprof.model.spec import load_model

    params = BenchParams(
        model=gemma_path, n_prompt=(n_prompt,), n_gen=(n_gen,), n_threads=1, stop=StopRule(target=target)
    )
    result = LlamaBenchEngine(str(llama_tools / "llama-bench")).run(load_model(gemma_path), params, gather_facts())
    (row,) = result.rows
    assert len(row.samples_ns) == samples and row.stop_reason and reason in row.stop_reason


@pytest.mark.slow
def test_a_later_invocation_that_crashes_keeps_what_the_first_measured(
    llama_tools: Path, gemma_path: Path, tmp_path: Path
) -> None:
    """The real llama-bench the first time; the second invocation dies (SIGSEGV after one
    line of stderr): the first three repetitions stand, and the reason names the failure."""
    from ggprof.bench.results import BenchParams
    from ggprof.bench.stopping import StopRule
    from ggprof.engines.llama_bench import LlamaBenchEngine
    from ggprof.machine.facts import gather_facts
    from ggprof.model.spec import load_model

    mark = tmp_path / "ran-once"
    real = llama_tools / "llama-bench"
    wrapper = script(
        tmp_path,
        f'if [ -e "{mark}" ]; then echo "GGML_ASSERT(false) failed" >&2; kill -SEGV $$; fi\n'
        f'touch "{mark}"\nexec "{real}" "$@"',
    )
    params = BenchParams(model=gemma_path, n_prompt=(0,), n_gen=(64,), n_threads=1, stop=StopRule(target=1e-9))
    (row,) = LlamaBenchEngine(str(wrapper)).run(load_model(gemma_path), params, gather_facts()).rows
    assert len(row.samples_ns) == 3
    assert row.stop_reason and row.stop_reason.startswith("stopped after 3: another llama-bench invocation failed")
    assert "SIGSEGV" in row.stop_reason


@pytest.mark.slow
def test_bench_lists_of_threads_and_depths_through_llama_bench(llama_tools: Path, gemma_path: Path) -> None:
    r = as_process(
        "bench", str(gemma_path), "--engine", engine(llama_tools), "-p", "16", "-n", "4", "-r", "1",
        "-t", "1,2", "-d", "0,16", "--no-save", "-o", "json", timeout_s=300,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["n_threads"], x["n_depth"], x["n_prompt"], x["n_gen"]) for x in rows] == [
        (t, d, p, g) for t in (1, 2) for d in (0, 16) for p, g in ((16, 0), (0, 4))
    ]


def test_a_path_that_is_not_a_program_is_one_line(tmp_path: Path, gemma_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    r = as_process("bench", str(gemma_path), "--engine", f"llama-bench={tmp_path / 'notes.txt'}", "--no-save")
    assert r.exit_code == 2 and r.stderr.strip().endswith("notes.txt: not an executable file")
    r = as_process("bench", str(gemma_path), "--engine", "llama-bench", "--no-save", env={"PATH": str(tmp_path)})
    assert r.exit_code == 2 and "needs llama-bench: give --engine llama-bench=PATH" in r.stderr
    r = as_process("bench", str(gemma_path), "--engine", "vllm", "--no-save")
    assert r.exit_code == 2 and "--engine vllm: no such engine (known: llama-bench, python, server)" in r.stderr


def test_llama_bench_printing_garbage_is_one_line(tmp_path: Path, gemma_path: Path) -> None:
    fake = script(tmp_path, 'echo "this is not json"')
    r = as_process("bench", str(gemma_path), "--engine", f"llama-bench={fake}", "--no-save")
    assert r.exit_code == 5 and "Traceback" not in r.stderr
    assert "output line 1 is not a result row (not a JSON object): this is not json" in r.stderr


def test_llama_bench_printing_a_hostile_row_is_one_line(tmp_path: Path, gemma_path: Path) -> None:
    row = {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "samples_ns": [-5], "avg_ts": 1e308, "backends": "CPU"}
    fake = script(tmp_path, f"echo '{json.dumps(row)}'")
    r = as_process("bench", str(gemma_path), "--engine", f"llama-bench={fake}", "--no-save")
    assert r.exit_code == 5 and "samples_ns holds something other than positive nanoseconds" in r.stderr


@pytest.mark.slow
def test_a_crash_after_a_row_names_what_was_measured(llama_tools: Path, tmp_path: Path, gemma_path: Path) -> None:
    row = real_row(llama_tools, gemma_path)
    fake = script(tmp_path, f"echo '{row}'\necho 'GGML_ASSERT(false) failed' >&2\nkill -SEGV $$")
    r = as_process("bench", str(gemma_path), "--engine", f"llama-bench={fake}", "-p", "0", "-n", "4,8", "--no-save")
    assert r.exit_code == 5 and r.stderr.count("\n") == 1
    assert "killed by SIGSEGV; llama-bench last said: GGML_ASSERT(false) failed" in r.stderr
    assert "measured before the fault: tg4 " in r.stderr


def test_a_hanging_llama_bench_times_out(tmp_path: Path, gemma_path: Path) -> None:
    fake = script(tmp_path, "sleep 600")
    t0 = time.monotonic()
    r = as_process("bench", str(gemma_path), "--engine", f"llama-bench={fake}", "--timeout", "2", "--no-save")
    assert r.exit_code == 5 and "timed out after 2 s (--timeout)" in r.stderr and time.monotonic() - t0 < 30


def _named(proc: psutil.Process, name: str) -> bool:
    """Whether a process is `name` (a short-lived helper may be gone by the time it is asked)."""
    try:
        found: str = proc.name()
    except psutil.Error:
        return False
    return found == name


def test_ctrl_c_ends_llama_bench_and_its_process_group(tmp_path: Path, gemma_path: Path) -> None:
    fake = script(tmp_path, "sleep 600 & wait")
    proc = started("bench", str(gemma_path), "--engine", f"llama-bench={fake}", "--no-save")
    deadline, sleeper = time.monotonic() + 60, None
    while sleeper is None and time.monotonic() < deadline:
        kids = psutil.Process(proc.pid).children(recursive=True)
        sleeper = next((k for k in kids if _named(k, "sleep")), None)
        time.sleep(0.2)
    assert sleeper is not None
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Error: interrupted" in err
    sleeper.wait(timeout=10)
    assert not sleeper.is_running()


def test_parallel_needs_the_python_engine(tmp_path: Path, gemma_path: Path) -> None:
    fake = script(tmp_path, "exit 0")
    r = as_process("bench", str(gemma_path), "--engine", f"llama-bench={fake}", "--parallel", "1,2", "--no-save")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert (
        "--parallel measures several sequences decoded together in one context (a batch sweep), which the " in r.stderr
    )
    assert "llama-bench engine cannot; engines that can: python" in r.stderr


@pytest.mark.parametrize(("low_tok_s", "probed"), [(50.0, False), (150.0, True)])
def test_the_thread_probe_invocation_only_where_the_decode_verdict_turns_on_it(
    llama_tools: Path, gemma_path: Path, tmp_path: Path, low_tok_s: float, probed: bool
) -> None:
    """A llama-bench that replays this llama-bench's real row, its three tg4 repetitions 40 ms
    each (100 tok/s), and logs its arguments. Plausible from 50 tok/s, the decode's interval
    lies wholly inside before any probe: no probe invocation (-t 1). From 150 tok/s, only the
    compute roof the probe measures can lower the low end: the probe runs."""
    from ggprof.bench.results import BenchParams
    from ggprof.bench.stopping import PlausibleRange, StopRule
    from ggprof.engines.llama_bench import LlamaBenchEngine
    from ggprof.machine.facts import gather_facts
    from ggprof.model.spec import load_model

    row = json.loads(real_row(llama_tools, gemma_path))
    row.update(samples_ns=[40_000_000] * 3, stddev_ts=0.0)
    log = tmp_path / "args.log"
    # each repetition 40 ms, of as many tokens as -n asks (the decode's tg4, the probe's tg16),
    # avg_ts as llama-bench computes it from those samples (n x 25 tok/s)
    fake = tmp_path / "llama-bench"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\nargs = sys.argv[1:]\n"
        f"open({str(log)!r}, 'a').write(' '.join(args) + '\\n')\n"
        "n = int(args[args.index('-n') + 1])\n"
        f"row = json.loads({json.dumps(row)!r})\nrow.update(n_gen=n, avg_ts=n * 25.0)\nprint(json.dumps(row))\n"
    )
    fake.chmod(0o755)
    rule = StopRule(ranges=(PlausibleRange("tg@0", low_tok_s, 1000.0, 1.14),))
    params = BenchParams(
        model=gemma_path, n_prompt=(0,), n_gen=(4,), n_threads=2, probe_threads=1, stop=rule, repack="off"
    )
    (result,) = LlamaBenchEngine(str(fake)).run(load_model(gemma_path), params, gather_facts()).rows
    probes = [line for line in log.read_text().splitlines() if " -t 1 " in f"{line} "]
    assert len(probes) == (1 if probed else 0)
    assert (result.probe is not None) == probed
    assert result.stop_reason is not None
    assert result.stop_reason.endswith("no thread probe: the decode lies wholly in the range") != probed


@pytest.mark.slow
def test_a_profile_asks_llama_bench_for_its_devices_once(llama_tools: Path, tmp_path: Path, run_cli: RunCli) -> None:
    """The build's backends are asked once per run (`llama-bench --list-devices` is a process
    start): a wrapper around the real llama-bench counts its invocations."""
    from ggprof.model.synth import SHAPES, write_model

    log = tmp_path / "calls"
    real = llama_tools / "llama-bench"
    wrapper = script(tmp_path, f'echo "$*" >> "{log}"\nexec "{real}" "$@"')
    model = write_model(SHAPES["tiny"], "q4_0", tmp_path / "tiny.gguf")
    r = run_cli("profile", str(model), "--engine", f"llama-bench={wrapper}", "-p", "16", "-n", "8", "--json")
    assert json.loads(r.stdout)["bench"], r.stderr  # the run was measured (its verdict is another test's)
    calls = log.read_text().splitlines()
    assert [c for c in calls if "--list-devices" in c] == ["--list-devices"]
    assert any("-o jsonl" in c for c in calls)


# The Arc A770's banner in llama.cpp PR #14001 (Windows, b5589): its Vulkan build had no matrix cores
A770_BANNER = (
    "ggml_vulkan: 0 = Intel(R) Arc(TM) A770 Graphics (Intel Corporation) | uma: 0 | fp16: 1 | "
    "warp size: 32 | shared memory: 32768 | int dot: 0 | matrix cores: none"
)


def gpu_profile_run(
    llama_tools: Path, gemma: Path, tmp_path: Path, backend: str, device_line: str, stderr: str, device: str
) -> dict[str, Any]:
    """`profile --engine llama-bench --device DEVICE` through a wrapper standing in for a GPU
    build of llama-bench, which this machine cannot have: it lists `device_line` as the build's
    device, prints `stderr` (what such a build prints) and runs the real llama-bench, its rows'
    backend renamed `backend`."""
    real = llama_tools / "llama-bench"
    relabel = f'sed -u \'s/"backends": "CPU"/"backends": "{backend}"/\''
    wrapper = script(
        tmp_path,
        f'case "$*" in *--list-devices*) echo "Available devices:"; echo "  {device_line}"; exit 0;; esac\n'
        f'printf "%s\\n" "{stderr}" >&2\n"{real}" "$@" | {relabel}',
    )
    r = as_process(
        "profile", str(gemma), "--engine", f"llama-bench={wrapper}", "--device", device,
        "-p", "32", "-n", "8", "-r", "2", "-t", "1", "--json", "--no-save", timeout_s=300,
    )  # fmt: skip
    out: dict[str, Any] = json.loads(r.stdout)
    assert out["bench"], r.stderr
    return out


@pytest.mark.slow
def test_the_vulkan_banner_llama_bench_prints_sets_the_prefill_ceiling(
    llama_tools: Path, gemma_path: Path, tmp_path: Path
) -> None:
    """llama-bench's Vulkan build prints each device's banner on stderr: what it says of matrix
    cores reaches the verdict (the A770's public banner)."""
    device_line = "Vulkan0: Intel(R) Arc(TM) A770 Graphics (16032 MiB, 15000 MiB free)"
    d = gpu_profile_run(llama_tools, gemma_path, tmp_path, "Vulkan", device_line, A770_BANNER, "arc-a770")
    assert d["context"]["matrix_cores"] == "none" and d["context"]["backends_used"] == ["vulkan"]
    assert d["context"]["vulkan_driver"] == "Intel Corporation"  # the banner's last parenthesis
    assert d["context"]["int_dot"] is False  # `int dot: 0`
    assert d["context"]["rocblas_use_hipblaslt"] is None  # not a ROCm run
    prediction = d["depths"][0]["prediction"]
    fp32_tflops = ProfileDB.default().get("arc-a770").peak_fp32_tflops
    assert fp32_tflops is not None
    assert prediction["peak_flops_per_s"] == pytest.approx(2 * fp32_tflops * 1e12, rel=1e-6)  # twice its FP32 rate
    assert "its vector units (the build used no matrix cores)" in prediction["peak_flops_source"]


# What a SYCL build of llama.cpp prints on stderr before its devices (ggml-sycl.cpp, `Running
# with Environment Variables` and `Build with Macros`), here of a run with its reorder
# optimizations off and a build without GGML_SYCL_F16
SYCL_MACROS = (
    "Running with Environment Variables:\n  GGML_SYCL_DEBUG: 0\n  GGML_SYCL_ENABLE_OPT: 0\n"
    "Build with Macros:\n  GGML_SYCL_DNNL: yes\n  GGML_SYCL_F16: no\n  GGML_SYCL_FORCE_MMQ: no"
)


@pytest.mark.slow
def test_a_sycl_build_without_f16_sets_the_prefill_ceiling(llama_tools: Path, gemma_path: Path, tmp_path: Path) -> None:
    """A SYCL build multiplies a prompt's quantized weights on the XMX units only with
    GGML_SYCL_F16, which it prints on stderr: a build without it is judged on the vector units
    at the FP32 rate. The run's reorder optimizations, printed beside it, are recorded too."""
    device_line = "SYCL0: Intel(R) Arc(TM) 140V GPU (16GB) (15000 MiB, 14000 MiB free)"
    d = gpu_profile_run(llama_tools, gemma_path, tmp_path, "SYCL", device_line, SYCL_MACROS, "arc-140v")
    assert d["context"]["sycl_f16"] is False and d["context"]["backends_used"] == ["sycl"]
    assert d["context"]["sycl_reorder"] is False  # `GGML_SYCL_ENABLE_OPT: 0`
    prediction = d["depths"][0]["prediction"]
    fp32_tflops = ProfileDB.default().get("arc-140v").peak_fp32_tflops
    assert fp32_tflops is not None
    assert prediction["peak_flops_per_s"] == pytest.approx(fp32_tflops * 1e12, rel=1e-6)  # its FP32 rate
    assert "at the FP32 rate (the build used no matrix cores)" in prediction["peak_flops_source"]


@pytest.mark.slow
@pytest.mark.parametrize(("setting", "recorded", "shown"), [("0", "0", "= 0"), (None, "unset", "not set")])
def test_a_rocm_run_records_its_rocblas_hipblaslt_setting(
    llama_tools: Path, gemma_path: Path, tmp_path: Path, setting: str | None, recorded: str, shown: str
) -> None:
    """rocBLAS hands its GEMMs to hipBLASLt by ROCBLAS_USE_HIPBLASLT, which llama-bench inherits:
    the run records the setting and the report prints it. The GPU is what this machine cannot
    have: the real llama-bench's rows are relabelled ROCm."""
    real = llama_tools / "llama-bench"
    relabel = 'sed -u \'s/"backends": "CPU"/"backends": "ROCm"/\''
    wrapper = script(tmp_path, f'"{real}" "$@" | {relabel}')
    env = {k: v for k, v in os.environ.items() if k != "ROCBLAS_USE_HIPBLASLT"}
    args = (
        "profile", str(gemma_path), "--engine", f"llama-bench={wrapper}", "-p", "16", "-n", "4", "-r", "1", "-t", "1",
    )  # fmt: skip
    run_env = {**env, **({"ROCBLAS_USE_HIPBLASLT": setting} if setting is not None else {})}
    r = subprocess.run(
        [sys.executable, "-m", "ggprof", *args, "--json", "--no-save"],
        capture_output=True, text=True, timeout=300, check=False, env=run_env,
    )  # fmt: skip
    d = json.loads(r.stdout)
    assert d["context"]["backends_used"] == ["rocm"] and d["context"]["rocblas_use_hipblaslt"] == recorded, r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "ggprof", *args, "--no-save"],
        capture_output=True, text=True, timeout=300, check=False, env=run_env,
    )  # fmt: skip
    assert f"ROCBLAS_USE_HIPBLASLT {shown}" in r.stdout, r.stdout + r.stderr


@pytest.mark.slow
def test_a_hostile_banner_on_stderr_is_not_read(llama_tools: Path, gemma_path: Path, tmp_path: Path) -> None:
    """A banner line past a log line's bound (a 5,000-digit device index, a megabyte of
    `Vulkan0: ` after `uma: `) says nothing: the run is measured and judged as any other."""
    real = llama_tools / "llama-bench"
    hostile = (
        "import sys; sys.stderr.write('ggml_vulkan: ' + '9' * 5000 + ' = X | uma: 0 | matrix cores: none\\n'); "
        "sys.stderr.write('uma: 0 ' + 'Vulkan0: ' * 100000 + '\\n')"
    )
    wrapper = script(tmp_path, f'{sys.executable} -c "{hostile}"\nexec "{real}" "$@"')
    r = as_process(
        "profile", str(gemma_path), "--engine", f"llama-bench={wrapper}", "-p", "16", "-n", "4", "-r", "1",
        "-t", "1", "--json", "--no-save", timeout_s=300,
    )  # fmt: skip
    d = json.loads(r.stdout)
    assert d["bench"] and d["context"]["matrix_cores"] is None, r.stderr
    assert "Traceback" not in r.stderr

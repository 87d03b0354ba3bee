"""A CPU-only llama.cpp build on a host with a GPU: said before the run, in one line with the
rebuild command, and the run is judged as the CPU run it was, never against the GPU.

The GPU is the one thing this machine cannot have: nvidia-smi answers as it did on an H200
(tests/data/h200/nvidia-smi-query.csv, recorded by benchmarks/device_cuda.sh). The run is
the real llama.cpp of the installed (CPU-only) llama-cpp-python on the real Gemma model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import CliResult, as_process, with_h200

REBUILD = 'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir llama-cpp-python'


def short_profile(model: Path, *args: str, env: dict[str, str]) -> CliResult:
    """A short `ggprof profile --json` of the real model (2 repetitions of pp16 and tg8)."""
    return as_process(
        "profile", str(model), "-p", "16", "-n", "8", "-r", "2", "--json", "--no-save", *args, env=env, timeout_s=300
    )


@pytest.mark.slow
@pytest.mark.parametrize("ask", [(), ("--device", "rtx-4090")], ids=["host-gpu", "device-profile"])
def test_a_cpu_build_asked_for_a_gpu(ask: tuple[str, ...], tmp_path: Path, gemma_path: Path) -> None:
    env = with_h200(tmp_path)
    host = json.loads(as_process("host", "--no-measure", "--json", env=env).stdout)
    assert any(d["backend"] == "cuda" for d in host["devices"])  # the plugin sees the (recorded) GPU
    r = short_profile(gemma_path, *ask, env=env)
    warning = [line for line in r.stderr.splitlines() if line.startswith("warning:") and "CUDA backend" in line]
    assert len(warning) == 1 and REBUILD in warning[0] and "--engine llama-bench=PATH" in warning[0]
    assert "the python engine's build has only CPU: this run will use the CPU" in warning[0]
    d = json.loads(r.stdout)
    assert r.exit_code == 3 and d["verdict"] == "suspicious"
    first = d["findings"][0]
    assert first["code"] == "GPU_NOT_USED" and first["severity"] == "suspicious"
    assert first["causes"][0].startswith("this llama.cpp build (python engine) has no CUDA backend, only CPU")
    # judged on this host's CPU, never against the GPU's ceiling
    assert d["device"]["backend"] == "cpu" and d["context"]["backends_used"] == ["cpu"]
    gpu_bandwidth = 4.8e12 if not ask else 1.008e12
    assert d["depths"][0]["prediction"]["bandwidth_bytes_per_s"] < gpu_bandwidth / 10


@pytest.mark.slow
def test_a_cpu_run_asked_for_the_cpu_is_not_flagged(tmp_path: Path, gemma_path: Path) -> None:
    r = short_profile(gemma_path, "-ngl", "0", env=with_h200(tmp_path))
    d = json.loads(r.stdout)
    assert "GPU_NOT_USED" not in {f["code"] for f in d["findings"]}
    assert not [line for line in r.stderr.splitlines() if "CUDA backend" in line]

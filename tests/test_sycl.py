"""SYCL: Intel GPUs through oneAPI, judged by the speed fits like every GPU backend, a prompt
on the units its build used (the XMX units with GGML_SYCL_F16, the vector units at the FP32
rate without it). The GPU is what this machine lacks: the verdicts are `ggprof check`'s on
reported figures and on a real pasted SYCL log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ggufs import Q4_8B_TIED, write_model
from support import in_process

from ggprof.machine.profiles import ProfileDB, builtin_dir
from ggprof.pipelines.calibrate import load_dataset

ROOT = Path(__file__).resolve().parents[1]
LOGS = Path(__file__).parent / "data" / "logs"


@pytest.fixture(scope="module")
def q4_8b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("m") / "8b-q4.gguf", Q4_8B_TIED)[0]


def prefill(model: Path, pp: float, *args: str) -> dict[str, Any]:
    r = in_process("check", str(model), "--pp", str(pp), "--backend", "sycl", "--device", "arc-140v", "--json", *args)
    d = json.loads(r.stdout)
    assert r.exit_code == d["exit_status"], r.stderr
    (finding,) = [f for f in d["findings"] if f["code"].startswith("PREFILL")]
    return {"verdict": d["verdict"], **finding}


def test_the_prompt_is_judged_on_the_units_ggml_sycl_f16_chose(q4_8b: Path) -> None:
    # the 140V's profile: 4.0 TFLOPS FP32 on its vector units, 32 TFLOPS FP16 on its XMX units;
    # 60 tok/s of a 15.9 GFLOP/token model is 24% of the first and 3% of the second
    without = prefill(q4_8b, 60, "--sycl-f16", "no")
    assert without["verdict"] == "plausible" and "4.00 TFLOP/s" in " ".join(without["evidence"])
    with_f16 = prefill(q4_8b, 60, "--sycl-f16", "yes")
    assert (with_f16["verdict"], with_f16["code"]) == ("suspicious", "PREFILL_BELOW_BAND")
    assert "GGML_SYCL_F16: yes: the prompt band is on the XMX units" in with_f16["evidence"]
    # not known: the band reaches down to the vector units' FP32 rate, and says why
    unknown = prefill(q4_8b, 60)
    assert unknown["verdict"] == "plausible" and "GGML_SYCL_F16 not known" in unknown["expected"]
    assert "--sycl-f16" in unknown["expected"]


def test_sycl_f16_is_a_sycl_option(q4_8b: Path) -> None:
    r = in_process("check", str(q4_8b), "--pp", "60", "--backend", "vulkan", "--device", "arc-140v", "--sycl-f16", "no")
    assert r.exit_code == 2 and "--sycl-f16 is a SYCL build's setting" in r.stderr


def test_a_sycl_log_says_its_ggml_sycl_f16() -> None:
    """llama.cpp#6036: an Arc A770 on SYCL, `ggml_init_sycl: GGML_SYCL_F16: no`."""
    r = in_process("check", "--log", str(LOGS / "llamacpp-6036-sycl-a770-table.txt"), "--json")
    run = json.loads(r.stdout)["runs"][0]
    assert run["facts"]["sycl_f16"] is False and run["facts"]["backend"] == "sycl"


def test_the_sycl_rows_are_sourced_and_say_their_build() -> None:
    rows = [r for r in load_dataset(ROOT / "benchmarks/data/llama-cpp-results.jsonl", ProfileDB([builtin_dir()]))]
    sycl = [r for r in rows if r.backend == "sycl"]
    assert {r.profile.id for r in sycl} == {"arc-a770", "arc-b580", "arc-140v"}
    for r in sycl:
        assert r.source.startswith("https://") and r.raw.get("via"), r.label
        assert r.build.number is not None or r.build.date is not None, r.label
    # the two 140V builds, without and with GGML_SYCL_F16, as the post's table gives them
    f16 = {r.build.sycl_f16: r.tok_s for r in sycl if r.profile.id == "arc-140v" and r.kind == "pp"}
    assert f16 == {False: 180.77, True: 526.38}

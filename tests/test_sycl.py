"""SYCL: Intel GPUs through oneAPI, judged by the speed fits like every GPU backend, a prompt
on the units its build used (the XMX units with GGML_SYCL_F16, the vector units at the FP32
rate without it), a slow decode by its reorder optimizations (off by the run's variable, or a
build before them). The GPU is what this machine lacks: the verdicts are `ggprof check`'s on
reported figures and on real pasted SYCL logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ggprof_backends.sycl import REORDER_ABSENT, REORDER_OFF
from ggufs import Q4_8B_TIED, write_model
from support import in_process

from ggprof.logs.patterns import sycl_reorder
from ggprof.machine.profiles import ProfileDB, builtin_dir
from ggprof.pipelines.calibrate import References, load_dataset

ROOT = Path(__file__).resolve().parents[1]
LOGS = Path(__file__).parent / "data" / "logs"


@pytest.fixture(scope="module")
def q4_8b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("m") / "8b-q4.gguf", Q4_8B_TIED)[0]


@pytest.fixture(scope="module")
def q4_0_7b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return References(tmp_path_factory.mktemp("refs")).spec("llama2-7b-q4_0").path


def judged(model: Path, test: str, tok_s: float, device: str, *args: str) -> dict[str, Any]:
    """`check` of one reported SYCL speed (`--pp` or `--tg`): the verdict and its finding."""
    speed = (f"--{test}", str(tok_s))
    r = in_process("check", str(model), *speed, "--backend", "sycl", "--device", device, "--json", *args)
    d = json.loads(r.stdout)
    assert r.exit_code == d["exit_status"], r.stderr
    (finding,) = [f for f in d["findings"] if f["code"].startswith("PREFILL" if test == "pp" else "DECODE")]
    return {"verdict": d["verdict"], **finding}


def prefill(model: Path, pp: float, *args: str) -> dict[str, Any]:
    return judged(model, "pp", pp, "arc-140v", *args)


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
    assert {r.profile.id for r in sycl} == {"arc-a770", "arc-b580", "arc-140v", "arc-pro-b70"}
    for r in sycl:
        assert r.source.startswith("https://") and r.raw.get("via"), r.label
        assert r.build.number is not None or r.build.date is not None, r.label
    # the two 140V builds, without and with GGML_SYCL_F16, as the post's table gives them
    f16 = {r.build.sycl_f16: r.tok_s for r in sycl if r.profile.id == "arc-140v" and r.kind == "pp"}
    assert f16 == {False: 180.77, True: 526.38}


@pytest.mark.parametrize(
    ("line", "on"),
    [
        ("  GGML_SYCL_DISABLE_OPT: 1", False),  # the IPEX-LLM quickstart's log below
        ("  GGML_SYCL_DISABLE_OPT: 0", True),  # llama.cpp PR #12035's description, which added it
        ("  GGML_SYCL_ENABLE_OPT: 1", True),  # ggml-sycl.cpp today: `GGML_SYCL_ENABLE_OPT: %d`
        ("  GGML_SYCL_ENABLE_OPT: 0", False),
        ("  GGML_SYCL_DEBUG: 0", None),
        ("  GGML_SYCL_F16: no", None),
    ],
)
def test_a_sycl_logs_variables_say_whether_it_reordered(line: str, on: bool | None) -> None:
    assert sycl_reorder(line) is on


def test_a_pasted_sycl_log_with_its_reorder_off_and_intels_device_name() -> None:
    """IPEX-LLM's quickstart (tests/data/logs/SOURCES.md): an Arc A770 whose log prints
    `GGML_SYCL_DISABLE_OPT: 1` and `GGML_SYCL_F16: no`, its speeds redacted as `xx.xx`: the facts
    are read, the device named `Intel(R) Arc(TM) A770 Graphics` (parentheses inside the name)
    finds its profile, and no speed is made up."""
    r = in_process("check", "--log", str(LOGS / "ipex-llm-quickstart-sycl-a770-disable-opt.txt"), "--json")
    assert "Traceback" not in r.stderr
    run = json.loads(r.stdout)["runs"][0]
    facts = run["facts"]
    assert (facts["sycl_reorder"], facts["sycl_f16"], facts["backend"]) == (False, False, "sycl")
    assert facts["device_names"] == ["Intel(R) Arc(TM) A770 Graphics"]
    assert run["measurements"] == [] and run["verdict"] == "unknown"
    text = in_process("check", "--log", str(LOGS / "ipex-llm-quickstart-sycl-a770-disable-opt.txt")).stdout
    assert "profile arc-a770" in text and "SYCL reorder optimizations: no (line 101)" in text


def decode(model: Path, tg: float, *args: str) -> dict[str, Any]:
    return judged(model, "tg", tg, "arc-a770", *args)


def test_a_slow_decode_names_the_reorder_optimizations_it_ran_without(q4_0_7b: Path, q4_8b: Path) -> None:
    """The A770's Llama 2 7B Q4_0 decode on b3999 (42.1 tok/s) made 2.5x slower: a build before
    the reorder kernels names them; the variable off names it on any build; with them on (or a
    newer build, or k-quant weights on the old build, which they came to later) the generic
    GPU causes remain."""
    old = decode(q4_0_7b, 16.8, "--build", "3999")
    assert (old["verdict"], old["causes"]) == ("suspicious", [REORDER_ABSENT])
    assert "Arc A770 42 -> 55 tok/s" in REORDER_ABSENT and "b4696 and older" in REORDER_ABSENT
    off = decode(q4_0_7b, 16.8, "--build", "7000", "--sycl-reorder", "off")
    assert off["causes"] == [REORDER_OFF] and "SYCL reorder optimizations: off" in off["evidence"]
    on = decode(q4_0_7b, 16.8, "--build", "3999", "--sycl-reorder", "on")
    assert on["verdict"] == "suspicious" and REORDER_ABSENT not in on["causes"] and len(on["causes"]) >= 3
    assert "SYCL reorder optimizations: on" in on["evidence"]
    for model, args in ((q4_0_7b, ("--build", "7000")), (q4_8b, ("--build", "3999"))):
        other = decode(model, 6.0, *args)
        assert other["verdict"] == "suspicious" and not {REORDER_ABSENT, REORDER_OFF} & set(other["causes"])


def test_sycl_reorder_is_a_sycl_option(q4_0_7b: Path) -> None:
    r = in_process("check", str(q4_0_7b), "--tg", "20", "--backend", "vulkan", "--sycl-reorder", "off")
    assert r.exit_code == 2 and "--sycl-reorder is a SYCL build's setting" in r.stderr
    r = in_process("check", "--log", str(LOGS / "llamacpp-6036-sycl-a770-table.txt"), "--sycl-reorder", "on")
    assert r.exit_code == 2 and "no build options" in r.stderr

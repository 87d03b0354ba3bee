"""Arguments are checked in one place and the same way for every command: each case below was
once accepted by one command and refused by another, or ended in an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import RunCli

from ggprof.errors import BadInputError
from ggprof.pipelines.runs import int_list

PLAN = ("--prompt", "10", "--gen", "10", "--tpot-slo", "50", "--device", "h100-sxm")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["plan", "M", "--qps", "1", "--ctx", "1", *PLAN], "Error: --prompt + --gen = 20 does not fit in --ctx 1"),
        (["predict", "M", "--ctx", "1", "--prompt", "10", "--gen", "10"], "does not fit in --ctx 1"),
        (["check", "M", "--tg", "10", "--depth", "2147483647"], "is over the model's context length 32,768"),
        (["bench", "M", "-d", "40000"], "is over the model's context length 32,768"),
        (["bench", "M", "-t", "1,,2"], "Error: -t takes whole numbers separated by commas"),
        (["bench", "M", "-t", "-1"], "Error: -t values must be 1 or more, got '-1'"),
        (["bench", "M", "-t", "0"], "Error: -t values must be 1 or more, got '0'"),
        (["plan", "M", "--qps", "1e-300", *PLAN], "1e-300 is not a number above 1e-06"),
        (["report", "99999999999999999999"], "is not in the range 1<=x<=9223372036854775807"),
        (["plot", "99999999999999999999", "-o", "x.png"], "is not in the range 1<=x<=9223372036854775807"),
    ],
)
def test_one_line_exit_2(args: list[str], error: str, gemma_path: Path, run_cli: RunCli) -> None:
    r = run_cli(*[str(gemma_path) if a == "M" else a for a in args])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and error in r.stderr, r.stderr


def test_llama_bench_spellings_of_a_backend_are_known(gemma_path: Path, run_cli: RunCli) -> None:
    """`--backend CUDA` (as llama-bench prints it) is the cuda backend, not UNKNOWN_BACKEND."""
    for spelling in ("CUDA", "cuda", " Cuda "):
        r = run_cli("check", str(gemma_path), "--tg", "100", "--backend", spelling, "--device", "h100-sxm", "--json")
        assert r.exit_code == 3 and "UNKNOWN_BACKEND" not in r.stdout and '"DECODE_BELOW_BAND"' in r.stdout, spelling


@given(text=st.text(alphabet="0123456789,- x", max_size=24), low=st.integers(0, 2), high=st.integers(2, 600))
def test_int_list_returns_values_in_range_or_one_usage_error(text: str, low: int, high: int) -> None:
    try:
        values = int_list(text, "-t", low=low, high=high)
    except BadInputError as e:
        assert str(e).startswith("-t ")
        return
    assert values and all(low <= v <= high for v in values)
    assert ",".join(str(v) for v in values) == ",".join(p.strip().lstrip("0") or "0" for p in text.split(","))

"""Fuzzed llama-bench rows and hardware profiles, as the GGUF reader is fuzzed: a verdict or one
line of bad input, never an internal error or a control code."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import (
    astuple,
    clean_output,
    in_process,
    row,
)

# -- fuzz: llama-bench rows and hardware profiles, as the GGUF reader is fuzzed ----------------------------
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20),
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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=fuzzed_rows, as_jsonl=st.booleans())
def test_fuzz_llama_bench_rows(rows: list[dict[str, object]], as_jsonl: bool, tmp_path: Path, gemma_path: Path) -> None:
    path = tmp_path / "fuzz.json"
    text = "\n".join(json.dumps(r) for r in rows) if as_jsonl else json.dumps(rows)
    path.write_text(text)
    code, out, err = astuple(
        in_process("check", str(gemma_path), "--llama-bench", str(path), "--bandwidth", "90", "--json")
    )
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
        code, out, err = astuple(in_process("profiles"))
    finally:
        os.environ["GGPROF_CONFIG_DIR"] = before
    assert code in (0, 2), err
    assert clean_output(out + err)
    if code == 2:
        assert err.startswith("Error: ") and err.count("\n") == 1 and "fuzz.toml" in err

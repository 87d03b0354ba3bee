"""Text from outside (a GGUF name kept in the history, a llama-bench file) reaches the terminal
clean of control codes, in every format."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import RunCli, clean_output, database

hostile_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"], include_characters="\x1b\x07\x9b\r"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=hostile_text, backend=hostile_text)
def test_text_read_back_is_clean_in_every_format(
    name: str, backend: str, tmp_path_factory: pytest.TempPathFactory, run_cli: RunCli
) -> None:
    db = database(tmp_path_factory.mktemp("h") / "h.db", n=1)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET model_name = ?, backend = ?", (f"\x1b]0;{name}\x07", backend))
    for args in (["history"], ["history", "--format", "csv"], ["history", "--format", "jsonl"], ["report"]):
        r = run_cli(*args, "--db", str(db))
        assert r.exit_code == 0 and clean_output(r.stdout + r.stderr), args


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=hostile_text)
def test_compare_of_hostile_llama_bench_files_prints_no_control_code(
    text: str, tmp_path_factory: pytest.TempPathFactory, run_cli: RunCli
) -> None:
    """A llama-bench file's fields are text from outside: a depth that is a string of escape
    codes names no test and reaches no terminal."""
    folder = tmp_path_factory.mktemp("files")
    rows: list[dict[str, Any]] = [
        {"n_prompt": 0, "n_gen": 128, "n_depth": f"\x1b]0;{text}\x07", "avg_ts": 50.0, "stddev_ts": 1.0},
        {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 400.0, "stddev_ts": 4.0, "model_type": f"\x1b[31m{text}"},
    ]
    a, b = folder / "a.json", folder / "b.json"
    a.write_text(json.dumps(rows))
    b.write_text(json.dumps([{**r, "avg_ts": r["avg_ts"] * 0.9} for r in rows]))
    for fmt in ([], ["--json"]):
        r = run_cli("compare", str(a), str(b), *fmt)
        assert r.exit_code == 0 and clean_output(r.stdout + r.stderr), r.stderr

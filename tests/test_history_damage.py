"""A history database from outside: a damaged row is skipped and named (the rest listed, JSON
always whole), text read back is clean of control codes in every format, a long history is
never cut without a word, and a reader that closes the pipe ends ggprof quietly."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import clean_output

from ggprof.history.store import RunRecord, save


def record(name: str = "model", tg: float = 50.0) -> RunRecord:
    """A run as `ggprof bench` keeps one (its numbers made up: the store does not care)."""
    rows = [
        {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 400.0, "stddev_ts": 4.0},
        {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": tg, "stddev_ts": 0.5, "n_threads": 2},
    ]
    return RunRecord.from_json(
        {
            "kind": "bench",
            "created_at": "2026-11-30T12:00:00Z",
            "ggprof_version": "0.1.0",
            "command": ["ggprof", "bench", f"{name}.gguf"],
            "model": {"key": f"1:{name}", "name": name, "file": f"{name}.gguf"},
            "host": {"fingerprint": "abc", "cpu_model": "a CPU"},
            "result": {"rows": rows, "context": {"backends_used": ["cpu"], "n_threads": 2}},
        }
    )


def database(path: Path, n: int = 3) -> Path:
    for i in range(n):
        save(path, record(f"m{i}", tg=50.0 + i))
    return path


DAMAGES = [
    ("UPDATE runs SET payload = '{bad' WHERE id = 2", "2: its payload is not JSON"),
    ("UPDATE runs SET payload = '[1, 2]' WHERE id = 2", "2: its payload is not a JSON object"),
    ("UPDATE runs SET payload = 'null' WHERE id = 2", "2: its payload is not a JSON object"),
    ("UPDATE runs SET tg_tok_s = 'fast' WHERE id = 2", "2: tg_tok_s is not a finite number"),
    ("UPDATE runs SET tg_tok_s = 9e999 WHERE id = 2", "2: tg_tok_s is not a finite number"),
    ("UPDATE runs SET n_threads = 2.5 WHERE id = 2", "2: n_threads is not a whole number"),
    ("UPDATE runs SET verdict = 'great' WHERE id = 2", "2: verdict 'great' is not a verdict"),
    ("UPDATE runs SET model_name = x'00ff' WHERE id = 2", "2: model_name is not text"),
]


@pytest.mark.parametrize(("sql", "why"), DAMAGES)
def test_a_damaged_row_is_skipped_and_named(sql: str, why: str, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    db = database(tmp_path / "h.db")
    with sqlite3.connect(db) as conn:
        conn.execute(sql)
    r = run_cli("history", "--db", str(db), "--json")
    assert r.exit_code == 0, r.stderr
    assert [run["id"] for run in json.loads(r.stdout)] == [3, 1]  # whole JSON, the rest listed
    assert f"warning: run {why}: skipped" in r.stderr
    for command in (["report", "2"], ["plot", "2", "-o", str(tmp_path / "x.png")], ["compare", "1", "2"]):
        r = run_cli(*command, "--db", str(db))
        assert r.exit_code == 2 and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, (command, r.stderr)
        assert f"run {why}" in r.stderr
    assert run_cli("report", "1", "--db", str(db)).exit_code == 0


def test_an_extra_column_is_ignored(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    db = database(tmp_path / "h.db")
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE runs ADD COLUMN extra TEXT")
    for command in (["history", "--json"], ["report"], ["compare", "1", "2"]):
        assert run_cli(*command, "--db", str(db)).exit_code == 0, command


hostile_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",), include_characters="\x1b\x07\x9b\r"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=hostile_text, backend=hostile_text)
def test_text_read_back_is_clean_in_every_format(name: str, backend: str, tmp_path_factory, run_cli) -> None:  # type: ignore[no-untyped-def]
    db = database(tmp_path_factory.mktemp("h") / "h.db", n=1)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET model_name = ?, backend = ?", (f"\x1b]0;{name}\x07", backend))
    for args in (["history"], ["history", "--format", "csv"], ["history", "--format", "jsonl"], ["report"]):
        r = run_cli(*args, "--db", str(db))
        assert r.exit_code == 0 and clean_output(r.stdout + r.stderr), args


def test_a_long_history_is_never_cut_without_a_word(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    db = database(tmp_path / "h.db", n=5)
    r = run_cli("history", "--db", str(db), "--json", "--limit", "2")
    assert [run["id"] for run in json.loads(r.stdout)] == [5, 4]
    assert "warning: showing the newest 2 of 5 runs (--limit 0 shows all)" in r.stderr
    r = run_cli("history", "--db", str(db), "--format", "csv", "--limit", "0")
    assert len(r.stdout.splitlines()) == 1 + 5 and "showing" not in r.stderr
    r = run_cli("history", "--db", str(db), "--limit", "5")
    assert "showing" not in r.stderr


@pytest.mark.parametrize(
    "args",
    [["history", "--json"], ["history", "--format", "csv"], ["report"], ["profiles"], ["plugins"], ["inspect"]],
)
def test_a_closed_pipe_ends_quietly(args: list[str], tmp_path: Path, gemma_path: Path) -> None:
    """`ggprof history --json | head -1`: the reader is gone before ggprof writes (its end of the
    pipe closed first, so every command meets it); ggprof ends with 0 and no traceback."""
    db = database(tmp_path / "h.db", n=3)
    extra = {"history": ["--db", str(db)], "report": ["--db", str(db)], "inspect": [str(gemma_path)]}
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "ggprof", *args, *extra.get(args[0], [])],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (r.returncode, r.stderr.decode()) == (0, "")


users = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=users, fmt=st.sampled_from(["md", "json"]))
def test_a_report_carries_file_names_not_paths(user: str, fmt: str, tmp_path_factory, run_cli) -> None:  # type: ignore[no-untyped-def]
    """Whoever ran it (a short user name, one inside a folder's name) and whoever reports it:
    no home folder, no folder at all, in any format; the file names stay."""
    home = f"/home/{user}"
    model = f"{home}/{user}_stuff/{user}-gemma.gguf"
    rec = record("gemma")
    rec = RunRecord.from_json(
        {
            **rec.to_json(),
            "command": ["ggprof", "bench", model, "--db", f"{home}/h.db"],
            "result": {
                **rec.result,
                "rows": [{**r, "model_filename": model} for r in rec.rows],
                "device_description": f"this host, bandwidth measured (cached in {home}/.cache/ggprof)",
            },
        }
    )
    db = tmp_path_factory.mktemp("h") / "h.db"
    save(db, rec)
    r = run_cli("report", "--db", str(db), "--format", fmt)
    assert r.exit_code == 0, r.stderr
    assert home not in r.stdout and f"{user}_stuff" not in r.stdout and "/home" not in r.stdout
    assert f"{user}-gemma.gguf" in r.stdout


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=hostile_text)
def test_compare_of_hostile_llama_bench_files_prints_no_control_code(text: str, tmp_path_factory, run_cli) -> None:  # type: ignore[no-untyped-def]
    """A llama-bench file's fields are text from outside: a depth that is a string of escape
    codes names no test and reaches no terminal."""
    folder = tmp_path_factory.mktemp("files")
    rows = [
        {"n_prompt": 0, "n_gen": 128, "n_depth": f"\x1b]0;{text}\x07", "avg_ts": 50.0, "stddev_ts": 1.0},
        {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 400.0, "stddev_ts": 4.0, "model_type": f"\x1b[31m{text}"},
    ]
    a, b = folder / "a.json", folder / "b.json"
    a.write_text(json.dumps(rows))
    b.write_text(json.dumps([{**r, "avg_ts": r["avg_ts"] * 0.9} for r in rows]))
    for fmt in ([], ["--json"]):
        r = run_cli("compare", str(a), str(b), *fmt)
        assert r.exit_code == 0 and clean_output(r.stdout + r.stderr), r.stderr

"""A damaged history row (from a bug, a disk, or a hand) is skipped and named, the rest
listed and JSON always whole; report, plot and compare of it are one line, exit 2."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from support import RunCli, database

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
def test_a_damaged_row_is_skipped_and_named(sql: str, why: str, tmp_path: Path, run_cli: RunCli) -> None:
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


def test_an_extra_column_is_ignored(tmp_path: Path, run_cli: RunCli) -> None:
    db = database(tmp_path / "h.db")
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE runs ADD COLUMN extra TEXT")
    for command in (["history", "--json"], ["report"], ["compare", "1", "2"]):
        assert run_cli(*command, "--db", str(db)).exit_code == 0, command

"""A long history is never cut without a word: `history --limit` and a notice."""

from __future__ import annotations

import json
from pathlib import Path

from support import RunCli, database


def test_a_long_history_is_never_cut_without_a_word(tmp_path: Path, run_cli: RunCli) -> None:
    db = database(tmp_path / "h.db", n=5)
    r = run_cli("history", "--db", str(db), "--json", "--limit", "2")
    assert [run["id"] for run in json.loads(r.stdout)] == [5, 4]
    assert "warning: showing the newest 2 of 5 runs (--limit 0 shows all)" in r.stderr
    r = run_cli("history", "--db", str(db), "--format", "csv", "--limit", "0")
    assert len(r.stdout.splitlines()) == 1 + 5 and "showing" not in r.stderr
    r = run_cli("history", "--db", str(db), "--limit", "5")
    assert "showing" not in r.stderr

"""A run's settings in the history: one row per run fact, named and spelled as the run-fact
table names and spells it (`n_ubatch` = `512`, `flash_attn` = `auto`, `tensor_split` = `3,1`),
so a fact added to the table is kept, listed and filtered on with no new column and no
migration."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ggprof.errors import BadInputError
from ggprof.runfacts import BY_NAME, FACTS, from_json

if TYPE_CHECKING:
    from ggprof.history.store import RunRecord

# Version 3: the settings a run measured with, one row per run fact
MIGRATE_V2_TO_V3 = """
CREATE TABLE run_facts (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE INDEX run_facts_value ON run_facts (name, value);
"""
MAX_VALUE_CHARS = 400  # a spelled value kept (64 -ot pairs are cut here; the payload keeps them whole)


def settings_of(record: RunRecord) -> dict[str, str]:
    """The run facts a run's first llama-bench row states, spelled as llama.cpp writes them today,
    in the table's order."""
    rows = record.rows
    values: Mapping[str, Any] = from_json(rows[0]) if rows else {}
    return {
        n: BY_NAME[n].spell(v)[:MAX_VALUE_CHARS] for n, v in values.items() if v is not None and v != () and v != ""
    }


def store(conn: sqlite3.Connection, run_id: int, settings: Mapping[str, str]) -> None:
    conn.executemany(
        "INSERT OR REPLACE INTO run_facts (run_id, name, value) VALUES (?, ?, ?)",
        [(run_id, n, v) for n, v in settings.items()],
    )


def fill(conn: sqlite3.Connection, records: Sequence[tuple[int, RunRecord]]) -> None:
    """Every stored run's settings, from its payload (the migration to version 3)."""
    for run_id, record in records:
        store(conn, run_id, settings_of(record))


def read(conn: sqlite3.Connection, run_ids: Sequence[int]) -> dict[int, dict[str, str]]:
    """The settings of these runs, each in the table's order; a value that is not text is skipped."""
    order = {f.name: i for i, f in enumerate(FACTS)}
    found: dict[int, dict[str, str]] = {i: {} for i in run_ids}
    for start in range(0, len(run_ids), 500):  # SQLite's host parameters, a batch at a time
        batch = run_ids[start : start + 500]
        sql = f"SELECT run_id, name, value FROM run_facts WHERE run_id IN ({', '.join('?' * len(batch))})"
        for run_id, name, value in conn.execute(sql, batch):
            if run_id in found and name in order and isinstance(value, str):
                found[run_id][name] = value[:MAX_VALUE_CHARS]
    return {i: dict(sorted(s.items(), key=lambda kv: order[kv[0]])) for i, s in found.items()}


def wanted(text: str) -> tuple[str, str]:
    """`--fact NAME=VALUE` as (name, value spelled as stored): the name ggprof gives the fact or
    any llama.cpp flag of it (`n_ubatch=256`, `-ub=256`, `--flash-attn=on`), the value as its flag
    takes it (`-fa 1` and `-fa on` are the same)."""
    name, eq, raw = text.partition("=")
    name = name.strip()
    fact = BY_NAME.get(name) or next((f for f in FACTS if name in (*f.flags, *f.old_flags, *f.bench_flags)), None)
    if not eq or fact is None:
        raise BadInputError(
            f"--fact {text[:80]!r}: give NAME=VALUE with a run fact's name or llama.cpp flag (n_ubatch=256, -fa=on)"
        )
    value = fact.read(raw)
    if value is None:
        raise BadInputError(f"--fact {text[:80]!r}: {raw[:40]!r} is not a value of {fact.what} ({fact.flag})")
    return fact.name, fact.spell(value)

"""Run history: every `profile` and `bench` run kept in a local SQLite database.

One row per run: indexed columns to list and filter by (when, model, host, backend,
llama.cpp version, threads, the headline figures, the verdict) beside the whole result as
JSON. WAL mode and one transaction per run: an interrupted or killed run leaves the
database as it was, and two ggprof processes can write at once (the second waits).

The schema is versioned (`PRAGMA user_version`) and migrated forward in place; a database
from a newer ggprof, or a file that is not a database, is refused untouched.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs

from ggprof.errors import BadInputError
from ggprof.history import settings as run_settings
from ggprof.units import clean_name

if TYPE_CHECKING:
    from ggprof.machine.facts import HostFacts
    from ggprof.model.spec import ModelSpec

SCHEMA_VERSION = 3
BUSY_TIMEOUT_MS = 30_000

# Version 1: the first schema (what ggprof 0.1 wrote): the run and its JSON.
SCHEMA_V1 = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    kind TEXT NOT NULL,
    model_key TEXT NOT NULL,
    model_name TEXT,
    host_fingerprint TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX runs_model ON runs (model_key);
CREATE INDEX runs_host ON runs (host_fingerprint);
"""
# Version 2: what a run was compared and listed by, as columns (filled from the JSON on migration).
MIGRATE_V1_TO_V2 = """
ALTER TABLE runs ADD COLUMN backend TEXT;
ALTER TABLE runs ADD COLUMN llama_cpp_version TEXT;
ALTER TABLE runs ADD COLUMN n_threads INTEGER;
ALTER TABLE runs ADD COLUMN pp_tok_s REAL;
ALTER TABLE runs ADD COLUMN pp_stddev_tok_s REAL;
ALTER TABLE runs ADD COLUMN tg_tok_s REAL;
ALTER TABLE runs ADD COLUMN tg_stddev_tok_s REAL;
ALTER TABLE runs ADD COLUMN efficiency REAL;
ALTER TABLE runs ADD COLUMN verdict TEXT;
CREATE INDEX runs_created ON runs (created_at);
"""
COLUMNS = (
    "backend",
    "llama_cpp_version",
    "n_threads",
    "pp_tok_s",
    "pp_stddev_tok_s",
    "tg_tok_s",
    "tg_stddev_tok_s",
    "efficiency",
    "verdict",
)


class HistoryError(BadInputError):
    """The history database cannot be used (newer schema, not a database)."""


def default_path() -> Path:
    """<user data dir>/history.db; GGPROF_DB overrides."""
    return Path(os.environ.get("GGPROF_DB") or Path(platformdirs.user_data_dir("ggprof")) / "history.db")


def rows_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The llama-bench rows of a result: `profile` keeps them under "bench", `bench` under "rows"."""
    rows = result.get("bench") or result.get("rows") or []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def model_key(spec: ModelSpec) -> str:
    """The file size and a hash of the header: a renamed copy is the same model. A model
    without a file here (its header described by a server: Ollama's /api/show) is keyed by
    its size and a hash of its tensor table."""
    from ggprof.files import is_regular
    from ggprof.model.gguf import read_header

    path = spec.path
    if not is_regular(path):
        table = "\n".join(f"{t.name} {t.ggml_type.name} {t.shape}" for t in spec.tensors)
        return f"{spec.file_size_bytes}:t{hashlib.sha256(table.encode()).hexdigest()[:15]}"
    header = read_header(path)
    with path.open("rb") as f:
        digest = hashlib.sha256(f.read(header.data_offset)).hexdigest()[:16]
    return f"{spec.file_size_bytes}:{digest}"


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """What a run keeps, built here and read here: the command, the model, the host and the
    whole result (stored as JSON, the payload of a history row)."""

    kind: str  # "bench" or "profile"
    created_at: str
    ggprof_version: str | None
    command: tuple[str, ...]
    model: dict[str, Any]
    host: dict[str, Any]
    result: dict[str, Any]

    @classmethod
    def new(
        cls,
        kind: str,
        spec: ModelSpec,
        facts: HostFacts,
        devices: list[str],
        result: dict[str, Any],
        command: list[str],
        version: str,
    ) -> RunRecord:
        from ggprof.machine.cache import fingerprint

        return cls(
            kind=kind,
            created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            ggprof_version=version,
            command=("ggprof", *command),
            model={
                "key": model_key(spec),
                "name": spec.name or spec.path.stem,
                "file": spec.path.name,
                "architecture": spec.architecture,
                "quant_label": spec.quant_label,
                "n_params": spec.n_params,
                "file_size_bytes": spec.file_size_bytes,
                "decode_bytes_per_token": spec.decode_bytes_per_token,
                "kv_bytes_per_token": spec.kv_bytes_per_token(),
            },
            host={
                "fingerprint": fingerprint(facts),
                "cpu_model": facts.cpu_model,
                "physical_cores": facts.physical_cores,
                "logical_cores": facts.logical_cores,
                "usable_cores": facts.usable_cores,
                "ram_total_bytes": facts.ram_total_bytes,
                "os": facts.os,
                "devices": devices,
            },
            result=result,
        )

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> RunRecord:
        """A stored payload (any schema version) as a record; parts of the wrong shape are empty."""

        def part(key: str) -> dict[str, Any]:
            value = payload.get(key)
            return value if isinstance(value, dict) else {}

        command = payload.get("command")
        return cls(
            kind=str(payload.get("kind") or ""),
            created_at=str(payload.get("created_at") or ""),
            ggprof_version=payload.get("ggprof_version") if isinstance(payload.get("ggprof_version"), str) else None,
            command=tuple(str(c) for c in command) if isinstance(command, list) else (),
            model=part("model"),
            host=part("host"),
            result=part("result"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "created_at": self.created_at,
            "ggprof_version": self.ggprof_version,
            "command": list(self.command),
            "model": self.model,
            "host": self.host,
            "result": self.result,
        }

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The llama-bench rows the run measured."""
        return rows_of(self.result)


@dataclass(frozen=True, kw_only=True)
class Run:
    id: int
    created_at: str
    kind: str
    model_key: str
    model_name: str | None
    host_fingerprint: str
    backend: str | None
    llama_cpp_version: str | None
    n_threads: int | None
    pp_tok_s: float | None
    pp_stddev_tok_s: float | None
    tg_tok_s: float | None
    tg_stddev_tok_s: float | None
    efficiency: float | None
    verdict: str | None
    payload: dict[str, Any]
    settings: dict[str, str] = field(default_factory=dict)  # its run facts, spelled (history.settings)

    @property
    def record(self) -> RunRecord:
        return RunRecord.from_json(self.payload)


@contextmanager
def connect(path: Path, create: bool = True) -> Iterator[sqlite3.Connection]:
    """An open, migrated database. HistoryError (one line) for anything that is not ours."""
    if not create and not path.exists():
        raise HistoryError(f"{clean_name(path)}: no history database (run `ggprof profile` or `ggprof bench` first)")
    if path.exists() and not path.is_file():
        raise HistoryError(f"{clean_name(path)}: not a regular file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except (OSError, sqlite3.Error) as e:  # a missing folder behind a link, no permission, a full disk
        raise HistoryError(f"{clean_name(path)}: cannot be opened ({getattr(e, 'strerror', None) or e})") from None
    try:
        _prepare(conn, path)
        yield conn
    except sqlite3.Error as e:
        raise HistoryError(f"{clean_name(path)}: {e}") from None
    finally:
        conn.close()


def _prepare(conn: sqlite3.Connection, path: Path) -> None:
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as e:
        raise HistoryError(f"{clean_name(path)}: not a ggprof history database ({e})") from None
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"{clean_name(path)}: written by a newer ggprof (schema {version}; this one reads up to "
            f"{SCHEMA_VERSION}): upgrade ggprof, or pass --db with another file"
        )
    if version == 0 and tables:
        raise HistoryError(
            f"{clean_name(path)}: an SQLite database, but not a ggprof history (tables: {sorted(tables)})"
        )
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    if version < SCHEMA_VERSION:
        migrate(conn, version)


def migrate(conn: sqlite3.Connection, version: int) -> None:
    """Bring the schema from `version` to SCHEMA_VERSION in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        now = conn.execute("PRAGMA user_version").fetchone()[0]  # another process may have migrated meanwhile
        if now < 1:
            for statement in _statements(SCHEMA_V1):
                conn.execute(statement)
        if now < 2:
            for statement in _statements(MIGRATE_V1_TO_V2):
                conn.execute(statement)
            for row_id, payload in conn.execute("SELECT id, payload FROM runs").fetchall():
                columns = summary_columns(RunRecord.from_json(json.loads(payload)))
                conn.execute(
                    f"UPDATE runs SET {', '.join(f'{c} = ?' for c in COLUMNS)} WHERE id = ?",
                    (*(columns[c] for c in COLUMNS), row_id),
                )
        if now < 3:
            for statement in _statements(run_settings.MIGRATE_V2_TO_V3):
                conn.execute(statement)
            run_settings.fill(
                conn,
                [(i, RunRecord.from_json(p)) for i, p in _payloads(conn)],
            )
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def _payloads(conn: sqlite3.Connection) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each stored run's payload that reads as a JSON object (a damaged one is left to listings to name)."""
    for row_id, payload in conn.execute("SELECT id, payload FROM runs").fetchall():
        try:
            data = json.loads(payload)
        except (TypeError, ValueError, RecursionError):
            continue
        if isinstance(data, dict):
            yield row_id, data


def summary_columns(record: RunRecord) -> dict[str, Any]:
    """The indexed columns of a run record."""
    result, rows = record.result, record.rows
    pp = next((r for r in rows if r.get("n_prompt") and not r.get("n_gen")), None)
    tg = next((r for r in rows if r.get("n_gen") and not r.get("n_prompt")), None)
    context = result.get("context") or {}
    backends = context.get("backends_used") or []
    return {
        "backend": backends[0] if backends else None,
        "llama_cpp_version": context.get("llama_cpp_python_version"),
        "n_threads": context.get("n_threads") or (rows[0].get("n_threads") if rows else None),
        "pp_tok_s": pp.get("avg_ts") if pp else None,
        "pp_stddev_tok_s": pp.get("stddev_ts") if pp else None,
        "tg_tok_s": tg.get("avg_ts") if tg else None,
        "tg_stddev_tok_s": tg.get("stddev_ts") if tg else None,
        "efficiency": result.get("efficiency"),
        "verdict": result.get("verdict"),
    }


def save(path: Path, record: RunRecord) -> int:
    """Store one run in one transaction; its id."""
    columns = summary_columns(record)
    with connect(path) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute(
                f"INSERT INTO runs (created_at, kind, model_key, model_name, host_fingerprint, payload, "
                f"{', '.join(COLUMNS)}) VALUES ({', '.join('?' * (6 + len(COLUMNS)))})",
                (
                    record.created_at,
                    record.kind,
                    record.model["key"],
                    record.model.get("name"),
                    record.host["fingerprint"],
                    json.dumps(record.to_json(), allow_nan=False),
                    *(columns[c] for c in COLUMNS),
                ),
            )
            run_id = int(cur.lastrowid or 0)
            run_settings.store(conn, run_id, run_settings.settings_of(record))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return run_id


@dataclass(frozen=True)
class Listing:
    """The runs a query found (newest first), how many matched in all, and the rows skipped
    as damaged (`id: why`)."""

    runs: list[Run]
    total: int
    skipped: list[str]


def runs(
    path: Path,
    model: str | None = None,
    host: str | None = None,
    since: str | None = None,
    limit: int | None = 1000,
    facts: tuple[tuple[str, str], ...] = (),
) -> Listing:
    """Runs, newest first, filtered by model (key or name substring), host fingerprint prefix,
    date and run facts (name, spelled value: history.settings.wanted); at most `limit` (None:
    all). A damaged row is skipped and named, never fatal."""
    where, args = [], []
    for name, value in facts:
        where.append("id IN (SELECT run_id FROM run_facts WHERE name = ? AND value = ?)")
        args += [name, value]
    if model:
        where.append("(model_key = ? OR model_name LIKE ?)")
        args += [model, f"%{model}%"]
    if host:
        where.append("host_fingerprint LIKE ?")
        args.append(f"{host}%")
    if since:
        where.append("created_at >= ?")
        args.append(since)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    sql = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs{clause} ORDER BY id DESC" + (" LIMIT ?" if limit else "")
    found, skipped = [], []
    with connect(path, create=False) as conn:
        conn.row_factory = sqlite3.Row
        total = int(conn.execute(f"SELECT COUNT(*) FROM runs{clause}", args).fetchone()[0])
        for row in conn.execute(sql, (*args, limit) if limit else args):
            try:
                found.append(_run(row))
            except DamagedRun as e:
                skipped.append(str(e))
        kept = run_settings.read(conn, [r.id for r in found])
    return Listing([replace(r, settings=kept[r.id]) for r in found], total, skipped)


def get(path: Path, run_id: int | None = None) -> Run:
    """One run by id (the latest without one); HistoryError naming what is missing."""
    with connect(path, create=False) as conn:
        conn.row_factory = sqlite3.Row
        if run_id is None:
            row = conn.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        else:
            row = conn.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id = ?", (run_id,)).fetchone()
        kept = run_settings.read(conn, [row["id"]]) if row is not None and isinstance(row["id"], int) else {}
    if row is None:
        raise HistoryError(f"{clean_name(path)}: no run {run_id}" if run_id is not None else f"{path}: no runs yet")
    try:
        found = _run(row)
    except DamagedRun as e:
        raise HistoryError(f"{clean_name(path)}: run {e}") from None
    return replace(found, settings=kept.get(found.id, {}))


class DamagedRun(ValueError):
    """A row that does not hold what ggprof writes (`id: why`)."""


TEXT_COLUMNS = ("created_at", "kind", "model_key", "model_name", "host_fingerprint", "backend", "llama_cpp_version")
NUMBER_COLUMNS = ("n_threads", "pp_tok_s", "pp_stddev_tok_s", "tg_tok_s", "tg_stddev_tok_s", "efficiency")
RUN_COLUMNS = ("id", *TEXT_COLUMNS, *NUMBER_COLUMNS, "verdict", "payload")
MAX_TEXT_CHARS = 2000  # a text from the database, cleaned and cut before anything prints it


def _clean_json(value: Any) -> Any:
    """A payload read back: every string cleaned of control characters (it came from outside:
    a GGUF's name, a command line, a file path), the structure kept."""
    if isinstance(value, str):
        return clean_name(value, MAX_TEXT_CHARS)
    if isinstance(value, list):
        return [_clean_json(v) for v in value]
    if isinstance(value, dict):
        return {clean_name(str(k), 200): _clean_json(v) for k, v in value.items()}
    return value


def _run(row: sqlite3.Row) -> Run:
    """A row as a Run: numbers finite, texts cleaned, the payload a JSON object; DamagedRun otherwise."""
    data = dict(row)
    run_id = data["id"]

    def damaged(why: str) -> DamagedRun:
        return DamagedRun(f"{run_id}: {why}" if isinstance(run_id, int) else f"?: {why}")

    if not isinstance(run_id, int) or isinstance(run_id, bool):
        raise damaged("its id is not a number")
    try:
        payload = json.loads(data.pop("payload"))
    except (TypeError, ValueError, RecursionError):
        raise damaged("its payload is not JSON") from None
    if not isinstance(payload, dict):
        raise damaged("its payload is not a JSON object")
    for c in NUMBER_COLUMNS:
        v = data[c]
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise damaged(f"{c} is not a finite number")
    if data["n_threads"] is not None and not isinstance(data["n_threads"], int):
        raise damaged("n_threads is not a whole number")
    for c in (*TEXT_COLUMNS, "verdict"):
        v = data[c]
        if v is not None and not isinstance(v, str):
            raise damaged(f"{c} is not text")
        data[c] = clean_name(v, MAX_TEXT_CHARS) if v is not None else None
    if data["verdict"] is not None and data["verdict"] not in ("impossible", "suspicious", "plausible", "unknown"):
        raise damaged(f"verdict {data['verdict'][:40]!r} is not a verdict")
    for c in ("created_at", "kind", "model_key", "host_fingerprint"):
        if data[c] is None:
            raise damaged(f"{c} is missing")
    return Run(**data, payload=_clean_json(payload))

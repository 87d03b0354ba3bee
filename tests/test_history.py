"""Run history (SQLite), compare, the roofline picture and the triage report, on real runs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from support import RunCli, llama_child, started

from ggprof.history.store import SCHEMA_V1, SCHEMA_VERSION

DATA = Path(__file__).parent / "data"
QUICK = ("-p", "16", "-n", "8", "-r", "3")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ggprof.model.synth import SHAPES, write_model

    return write_model(SHAPES["tiny"], "q4_0", tmp_path_factory.mktemp("models") / "tiny.gguf")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def history_json(run_cli: RunCli, db: Path, *args: str) -> list[dict[str, Any]]:
    r = run_cli("history", "--db", str(db), "--json", *args)
    assert r.exit_code == 0, r.stderr
    runs: list[dict[str, Any]] = json.loads(r.stdout)
    return runs


@pytest.mark.slow
def test_runs_are_kept_listed_and_filtered(tiny: Path, tmp_path: Path, run_cli: RunCli) -> None:
    db = tmp_path / "h.db"
    assert run_cli("bench", str(tiny), *QUICK, "--db", str(db)).exit_code == 0
    assert run_cli("bench", str(tiny), *QUICK, "--db", str(db), "--no-save").exit_code == 0
    r = run_cli("profile", str(tiny), *QUICK, "--db", str(db), "--json")
    assert r.stderr.endswith(f"saved as run 2 in {db}\n")
    runs = history_json(run_cli, db)
    assert [(x["id"], x["kind"]) for x in runs] == [(2, "profile"), (1, "bench")]
    profile = runs[0]
    assert profile["verdict"] == json.loads(r.stdout)["verdict"] and profile["tg_tok_s"] > 0
    assert profile["efficiency"] == pytest.approx(json.loads(r.stdout)["efficiency"])
    assert runs[1]["model_key"] == profile["model_key"] and runs[1]["verdict"] is None
    # a renamed copy is the same model; another model is not
    copy = tmp_path / "renamed.gguf"
    shutil.copy(tiny, copy)
    assert run_cli("bench", str(copy), *QUICK, "--db", str(db)).exit_code == 0
    assert len(history_json(run_cli, db, "--model", profile["model_key"])) == 3
    assert history_json(run_cli, db, "--since", "2999-01-01") == []
    assert len(history_json(run_cli, db, "--host", profile["host_fingerprint"][:6])) == 3
    csv_lines = run_cli("history", "--db", str(db), "--format", "csv").stdout.splitlines()
    assert csv_lines[0].startswith("id,created_at,kind,model_name,model_key") and len(csv_lines) == 4
    jsonl = run_cli("history", "--db", str(db), "--format", "jsonl").stdout.splitlines()
    assert [json.loads(line)["id"] for line in jsonl] == [3, 2, 1]
    text = run_cli("history", "--db", str(db)).stdout
    assert text.splitlines()[2].endswith(f"  {profile['verdict']}") and text.splitlines()[1].endswith("  bench")


@pytest.mark.slow
def test_kill_9_mid_profile_loses_no_earlier_run(tiny: Path, gemma_path: Path, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    first = started("bench", str(tiny), *QUICK, "--db", str(db))
    first.communicate(timeout=120)
    proc = started("profile", str(gemma_path), "-p", "0", "-n", "20000", "-r", "1", "--db", str(db))
    try:
        child = llama_child(proc)  # llama.cpp is running
    finally:  # killed and its pipes closed even when the child was not found
        proc.kill()
        proc.communicate(timeout=30)
    child.wait(timeout=10)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [r[0] for r in conn.execute("SELECT kind FROM runs")] == ["bench"]
    finally:
        conn.close()


@pytest.mark.slow
def test_two_processes_writing_at_once_both_succeed(tiny: Path, tmp_path: Path) -> None:
    """Both runs finish while a third connection holds the write lock; both wait, both are kept."""
    db = tmp_path / "h.db"
    from ggprof.history.store import connect

    with connect(db):
        pass  # created and migrated
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    procs = [started("bench", str(tiny), "-p", "8", "-n", "4", "-r", "1", "--db", str(db)) for _ in range(2)]
    # each runs its llama.cpp child, then waits for the lock (still running, no child): released
    # once both wait, or 10 s after the first began to (well within the store's 30 s busy timeout)
    had_child: set[int] = set()
    waiting: dict[int, float] = {}
    deadline = time.monotonic() + 180
    while len(waiting) < 2 and time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, "a run ended while the lock was held"
            if psutil.Process(p.pid).children(recursive=True):
                had_child.add(p.pid)
            elif p.pid in had_child:
                waiting.setdefault(p.pid, time.monotonic())
        if waiting and time.monotonic() - min(waiting.values()) > 10:
            break
        time.sleep(0.05)
    assert waiting, "no run measured and waited for the lock"
    lock.execute("COMMIT")
    lock.close()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(int(err.split("saved as run ")[1].split()[0]) for _, err in outs) == [1, 2]


def write_v1(db: Path, payload: dict[str, Any]) -> None:
    conn = sqlite3.connect(db)
    conn.executescript(SCHEMA_V1)
    conn.execute(
        "INSERT INTO runs (created_at, kind, model_key, model_name, host_fingerprint, payload) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        ("2026-11-01T10:00:00Z", "bench", "123:abc", "old model", "f00d", json.dumps(payload)),
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()


def test_migration_from_the_first_schema(tmp_path: Path, run_cli: RunCli) -> None:
    db = tmp_path / "v1.db"
    rows = json.loads((DATA / "llama-bench-gemma3-270m.json").read_text())
    write_v1(db, {"kind": "bench", "result": {"rows": rows, "context": {"backends_used": ["cpu"], "n_threads": 2}}})
    (run,) = history_json(run_cli, db)
    assert (run["model_name"], run["backend"], run["n_threads"]) == ("old model", "cpu", 2)
    assert run["pp_tok_s"] == pytest.approx(rows[0]["avg_ts"]) and run["tg_tok_s"] == pytest.approx(rows[1]["avg_ts"])
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    conn.close()
    assert "backend" in columns  # the v2 column the migration adds
    # v3: the run's settings, read from its llama-bench row (n_ubatch 512, flash_attn -1, 2 threads)
    assert {k: run["settings"][k] for k in ("n_threads", "n_ubatch", "n_batch", "flash_attn", "type_k")} == {
        "n_threads": "2",
        "n_ubatch": "512",
        "n_batch": "2048",
        "flash_attn": "auto",
        "type_k": "f16",
    }


def write_v1_runs(db: Path, files: list[str]) -> None:
    """One old (schema 1) run per llama-bench JSON file."""
    write_v1(db, {"kind": "bench"})
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM runs")
    for name in files:
        rows = json.loads((DATA / name).read_text())
        conn.execute(
            "INSERT INTO runs (created_at, kind, model_key, model_name, host_fingerprint, payload) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                "2026-11-01T10:00:00Z",
                "bench",
                "1:a",
                name,
                "f00d",
                json.dumps({"kind": "bench", "result": {"rows": rows}}),
            ),
        )
    conn.commit()
    conn.close()


def test_runs_are_filtered_by_their_settings_in_any_spelling(tmp_path: Path, run_cli: RunCli) -> None:
    """A run's settings are kept as the run-fact table spells them; `--fact` takes a fact's name or
    any of llama.cpp's flags for it, and a value as the flag takes it (`-fa -1` is `auto`)."""
    db = tmp_path / "v1.db"
    ub16 = "llama-bench-gemma3-270m-cpu-ubatch.json"  # its first row: -ub 16
    write_v1_runs(db, ["llama-bench-gemma3-270m.json", ub16])
    assert [r["model_name"] for r in history_json(run_cli, db, "--fact", "-ub=16")] == [ub16]
    assert [r["model_name"] for r in history_json(run_cli, db, "--fact", "--ubatch-size=16")] == [ub16]
    assert [r["model_name"] for r in history_json(run_cli, db, "--fact", "n_ubatch=512")] == [
        "llama-bench-gemma3-270m.json"
    ]
    both = history_json(run_cli, db, "--fact", "-fa=-1", "--fact", "-t=2")
    assert sorted(r["model_name"] for r in both) == sorted(["llama-bench-gemma3-270m.json", ub16])
    assert history_json(run_cli, db, "--fact", "-ub=16", "--fact", "-ngl=5") == []
    r = run_cli("history", "--db", str(db), "--format", "csv", "--fact", "-ub=16")
    assert r.exit_code == 0 and " -ub 16 " in r.stdout.splitlines()[1]  # the settings column, as flags


@pytest.mark.parametrize(
    ("given", "said"),
    [("-ub", "give NAME=VALUE"), ("--nope=3", "give NAME=VALUE"), ("-ub=lots", "is not a value of physical batch")],
)
def test_a_bad_fact_filter_is_one_line(given: str, said: str, tmp_path: Path, run_cli: RunCli) -> None:
    db = tmp_path / "v1.db"
    write_v1_runs(db, ["llama-bench-gemma3-270m.json"])
    r = run_cli("history", "--db", str(db), "--fact", given)
    assert r.exit_code == 2 and said in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


@pytest.mark.parametrize("command", [["history"], ["report"], ["compare", "1", "2"]])
def test_a_newer_or_corrupt_database_is_refused_untouched(command: list[str], tmp_path: Path, run_cli: RunCli) -> None:
    newer = tmp_path / "newer.db"
    write_v1(newer, {"kind": "bench"})
    conn = sqlite3.connect(newer)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"SQLite format 3\x00" + os.urandom(4000))
    for db, error in ((newer, "written by a newer ggprof (schema 99"), (corrupt, "not a ggprof history database")):
        before = digest(db)
        r = run_cli(*command, "--db", str(db))
        assert r.exit_code == 2 and error in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert digest(db) == before and not Path(f"{db}-wal").exists()


def test_compare_two_llama_bench_files(tmp_path: Path, run_cli: RunCli) -> None:
    a = DATA / "llama-bench-gemma3-270m.json"
    rows = json.loads(a.read_text())
    rows[1]["samples_ts"] = [x * 1.5 for x in rows[1]["samples_ts"]]  # decode 1.5x faster
    rows[1]["avg_ts"] *= 1.5
    rows[1]["stddev_ts"] *= 1.5
    b = tmp_path / "b.jsonl"
    b.write_text("\n".join(json.dumps(r) for r in rows))
    r = run_cli("compare", str(a), str(b), "--json")
    d = json.loads(r.stdout)
    tests = {t["test"]: t for t in d["tests"]}
    assert r.exit_code == 0 and list(tests) == ["pp64", "tg16"]
    assert tests["tg16"]["speedup"] == pytest.approx(1.5) and tests["tg16"]["verdict"] == "faster"
    assert tests["pp64"]["speedup"] == pytest.approx(1.0) and tests["pp64"]["verdict"] == "within noise"
    assert d["other_differences"] == []
    text = run_cli("compare", str(a), str(b)).stdout
    assert "| tg16 |" in text and "| 1.500 | faster |" in text


def test_compare_refuses_two_models(tmp_path: Path, run_cli: RunCli) -> None:
    a = DATA / "llama-bench-gemma3-270m.json"
    rows = json.loads(a.read_text())
    for row in rows:
        row["model_size"] *= 2
    b = tmp_path / "other.json"
    b.write_text(json.dumps(rows))
    r = run_cli("compare", str(a), str(b))
    assert r.exit_code == 2 and "ran different models" in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.slow
def test_compare_two_saved_runs_names_what_else_differs(tiny: Path, tmp_path: Path, run_cli: RunCli) -> None:
    db = tmp_path / "h.db"
    for threads in ("1", "2"):
        assert run_cli("bench", str(tiny), *QUICK, "-t", threads, "--db", str(db)).exit_code == 0
    r = run_cli("compare", "1", "2", "--db", str(db))
    assert r.exit_code == 0 and r.stdout.startswith("A = run 1, B = run 2")
    assert "| pp16 |" in r.stdout and "| tg8 |" in r.stdout
    assert "also different (not only the thing compared): threads: 1 vs 2" in r.stdout


@pytest.mark.slow
def test_report_and_plot_of_a_real_profile(tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    from ggprof.model.synth import SHAPES, write_model

    home = tmp_path / "home"
    model = write_model(SHAPES["tiny"], "q4_0", home / "models" / "tiny.gguf")
    monkeypatch.setenv("HOME", str(home))
    db = tmp_path / "h.db"
    svg = tmp_path / "profile.svg"
    # figures given, so the roofline has its compute roof on any host (a CPU's peak is derived from
    # its SIMD flags, which not every host reports)
    figures = ("--bandwidth", "50", "--flops", "2")
    r = run_cli("profile", str(model), *QUICK, *figures, "--db", str(db), "--plot", str(svg), "--json")
    verdict = json.loads(r.stdout)["verdict"]
    assert r.exit_code == json.loads(r.stdout)["exit_status"]
    md = run_cli("report", "--db", str(db)).stdout
    assert md.startswith("### ggprof profile: ") and f"**Verdict: {verdict}.**" in md
    for part in ("- **host:**", "- **bandwidth:**", "- **llama.cpp:** llama-cpp-python", "- **flags:** -t", "| tg8 |"):
        assert part in md
    assert re.search(r"^\| tg8 \| [^|]+ \| [^|]+ \| 3 \|$", md, re.M)  # -r 3: its repetitions, no stop reason
    assert "stopped after" not in md
    assert "tiny.gguf" in md and str(home) not in md and "models/tiny.gguf" not in md  # a file name, no path
    d = json.loads(run_cli("report", "1", "--db", str(db), "--format", "json").stdout)
    assert d["verdict"] == verdict and d["model"]["file"] == "tiny.gguf" and "fingerprint" not in d["host"]
    drawn = svg.read_text()
    for label in ("bandwidth slope", "compute roof", "ridge point",
                  "decode, predicted (batch 1)", "decode, measured", "prefill, measured",
                  "decode ceiling vs depth (predicted)"):  # fmt: skip
        assert label in drawn, label
    png = tmp_path / "again.png"
    assert run_cli("plot", "--db", str(db), "-o", str(png)).exit_code == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    # without -r the run repeats until its answer is known: the report says why each test stopped
    kept_rows = json.loads(
        run_cli("profile", str(model), "-p", "16", "-n", "8", *figures, "--db", str(db), "--json").stdout
    )
    md = run_cli("report", "--db", str(db)).stdout
    reasons = [line for line in md.splitlines() if re.match(r"- (pp16|tg8): ", line)]
    assert reasons == [
        f"- {name}: {row['stop_reason']}" for name, row in zip(("pp16", "tg8"), kept_rows["bench"], strict=True)
    ]
    assert all(row["stop_reason"] for row in kept_rows["bench"])


def test_predict_draws_its_roofline(gemma_path: Path, tmp_path: Path, run_cli: RunCli) -> None:
    svg = tmp_path / "predict.svg"
    r = run_cli("predict", str(gemma_path), "--device", "rtx-4090", "--plot", str(svg))
    drawn = svg.read_text()
    assert r.exit_code == 0 and "compute roof (330 TFLOP/s)" in drawn and "ridge point" in drawn
    assert "decode, predicted (batch 1)" in drawn and "decode, measured" not in drawn


def test_plot_of_a_bench_run_or_without_matplotlib(
    gemma_path: Path, tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "v1.db"
    write_v1(db, {"kind": "bench", "result": {"rows": []}})
    r = run_cli("plot", "--db", str(db), "-o", str(tmp_path / "x.svg"))
    assert r.exit_code == 2 and "a roofline needs a profile" in r.stderr
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an install without the [plot] extra
    r = run_cli("predict", str(gemma_path), "--bandwidth", "90", "--plot", str(tmp_path / "y.svg"))
    assert r.exit_code == 2
    assert r.stderr == "Error: --plot needs matplotlib, the optional extra [plot]: pip install 'ggprof[plot]'\n"

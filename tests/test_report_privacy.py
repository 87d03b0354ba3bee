"""A report meant for a public bug tracker carries file names, never paths under a home."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import RunCli, history_record

from ggprof.history.store import RunRecord, save

users = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=users, fmt=st.sampled_from(["md", "json"]))
def test_a_report_carries_file_names_not_paths(
    user: str, fmt: str, tmp_path_factory: pytest.TempPathFactory, run_cli: RunCli
) -> None:
    """Whoever ran it (a short user name, one inside a folder's name) and whoever reports it:
    no home folder, no folder at all, in any format; the file names stay."""
    home = f"/home/{user}"
    model = f"{home}/{user}_stuff/{user}-gemma.gguf"
    rec = history_record("gemma")
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

"""A finished measurement is never thrown away: a plugin that raises, a cache that cannot be
written, a broken tool, and the result still stands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ggufs import Shape, write_model
from support import (
    as_process,
    raising_plugin,
    site_env,
)


# -- 5. a finished measurement is never thrown away ---------------------------------------------------
def test_a_plugin_raising_in_judge_loses_nothing(tmp_path: Path) -> None:
    raising_plugin(tmp_path / "site", "judge")
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    r = as_process("check", str(model), "--tg", "1000000", "--bandwidth", "50", "--json", env=site_env(tmp_path))
    d = json.loads(r.stdout)
    codes = {f["code"]: f for f in d["findings"]}
    assert (r.exit_code, d["verdict"]) == (4, "impossible") and "DECODE_ABOVE_CEILING" in codes
    assert codes["PLUGIN_FAILED"]["plugin"] == "example" and "judge exploded" in codes["PLUGIN_FAILED"]["evidence"][0]
    assert "warning: plugin 'example' failed in its judge hook: RuntimeError: judge exploded" in r.stderr


def test_a_plugin_raising_in_register_commands_breaks_no_command(tmp_path: Path) -> None:
    raising_plugin(tmp_path / "site", "register_commands")
    r = as_process("--help", env=site_env(tmp_path))
    assert r.exit_code == 0 and "profile" in r.stdout and "failed in its register_commands hook" in r.stderr
    assert as_process("--version", env=site_env(tmp_path)).exit_code == 0


def test_a_plugin_calling_sys_exit_at_import_is_reported(tmp_path: Path) -> None:
    raising_plugin(tmp_path / "site", "import")
    r = as_process("plugins", env=site_env(tmp_path))
    assert r.exit_code == 0 and "example" in r.stdout and "FAILED: SystemExit" in r.stdout


def test_ggprof_plugins_naming_a_missing_plugin_warns() -> None:
    r = as_process("plugins", env={"GGPROF_PLUGINS": "cpu,nosuch"})
    assert r.exit_code == 0 and "GGPROF_PLUGINS names 'nosuch', but no installed plugin has that name" in r.stderr


def test_a_file_shaped_cache_dir_is_a_warning_not_a_lost_measurement(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    r = as_process("host", "--quick", "--json", env={"GGPROF_CACHE_DIR": str(cache)})
    assert r.exit_code == 0 and json.loads(r.stdout)["measured_read_bandwidth_bytes_per_s"] > 0
    assert "warning: could not cache the measurement" in r.stderr


@pytest.mark.parametrize(
    "corrupt",
    [
        "[]",
        '{"version": 1, "measured_at": NaN, "bandwidth": {}, "sgemm": {}}',
        "EMPTY_SAMPLES",
        "NEGATIVE_SAMPLES",
    ],
)
def test_a_corrupt_host_cache_is_ignored(corrupt: str, tmp_path: Path) -> None:
    env = {"GGPROF_CACHE_DIR": str(tmp_path)}
    as_process("host", "--quick", env=env)  # a valid cache to spoil
    (path,) = tmp_path.glob("host-*.json")
    good = json.loads(path.read_text())
    if corrupt == "EMPTY_SAMPLES":
        good["bandwidth"]["read"]["samples_bytes_per_s"] = []
        corrupt = json.dumps(good)
    elif corrupt == "NEGATIVE_SAMPLES":
        good["bandwidth"]["read"]["samples_bytes_per_s"] = [-1e9]
        corrupt = json.dumps(good)
    path.write_text(corrupt)
    r = as_process("host", "--no-measure", "--json", env=env)
    assert r.exit_code == 0 and json.loads(r.stdout)["measured_read_bandwidth_bytes_per_s"] is None

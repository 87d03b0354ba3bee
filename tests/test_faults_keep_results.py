"""A finished measurement is never thrown away: a plugin that raises, a cache that cannot be
written, a broken tool, and the result still stands."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ggufs import Shape, write_model
from support import (
    RunCli,
    as_process,
    install_example,
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
        "SESSIONS_PAST_THE_SAMPLES",
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
    elif corrupt == "SESSIONS_PAST_THE_SAMPLES":  # 5 reads cannot hold a first run and 1,000 refining rounds
        good["bandwidth"]["sessions"] = 1000
        corrupt = json.dumps(good)
    path.write_text(corrupt)
    r = as_process("host", "--no-measure", "--json", env=env)
    assert r.exit_code == 0 and json.loads(r.stdout)["measured_read_bandwidth_bytes_per_s"] is None


BROKEN_BACKEND = (
    "from ggprof import Backend, Detection, hookimpl\n\n"
    "class Broken(Backend):\n"
    "    name = 'broken'\n"
    "    def detect(self, host):\n"
    "        return Detection(backend=self.name, reason='none here')\n"
    "    def efficiency_band(self, model, device):\n"
    "        raise ZeroDivisionError('band exploded')\n"
    "    def compute_roof(self, case):\n"
    "        raise ZeroDivisionError('roof exploded')\n\n"
    "@hookimpl\n"
    "def register_backends(register):\n"
    "    register(Broken())\n\n"
    "@hookimpl\n"
    "def profile_dirs():\n"
    "    import os\n"
    "    return [os.environ['BROKEN_PROFILES']]\n"
)


def broken_backend(tmp_path: Path) -> dict[str, str]:
    """A plugin whose backend raises in efficiency_band and compute_roof, with a device profile of
    its own (`broken-gpu`); the environment that loads it."""
    site = tmp_path / "site"
    install_example(site, module="ggprof_bad_backend")
    (site / "ggprof_bad_backend.py").write_text(BROKEN_BACKEND)
    profiles = tmp_path / "broken-profiles"
    profiles.mkdir()
    (profiles / "broken-gpu.toml").write_text(
        'id = "broken-gpu"\nname = "Broken GPU"\nkind = "gpu"\nbackends = ["broken"]\n'
        'memory_bandwidth_gbs = 500\nmemory_gb = 16\nsource = "a test"\n'
    )
    return {**site_env(tmp_path), "BROKEN_PROFILES": str(profiles)}


def test_a_backend_plugin_raising_while_judging_is_named(tmp_path: Path, gemma_path: Path) -> None:
    env = broken_backend(tmp_path)
    r = as_process(
        "check",
        str(gemma_path),
        "--tg",
        "50",
        "--bandwidth",
        "90",
        "--backend",
        "broken",
        "--json",
        env=env,
    )
    d = json.loads(r.stdout)
    failed = next(f for f in d["findings"] if f["code"] == "PLUGIN_FAILED")
    assert (r.exit_code, d["verdict"], failed["plugin"]) == (0, "unknown", "broken")
    assert failed["evidence"] == ["ZeroDivisionError: roof exploded"]


def test_a_backend_plugin_raising_in_predict_is_named_not_hidden(tmp_path: Path, gemma_path: Path) -> None:
    """`predict` judges nothing, so a backend's failing band was once silently "no band": the
    ceiling stands and a warning names the plugin and its error."""
    r = as_process("predict", str(gemma_path), "--device", "broken-gpu", "--json", env=broken_backend(tmp_path))
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and d["decode_ceiling_tok_s"] > 0 and d["expected_tok_s_low"] is None
    assert (
        "warning: the broken backend plugin failed computing its expected band: ZeroDivisionError: band exploded"
        in r.stderr
    )


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ggprof.model.synth import SHAPES
    from ggprof.model.synth import write_model as write_synth

    return write_synth(SHAPES["tiny"], "q4_0", tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.mark.slow
def test_a_history_that_cannot_be_written_keeps_the_verdicts_status(
    tiny_model: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    """`profile --db` on a link to a missing folder: the verdict is printed and is the exit
    status; the failed save is a warning naming the database."""
    db = tmp_path / "db.db"
    db.symlink_to(tmp_path / "gone" / "history.db")
    r = run_cli("profile", str(tiny_model), "-p", "8", "-n", "4", "-r", "2", "--db", str(db), "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == d["exit_status"], r.stderr
    assert "warning: the run was not saved to the history:" in r.stderr and "cannot be opened" in r.stderr


@pytest.mark.parametrize("where", ["missing folder", "fifo", "/dev/full", "folder", "suffix"])
def test_a_plot_path_that_cannot_be_written_is_refused_before_the_run(
    where: str, tmp_path: Path, run_cli: RunCli
) -> None:
    target = {
        "missing folder": str(tmp_path / "nowhere" / "x.png"),
        "fifo": str(tmp_path / "fifo.png"),
        "/dev/full": "/dev/full",
        "folder": str(tmp_path / "a-folder.png"),
        "suffix": str(tmp_path / "x.jpg"),
    }[where]
    if where == "fifo":
        os.mkfifo(target)
    if where == "folder":
        os.mkdir(target)
    # the model is never read: the plot path is refused first (a missing model would be another error)
    for args in (["profile", "missing.gguf"], ["bench", "missing.gguf", "--parallel", "1,2"]):
        r = run_cli(*args, "--plot", target)
        assert r.exit_code == 2 and r.stderr.startswith("Error: ") and "--plot" in r.stderr, (args, r.stderr)
        assert r.stderr.count("\n") == 1


def test_a_plot_that_fails_after_the_run_is_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    """What was measured stands: the plot's failure is named and the command goes on."""
    from ggprof.cli.base import draw

    def full_disk(path: Path) -> Path:
        raise OSError(28, "No space left on device")

    draw(full_disk, Path("/tmp/x.png"))
    assert "warning: the plot was not written to /tmp/x.png: No space left on device" in capsys.readouterr().err

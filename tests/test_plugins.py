"""The plugin framework: entry points, the built-ins, an outside package, every hook tested."""

from __future__ import annotations

import json
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from support import THIRDPARTY, RunCli, as_process, install_example, judged

from ggprof import hookspecs
from ggprof.plugins import backends, plugin_infos, plugin_manager, reset

BUILTIN_BACKENDS = {"cpu", "cuda", "metal", "vulkan", "rocm", "sycl", "rpc"}


def test_builtin_backends_load_by_import() -> None:
    infos = {i.name: i for i in plugin_infos()}
    assert set(infos) >= BUILTIN_BACKENDS
    for name in BUILTIN_BACKENDS:
        assert infos[name].builtin and infos[name].module == f"ggprof_backends.{name}"
        assert "register_backends" in infos[name].hooks
    assert set(backends()) == BUILTIN_BACKENDS


def test_plugins_json(run_cli: RunCli) -> None:
    r = run_cli("plugins", "--json")
    assert r.exit_code == 0
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert rows["cpu"]["hooks"] == ["judge", "register_backends"]
    assert rows["ggprof.archs"]["hooks"] == ["swa_pattern"]


def test_outside_package_registers(tmp_path: Path) -> None:
    install_example(tmp_path / "site")
    env = {"PYTHONPATH": str(tmp_path / "site")}
    r = as_process("plugins", "--json", env=env)
    assert r.exit_code == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    ex = rows["example"]
    assert (ex["distribution"], ex["version"], ex["builtin"]) == ("ggprof-example", "1.2.3", False)
    assert ex["hooks"] == [
        "judge",
        "profile_dirs",
        "register_backends",
        "register_commands",
        "register_engines",
        "swa_pattern",
    ]
    text = as_process("plugins", env=env).stdout
    assert "backends: cpu, cuda, example, metal, rocm, rpc, sycl, vulkan" in text


def test_ggprof_plugins_env_restricts(tmp_path: Path) -> None:
    install_example(tmp_path / "site")
    r = as_process("plugins", "--json", env={"PYTHONPATH": str(tmp_path / "site"), "GGPROF_PLUGINS": "cpu"})
    assert {row["name"] for row in json.loads(r.stdout)} == {"ggprof.archs", "ggprof.engines", "cpu"}
    r = as_process("plugins", "--json", env={"PYTHONPATH": str(tmp_path / "site"), "GGPROF_PLUGINS": "vulkan,example"})
    assert {row["name"] for row in json.loads(r.stdout)} == {
        "ggprof.archs",
        "ggprof.engines",
        "cpu",
        "vulkan",
        "example",
    }


def test_the_cpu_backend_cannot_be_turned_off(
    run_cli: RunCli, gemma_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GGPROF_PLUGINS="" loads no optional plugin, and still judges a CPU run: 1 tok/s against
    100 GB/s (a ceiling of ~400 tok/s) is below the CPU's band, said by the cpu plugin."""
    monkeypatch.setenv("GGPROF_PLUGINS", "")
    reset()
    assert set(backends()) == {"cpu"}
    r = run_cli("check", str(gemma_path), "--tg", "1", "--bandwidth", "100", "--backend", "cpu", "--json")
    (decode,) = [f for f in json.loads(r.stdout)["findings"] if f["code"].startswith("DECODE_")]
    assert (decode["code"], decode["plugin"], r.exit_code) == ("DECODE_BELOW_BAND", "cpu", 3)


def test_builtins_need_no_installed_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout whose ggprof was never installed has no entry points: the built-ins are there."""
    from importlib import metadata

    monkeypatch.setattr(metadata, "entry_points", lambda **kw: [])
    reset()
    assert set(backends()) == BUILTIN_BACKENDS


class _Recorder:
    """Two in-process plugins and a wrapper, to see pluggy's order and wrappers at work."""

    def __init__(self) -> None:
        self.seen: list[str] = []


def test_hooks_keep_pluggys_order_wrappers_and_isolate_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """pluggy calls the last registered first (tryfirst before that), a wrapper sees every
    answer, and a plugin that raises is one PLUGIN_FAILED finding: the others' findings stay."""
    from ggprof import Finding, hookimpl
    from ggprof.plugins import _isolated, extra_findings

    rec = _Recorder()

    def finding(code: str) -> Finding:
        return Finding(severity="plausible", code=code, title=code)

    class Early:
        @hookimpl(tryfirst=True)
        def judge(self, case: object) -> list[Finding]:
            rec.seen.append("early")
            return [finding("EARLY")]

    class Late:
        @hookimpl
        def judge(self, case: object) -> list[Finding]:
            rec.seen.append("late")
            return [finding("LATE")]

    class Broken:
        @hookimpl
        def judge(self, case: object) -> list[Finding]:
            rec.seen.append("broken")
            raise RuntimeError("judge exploded")

    class Wrapper:
        @hookimpl(wrapper=True)
        def judge(self, case: object) -> Generator[None, list[list[Finding]], list[list[Finding]]]:
            answers = yield
            rec.seen.append(f"wrapper saw {sum(len(a) for a in answers)}")
            return answers

    monkeypatch.setenv("GGPROF_PLUGINS", "")
    reset()
    pm = plugin_manager()
    pm.unregister(name="cpu")  # only the four plugins below answer
    for name, plugin in (("late", Late()), ("broken", Broken()), ("early", Early()), ("wrapper", Wrapper())):
        pm.register(_isolated(plugin, name), name=name)
    found = extra_findings(case=None)  # type: ignore[arg-type]
    # pluggy's order: tryfirst, then the last registered first; the wrapper around all of them
    assert rec.seen == ["early", "broken", "late", "wrapper saw 2"]
    assert [f.code for f in found] == ["EARLY", "LATE", "PLUGIN_FAILED"]
    failed = found[2]
    assert failed.plugin == "broken" and "judge exploded" in failed.evidence[0]


def test_broken_plugin_is_reported_not_fatal(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install_example(site, module="ggprof_broken_plugin")
    (site / "ggprof_broken_plugin.py").write_text("raise RuntimeError('boom')\n")
    r = as_process("plugins", "--json", env={"PYTHONPATH": str(site)})
    assert r.exit_code == 0
    assert "plugin 'example' failed to load: RuntimeError: boom" in r.stderr
    row = next(x for x in json.loads(r.stdout) if x["name"] == "example")
    assert row["error"] == "RuntimeError: boom"


def _with_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_example(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    reset()


# -- every hook has a test (named test_hook_<name>) --------------------------------------------
def test_hook_register_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _with_example(tmp_path, monkeypatch)
    assert backends()["example"].band.low == 0.4
    from ggprof.machine.host import describe_host
    from ggprof.plugins import extensions

    ext = extensions()

    report = describe_host(ext.backends.values(), ext.profiles, measure=False)
    ex = next(d for d in report.devices if d.backend == "example")
    assert ex.bandwidth is not None and ex.bandwidth.value == 123e9


def test_hook_swa_pattern(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _with_example(tmp_path, monkeypatch)
    hook = plugin_manager().hook.swa_pattern
    assert hook(architecture="examplearch").n_pattern == 3  # the plugin's answer
    assert hook(architecture="gemma3").n_pattern == 6  # the built-in table still answers
    assert hook(architecture="llama") is None


def test_hook_profile_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _with_example(tmp_path, monkeypatch)
    extra = tmp_path / "extra-profiles"
    extra.mkdir()
    (extra / "x.toml").write_text(
        'id = "example-9000"\nname = "Example 9000"\nkind = "gpu"\n'
        'backends = ["example"]\nmemory_bandwidth_gbs = 123\nsource = "example"\n'
    )
    monkeypatch.setenv("EXAMPLE_PROFILE_DIR", str(extra))
    from ggprof.plugins import extensions

    assert extensions().profiles.get("example-9000").memory_bandwidth_gbs == 123


def test_hook_register_commands(tmp_path: Path) -> None:
    install_example(tmp_path / "site")
    r = as_process("example-hello", env={"PYTHONPATH": str(tmp_path / "site")})
    assert (r.exit_code, r.stdout) == (0, "hello from the example plugin\n")


def test_hook_judge(tmp_path: Path) -> None:
    """An outside plugin adds findings to a verdict through the same hook the built-ins use."""
    sys.path.insert(0, str(Path(__file__).parent))
    from ggufs import Shape, write_model

    install_example(tmp_path / "site")
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    env = {"PYTHONPATH": str(tmp_path / "site"), "EXAMPLE_JUDGE": "1"}
    r = as_process("check", str(model), "--tg", "1000000", "--bandwidth", "50", "--json", env=env)
    d = json.loads(r.stdout)
    codes = {f["code"]: f for f in d["findings"]}
    assert codes["EXAMPLE_SUSPICIOUS_ROUND_NUMBER"]["plugin"] == "example"
    assert codes["EXAMPLE_SUSPICIOUS_ROUND_NUMBER"]["severity"] == "suspicious"
    assert "DECODE_ABOVE_CEILING" in codes  # the built-in cpu plugin still judged
    assert d["verdict"] == "impossible" and r.exit_code == 4


def test_every_hook_reaches_an_outside_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each hookspec, called through the plugin manager, returns the example plugin's answer;
    a new hook that no outside plugin can answer fails here."""
    import click

    from ggprof import JudgeCase
    from ggprof.model.spec import load_model

    monkeypatch.syspath_prepend(str(THIRDPARTY))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import ggprof_example_plugin as example
    from ggufs import Shape, write_model

    monkeypatch.setenv("EXAMPLE_JUDGE", "1")
    monkeypatch.setenv("EXAMPLE_PROFILE_DIR", "/example/profiles")
    case = JudgeCase(
        model=load_model(write_model(tmp_path / "m.gguf", Shape())[0]),
        backend="cpu",
        prediction=None,
        measured_tg_tok_s=2_000_000.0,
    )
    pm = plugin_manager()
    pm.register(example, name="example-direct")
    try:
        registered: list[object] = []
        pm.hook.register_backends(register=registered.append)
        group = click.Group()
        pm.hook.register_commands(cli=group)
        engines: dict[str, object] = {}
        pm.hook.register_engines(register=engines.__setitem__)
        answers = {
            "register_backends": "example" in {getattr(b, "name", None) for b in registered},
            "register_commands": "example-hello" in group.commands,
            "swa_pattern": pm.hook.swa_pattern(architecture="examplearch") is not None,
            "profile_dirs": [Path("/example/profiles")] in pm.hook.profile_dirs(),
            "judge": any(f.code == "EXAMPLE_SUSPICIOUS_ROUND_NUMBER" for g in pm.hook.judge(case=case) for f in g),
            "register_engines": "example-replay" in engines,
        }
    finally:
        pm.unregister(name="example-direct")
    hooks = {name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), "ggprof_spec")}
    assert set(answers) == hooks
    assert all(answers.values()), answers


def test_an_outside_engine_runs_and_is_judged(tmp_path: Path, gemma_path: Path) -> None:
    """A third-party engine (the example plugin's replay of a recorded llama-bench file) is run
    through `--engine NAME=OPTION` and judged like any run."""
    install_example(tmp_path / "site")
    recorded = Path(__file__).parent / "data" / "llama-bench-gemma3-270m.json"
    # the host pinned (--bandwidth 0.1 GB/s): the replayed decode is above that ceiling, one certain code
    r = as_process(
        "profile", str(gemma_path), "--engine", f"example-replay={recorded}", "--json", "--no-save",
        "--bandwidth", "0.1", env={"PYTHONPATH": str(tmp_path / "site")},
    )  # fmt: skip
    d = judged(r)
    assert d["context"]["engine"] == "example-replay" and d["engine"] == "example-replay"
    rows = json.loads(recorded.read_text())
    assert [b["avg_ts"] for b in d["bench"]] == pytest.approx([statistics_mean_ts(x) for x in rows], rel=1e-9)
    (decode,) = [f for f in d["findings"] if f["code"].startswith("DECODE_")]
    assert (decode["code"], d["verdict"]) == ("DECODE_ABOVE_CEILING", "impossible")


def statistics_mean_ts(row: dict[str, Any]) -> float:
    """tok/s of a recorded row, from its own samples (as llama-bench computes avg_ts)."""
    n = int(row["n_prompt"] or row["n_gen"])
    samples: list[int] = row["samples_ns"]
    assert isinstance(samples, list)
    return sum(n / (ns / 1e9) for ns in samples) / len(samples)

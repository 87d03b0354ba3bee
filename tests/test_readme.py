"""README's promises: two quick-start commands, the first runs the main job, the second is
exactly what CI runs; documented commands exist."""

from __future__ import annotations

import re
from pathlib import Path

from support import RunCli

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_two_quick_start_commands() -> None:
    main, tests = quick_start_commands()
    assert main == 'CMAKE_ARGS="-DLLAVA_BUILD=OFF" pip install . && ggprof profile'
    assert tests.startswith("CMAKE_ARGS=") and tests.endswith("python -m pytest") and '".[test]"' in tests


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "grep -m1 -E '^CMAKE_ARGS=.*pytest' README.md" in ci
    first = next(
        line for line in (ROOT / "README.md").read_text().splitlines() if re.match(r"^CMAKE_ARGS=.*pytest", line)
    )
    assert first == quick_start_commands()[1]


def test_every_command_is_in_the_table_and_has_a_reference_with_an_example() -> None:
    """README is a door: its commands table names each command; docs/commands.md is each one's
    reference, with an example of it run."""
    import click

    from ggprof.cli import cli

    commands = set(cli.list_commands(click.Context(cli)))
    readme = (ROOT / "README.md").read_text()
    table = readme.split("| command | what it answers |", 1)[1].split("\n\n", 1)[0]
    assert set(re.findall(r"^\| `ggprof (\w+)", table, re.MULTILINE)) == commands
    reference = (ROOT / "docs" / "commands.md").read_text()
    sections = dict(re.findall(r"^## ggprof (\w+)$(.*?)(?=^## |\Z)", reference, re.MULTILINE | re.DOTALL))
    assert set(sections) == commands
    for name, text in sections.items():  # a run of it shown (`plot` shows the picture it draws)
        shown = re.search(rf"^\$ ggprof {name}\b", text, re.MULTILINE) or (name == "plot" and "![" in text)
        assert shown, name


def test_readme_is_a_door() -> None:
    """At most 250 lines: what it answers, the quick start, the commands, links to the manual."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_each_command_loads_from_the_module_the_group_names() -> None:
    """The lazy group imports a command's module when it runs: the table must name the module
    that defines it."""
    from ggprof.cli.base import COMMAND_MODULES, cli

    for name, module in COMMAND_MODULES.items():
        cli.load_builtin(name)
        assert cli.commands[name].callback.__module__ == f"ggprof.cli.{module}", name


def test_version_answered_early_says_what_click_says(run_cli: RunCli) -> None:
    """`ggprof --version` is answered before click is imported; the words are click's."""
    import subprocess
    import sys

    early = subprocess.run([sys.executable, "-m", "ggprof", "--version"], capture_output=True, text=True, check=True)
    assert early.stdout == run_cli("--version").stdout == "ggprof, version 0.1.0\n"


def test_version_is_the_released_one_of_pyproject_and_changelog(run_cli) -> None:  # type: ignore[no-untyped-def]
    """`ggprof --version` prints pyproject.toml's version, CHANGELOG.md has a dated section for
    it below `## Unreleased`, and docs/commands.md quotes the same line."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version == "0.1.0"
    assert run_cli("--version").stdout == f"ggprof, version {version}\n"
    sections = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert sections[0] == "Unreleased"
    assert re.fullmatch(rf"{re.escape(version)} - \d{{4}}-\d{{2}}-\d{{2}}", sections[1])
    assert f"`ggprof, version {version}`" in (ROOT / "docs" / "commands.md").read_text()

"""The plugin documentation covers the plugin contract (as datasette tests its docs): every
hook in ggprof.hookspecs has its own section in docs/plugins.md, and every public name of the
package root is listed there."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import ggprof
from ggprof import hookspecs

PLUGINS_MD = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()


def test_every_hook_has_a_section() -> None:
    hooks = {name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(fn, "ggprof_spec")}
    documented = set(re.findall(r"^### `(\w+)\(", PLUGINS_MD, re.M))
    assert hooks == {
        "register_backends",
        "register_engines",
        "judge",
        "swa_pattern",
        "profile_dirs",
        "register_commands",
    }
    assert documented == hooks


def test_each_hooks_documented_signature_is_its_spec() -> None:
    """As datasette checks its plugin hooks' docs: the parameters a section names are the
    hook's own, in order, and the README-level hooks table in docs/architecture.md lists
    every hook with the same parameters."""
    architecture = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    table = dict(re.findall(r"^\| `(\w+)\(([^)]*)\)`", architecture, re.M))
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction):
        if not hasattr(fn, "ggprof_spec"):
            continue
        params = list(inspect.signature(fn).parameters)
        (documented,) = re.findall(rf"^### `{name}\(([^)]*)\)`", PLUGINS_MD, re.M)
        assert [p.strip() for p in documented.split(",") if p.strip()] == params, name
        assert [p.strip() for p in table[name].split(",") if p.strip()] == params, name


def test_every_public_name_is_listed() -> None:
    api = PLUGINS_MD.split("## The public API", 1)[1].split("## ", 1)[0]
    listed = set(re.findall(r"^    (\w+),", api, re.M))
    public = set(ggprof.__all__) - {"__version__"}
    assert listed == public
    for name in public:  # and each really is importable from the root
        assert getattr(ggprof, name) is not None


def test_every_package_is_in_the_layer_contract_and_the_architecture_table() -> None:
    """Each package and module of src/ggprof sits in one import-linter layer and the layer
    table of docs/architecture.md names it: a new room cannot be added without its place in
    the house."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    root = Path(__file__).resolve().parents[1]
    src = root / "src" / "ggprof"
    modules = {
        p.stem
        for p in src.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
    }
    contract = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    layered = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    assert layered == modules
    page = (root / "docs" / "architecture.md").read_text()
    table = page.split("| layer | path | what it does |", 1)[1].split("\n\n", 1)[0]
    for name in modules:
        assert f"`src/ggprof/{name}/`" in table or f"{name}.py`" in table, name


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_link_between_the_docs_resolves() -> None:
    """README and docs/ point into each other (the reference moved out of README): each relative
    link names a file that exists and, with #anchor, a heading of that file."""
    root = Path(__file__).resolve().parents[1]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    anchors = {page: {github_anchor(h) for h in re.findall(r"^#+ (.+)$", page.read_text(), re.M)} for page in pages}
    checked = 0
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), f"{page.name}: {target}"
            if anchor:
                assert anchor in anchors.get(dest, set()), f"{page.name}: {target}"
            checked += 1
    readme_links = {t.partition("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", (root / "README.md").read_text())}
    assert {f"docs/{p.name}" for p in (root / "docs").glob("*.md")} <= readme_links  # README is the door to each
    assert checked > len(pages)


def test_every_finding_code_is_documented_with_its_severity() -> None:
    """Scripts match on finding codes: each code ggprof and its built-in plugins can emit is in
    docs/commands.md's table of codes, with the severity it is emitted with, and the table
    names no code that nothing emits."""
    root = Path(__file__).resolve().parents[1]
    emitted: dict[str, set[str]] = {}
    for path in [*(root / "src").rglob("*.py"), *(root / "plugins").rglob("*.py")]:
        for severity, code in re.findall(r'severity="(\w+)",\s*code="(\w+)"', path.read_text()):
            emitted.setdefault(code, set()).add(severity)
    table = (root / "docs" / "commands.md").read_text().split("| code | severity | rule |", 1)[1].split("\n\n", 1)[0]
    documented: dict[str, set[str]] = {}
    for codes, severity in re.findall(r"^\| (`[A-Z_]+`(?:, `[A-Z_]+`)*) \| (\w+) \|", table, re.M):
        for code in re.findall(r"`([A-Z_]+)`", codes):
            documented.setdefault(code, set()).add(severity)
    assert len(emitted) >= 18
    assert documented == emitted


def test_help_lists_the_exit_statuses_of_the_docs_table() -> None:
    """`ggprof --help` and docs/commands.md's "Exit statuses" give the same statuses in the same
    order, each help line the start of the table's meaning, and both cover every ExitStatus; the
    table is the one the code generates."""
    from support import in_process

    from ggprof.errors import ExitStatus, exit_status_table

    r = in_process("--help")
    assert r.exit_code == 0
    listed = r.stdout.split("Exit status:\n", 1)[1].split("\n\n", 1)[0]
    helped = [(int(m[1]), m[2]) for m in re.finditer(r"^\s+(\d+)\s+(.+)$", listed, re.M)]
    doc = (Path(__file__).parents[1] / "docs" / "commands.md").read_text()
    section = doc.split("## Exit statuses", 1)[1].split("\n## ", 1)[0]
    tabled = [(int(m[1]), m[2]) for m in re.finditer(r"^\| (\d+) \| (.+) \|$", section, re.M)]
    assert [s for s, _ in helped] == [s for s, _ in tabled] == sorted(int(s) for s in ExitStatus)
    assert all(meaning.startswith(brief) for (_, brief), (_, meaning) in zip(helped, tabled, strict=True))
    assert exit_status_table() in section

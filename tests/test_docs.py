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
    assert hooks == {"register_backends", "judge", "swa_pattern", "profile_dirs", "register_commands"}
    assert documented == hooks


def test_every_public_name_is_listed() -> None:
    api = PLUGINS_MD.split("## The public API", 1)[1].split("## ", 1)[0]
    listed = set(re.findall(r"^    (\w+),", api, re.M))
    public = set(ggprof.__all__) - {"__version__"}
    assert listed == public
    for name in public:  # and each really is importable from the root
        assert getattr(ggprof, name) is not None

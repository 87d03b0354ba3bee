"""The plugin manager: built-in rules, then every `ggprof` entry point (built-in backends
included), optionally restricted by GGPROF_PLUGINS=a,b (empty: none)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import TYPE_CHECKING

import pluggy

from ggprof import archs, hookspecs

if TYPE_CHECKING:
    from ggprof.backend import Backend

ENTRY_POINT_GROUP = "ggprof"
BUILTIN_DISTRIBUTION = "ggprof"


@dataclass(frozen=True)
class PluginInfo:
    name: str
    module: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    builtin: bool
    error: str | None = None


_failures: list[PluginInfo] = []
_dists: dict[str, tuple[str | None, str | None]] = {}


@cache
def plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager("ggprof")
    pm.add_hookspecs(hookspecs)
    pm.register(archs, name="ggprof.archs")
    allowed = _allowed()
    seen: set[str] = set()
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in seen or (allowed is not None and ep.name not in allowed):
            continue
        seen.add(ep.name)
        _load(pm, ep)
    pm.check_pending()
    return pm


def _allowed() -> set[str] | None:
    raw = os.environ.get("GGPROF_PLUGINS")
    if raw is None:
        return None
    return {name.strip() for name in raw.split(",") if name.strip()}


def _load(pm: pluggy.PluginManager, ep: metadata.EntryPoint) -> None:
    dist = ep.dist
    try:
        module = ep.load()
        pm.register(module, name=ep.name)
    except Exception as e:  # a broken third-party plugin must not take ggprof down
        _failures.append(
            PluginInfo(
                ep.name,
                ep.value,
                dist.name if dist else None,
                dist.version if dist else None,
                (),
                dist is not None and dist.name == BUILTIN_DISTRIBUTION,
                f"{type(e).__name__}: {e}",
            )
        )
        print(f"warning: plugin {ep.name!r} failed to load: {type(e).__name__}: {e}", file=sys.stderr)
        return
    _dists[ep.name] = (dist.name, dist.version) if dist else (None, None)


def plugin_infos() -> list[PluginInfo]:
    """What loaded (and what failed to), with the hooks each implements."""
    pm = plugin_manager()
    out = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        hooks = tuple(sorted(c.name for c in pm.get_hookcallers(plugin) or []))
        dist, version = _dists.get(name, (BUILTIN_DISTRIBUTION, None))
        module = getattr(plugin, "__name__", repr(plugin))
        out.append(PluginInfo(name, module, dist, version, hooks, dist == BUILTIN_DISTRIBUTION))
    return out + list(_failures)


@cache
def backends() -> dict[str, Backend]:
    """Every registered Backend by name (the first registration of a name wins)."""
    found: dict[str, Backend] = {}

    def register(backend: Backend) -> None:
        found.setdefault(backend.name, backend)

    plugin_manager().hook.register_backends(register=register)
    return found


def reset() -> None:
    """Forget loaded plugins (tests use this after changing GGPROF_PLUGINS or sys.path)."""
    plugin_manager.cache_clear()
    backends.cache_clear()
    _failures.clear()
    _dists.clear()

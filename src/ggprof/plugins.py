"""The plugin manager: built-in rules, then every `ggprof` entry point (built-in backends
included), optionally restricted by GGPROF_PLUGINS=a,b (empty: none).

Only the CLI uses it: `extensions()` resolves what the plugins add once, and the CLI
passes that down to the core.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

import pluggy

from ggprof import hookimpl, hookspecs
from ggprof.machine.profiles import ProfileDB
from ggprof.model.archs import SWA_DEFAULTS
from ggprof.model.spec import SwaPattern
from ggprof.pipelines.extensions import Extensions
from ggprof.verdict.backend import Backend
from ggprof.verdict.finding import Finding, JudgeCase

ENTRY_POINT_GROUP = "ggprof"
BUILTIN_DISTRIBUTION = "ggprof"


class BuiltinArchs:
    """llama.cpp's hard-coded sliding-window patterns, answered last so plugins can override."""

    @hookimpl(trylast=True)
    def swa_pattern(self, architecture: str) -> SwaPattern | None:
        return SWA_DEFAULTS.get(architecture)


@dataclass(frozen=True, kw_only=True)
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
    pm.register(BuiltinArchs(), name="ggprof.archs")
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
                name=ep.name,
                module=ep.value,
                distribution=dist.name if dist else None,
                version=dist.version if dist else None,
                hooks=(),
                builtin=dist is not None and dist.name == BUILTIN_DISTRIBUTION,
                error=f"{type(e).__name__}: {e}",
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
        module = getattr(plugin, "__name__", f"{type(plugin).__module__}.{type(plugin).__name__}")
        out.append(
            PluginInfo(
                name=name,
                module=module,
                distribution=dist,
                version=version,
                hooks=hooks,
                builtin=dist == BUILTIN_DISTRIBUTION,
            )
        )
    return out + list(_failures)


@cache
def backends() -> dict[str, Backend]:
    """Every registered Backend by name (the first registration of a name wins)."""
    found: dict[str, Backend] = {}

    def register(backend: Backend) -> None:
        found.setdefault(backend.name, backend)

    plugin_manager().hook.register_backends(register=register)
    return found


def extensions() -> Extensions:
    """What the plugins add, resolved once, for the CLI to pass down to the core."""
    hook = plugin_manager().hook
    dirs = [Path(p) for paths in hook.profile_dirs() for p in paths]
    return Extensions(
        backends=backends(),
        profiles=ProfileDB.default(dirs),
        swa_default=lambda arch: hook.swa_pattern(architecture=arch),
        extra_findings=extra_findings,
    )


def extra_findings(case: JudgeCase) -> list[Finding]:
    """Every plugin's `judge` findings for a case."""
    return [f for group in plugin_manager().hook.judge(case=case) for f in group]


def reset() -> None:
    """Forget loaded plugins (tests use this after changing GGPROF_PLUGINS or sys.path)."""
    plugin_manager.cache_clear()
    backends.cache_clear()
    _failures.clear()
    _dists.clear()

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
from typing import TYPE_CHECKING

import pluggy

from ggprof import hookimpl, hookspecs
from ggprof.units import clean_name

# The core is imported where it is used, not here: `ggprof --help` loads the plugin manager
# to list plugin commands and should not pay for the core's imports (issue: start-up time).
if TYPE_CHECKING:
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
        from ggprof.model.archs import SWA_DEFAULTS

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
    for name in sorted((allowed or set()) - seen):
        warn(f"GGPROF_PLUGINS names {name!r}, but no installed plugin has that name")
    pm.check_pending()
    return pm


def warn(message: str) -> None:
    print(f"warning: {clean_name(message, 300)}", file=sys.stderr)


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
    except (Exception, SystemExit) as e:  # a broken plugin (even one calling sys.exit) must not take ggprof down
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
        warn(f"plugin {ep.name!r} failed to load: {type(e).__name__}: {e}")
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
    from ggprof.machine.profiles import ProfileDB
    from ggprof.pipelines.extensions import Extensions

    hook = plugin_manager().hook
    dirs = [Path(p) for paths in hook.profile_dirs() for p in paths]
    return Extensions(
        backends=backends(),
        profiles=ProfileDB.default(dirs),
        swa_default=lambda arch: hook.swa_pattern(architecture=arch),
        extra_findings=extra_findings,
    )


def extra_findings(case: JudgeCase) -> list[Finding]:
    """Every plugin's `judge` findings for a case. A plugin that raises (or answers something
    that is not a list of Findings) is named in a warning and an `unknown` finding; the other
    plugins' findings and the measurement are kept."""
    from ggprof.verdict.finding import Finding

    found: list[Finding] = []
    for impl in plugin_manager().hook.judge.get_hookimpls():
        try:
            answer = impl.function(case=case) or []
            if not isinstance(answer, list) or not all(isinstance(f, Finding) for f in answer):
                raise TypeError("the judge hook must return a list of Finding")
        except Exception as e:
            found.append(plugin_failed(impl.plugin_name, "judge", e))
            continue
        found += answer
    return found


def plugin_failed(plugin: str, hook: str, e: Exception) -> Finding:
    from ggprof.verdict.finding import Finding

    problem = f"{type(e).__name__}: {e}"
    warn(f"plugin {plugin!r} failed in its {hook} hook: {problem}")
    return Finding(
        severity="unknown",
        code="PLUGIN_FAILED",
        title=f"plugin {plugin!r} failed in its {hook} hook; its findings are missing",
        evidence=(clean_name(problem, 300),),
        next_step="report it to the plugin's authors, or leave it out with GGPROF_PLUGINS",
        plugin=plugin,
    )


def register_commands(group: object) -> None:
    """Every plugin's commands; a plugin that raises is named in a warning and left out."""
    for impl in plugin_manager().hook.register_commands.get_hookimpls():
        try:
            impl.function(cli=group)
        except Exception as e:
            warn(f"plugin {impl.plugin_name!r} failed to add its commands: {type(e).__name__}: {e}")


def reset() -> None:
    """Forget loaded plugins (tests use this after changing GGPROF_PLUGINS or sys.path)."""
    plugin_manager.cache_clear()
    backends.cache_clear()
    _failures.clear()
    _dists.clear()

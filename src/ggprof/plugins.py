"""The plugin manager: ggprof's own rules and backends, then every `ggprof` entry point.

As pytest's default and essential plugins and llm's default plugins: the built-in backends
load by import (`BUILTIN`), not through entry points, so a checkout without installed
metadata has them too; `cpu` cannot be turned off (`ESSENTIAL`); the other built-ins and
third-party plugins (entry points) are restricted by GGPROF_PLUGINS=a,b (empty: only the
essential ones).

Hooks are called by pluggy, in its order and with its wrappers and `firstresult`. A plugin
is registered through a proxy whose hook functions record an exception (and answer None)
instead of raising, so that one broken plugin is named and the others' answers are kept.

Only the CLI uses it: `extensions()` resolves what the plugins add once, and the CLI
passes that down to the core.
"""

from __future__ import annotations

import functools
import importlib
import os
import types
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from ggprof import hookimpl, hookspecs
from ggprof.units import warn

# The core is imported where it is used, not here: `ggprof --help` loads the plugin manager
# to list plugin commands and should not pay for the core's imports (issue: start-up time).
if TYPE_CHECKING:
    from importlib.metadata import Distribution

    from ggprof.engines import EngineType
    from ggprof.model.spec import SwaPattern
    from ggprof.pipelines.extensions import Extensions
    from ggprof.verdict.backend import Backend
    from ggprof.verdict.finding import Finding, JudgeCase

ENTRY_POINT_GROUP = "ggprof"
BUILTIN_DISTRIBUTION = "ggprof"
# The built-in backends, loaded by import; ESSENTIAL ones load whatever GGPROF_PLUGINS says.
BUILTIN = {
    "cpu": "ggprof_backends.cpu",
    "cuda": "ggprof_backends.cuda",
    "metal": "ggprof_backends.metal",
    "vulkan": "ggprof_backends.vulkan",
    "rocm": "ggprof_backends.rocm",
    "sycl": "ggprof_backends.sycl",
    "rpc": "ggprof_backends.rpc",
}
ESSENTIAL = frozenset({"cpu"})
IMPL_MARKER = "ggprof_impl"  # the attribute hookimpl sets on a hook function


class BuiltinArchs:
    """llama.cpp's hard-coded sliding-window patterns, answered last so plugins can override."""

    @hookimpl(trylast=True)
    def swa_pattern(self, architecture: str) -> SwaPattern | None:
        from ggprof.model.archs import SWA_DEFAULTS

        return SWA_DEFAULTS.get(architecture)


class BuiltinEngines:
    """python, llama-bench and server: registered first and answered first (pluggy calls the
    latest registered plugin first; `tryfirst` keeps a plugin from shadowing a built-in name)."""

    @hookimpl(tryfirst=True)
    def register_engines(self, register: Callable[[str, EngineType], None]) -> None:
        from ggprof.engines.llama_bench import LlamaBenchEngine
        from ggprof.engines.python import PythonEngine
        from ggprof.engines.server import ServerEngine

        for engine in (PythonEngine, LlamaBenchEngine, ServerEngine):
            register(engine.name, engine)


@dataclass(frozen=True, kw_only=True)
class PluginInfo:
    name: str
    module: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    builtin: bool
    error: str | None = None


@dataclass(frozen=True)
class HookFailure:
    """A plugin's hook that raised (or answered what its hook does not allow)."""

    plugin: str
    hook: str
    error: str


_failures: list[PluginInfo] = []  # plugins that failed to load
_hook_failures: list[HookFailure] = []  # hook calls that failed, in order
_dists: dict[str, tuple[str | None, str | None]] = {}


def _valid_judge_answer(answer: object) -> None:
    from ggprof.verdict.finding import Finding

    if not isinstance(answer, list) or not all(isinstance(f, Finding) for f in answer):
        raise TypeError("the judge hook must return a list of Finding")


# What a hook's answer must be, checked inside the isolation (a wrong answer is a failure too).
ANSWER_CHECKS: dict[str, Callable[[object], None]] = {"judge": _valid_judge_answer}


def _isolated(plugin: object, name: str) -> object:
    """The plugin as pluggy sees it: each hook function (wrappers aside) records an exception
    in `_hook_failures` and answers None instead of raising."""
    proxy = types.ModuleType(getattr(plugin, "__name__", f"{type(plugin).__module__}.{type(plugin).__name__}"))
    for attr in dir(plugin):
        fn = getattr(plugin, attr, None)
        opts = getattr(fn, IMPL_MARKER, None)
        if not callable(fn) or not isinstance(opts, dict):
            continue
        if opts.get("hookwrapper") or opts.get("wrapper"):
            setattr(proxy, attr, fn)  # a wrapper runs as pluggy runs it
            continue
        setattr(proxy, attr, _guarded(fn, name, attr, opts))
    return proxy


def _guarded(fn: Callable[..., Any], plugin: str, hook: str, opts: dict[str, Any]) -> Callable[..., Any]:
    check = ANSWER_CHECKS.get(hook)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            answer = fn(*args, **kwargs)
            if check is not None and answer is not None:
                check(answer)
            return answer
        except Exception as e:  # one plugin's bug must not take the others (or ggprof) down
            _hook_failures.append(HookFailure(plugin, hook, f"{type(e).__name__}: {e}"))
            return None

    setattr(call, IMPL_MARKER, opts)
    return call


def plugin_manager() -> pluggy.PluginManager:
    """Every plugin: ggprof's own rules, the built-in backends, the entry points."""
    return _manager(True)


@cache
def _manager(builtins: bool) -> pluggy.PluginManager:
    """The plugins; without the built-in backends (`builtins=False`) for listing commands, which
    they do not add (`ggprof --help` need not import them)."""
    pm = pluggy.PluginManager("ggprof")
    pm.add_hookspecs(hookspecs)
    pm.register(BuiltinArchs(), name="ggprof.archs")
    pm.register(BuiltinEngines(), name="ggprof.engines")
    allowed = _allowed()
    seen: set[str] = set()
    for name, module in BUILTIN.items():
        seen.add(name)  # loaded, or turned off by GGPROF_PLUGINS: either way not missing
        if builtins and (name in ESSENTIAL or allowed is None or name in allowed):
            _load(pm, name, module, functools.partial(importlib.import_module, module), None)
    from importlib import metadata  # ~40 ms: only when plugins are resolved

    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in seen or (allowed is not None and ep.name not in allowed):
            continue
        seen.add(ep.name)
        _load(pm, ep.name, ep.value, ep.load, ep.dist)
    for name in sorted((allowed or set()) - seen):
        warn(f"GGPROF_PLUGINS names {name!r}, but no installed plugin has that name")
    pm.check_pending()
    return pm


def _allowed() -> set[str] | None:
    raw = os.environ.get("GGPROF_PLUGINS")
    if raw is None:
        return None
    return {name.strip() for name in raw.split(",") if name.strip()}


def _load(
    pm: pluggy.PluginManager, name: str, module: str, load: Callable[[], object], dist: Distribution | None
) -> None:
    builtin = name in BUILTIN
    try:
        plugin = load()
        pm.register(_isolated(plugin, name), name=name)
    except (Exception, SystemExit) as e:  # a broken plugin (even one calling sys.exit) must not take ggprof down
        if any(f.name == name for f in _failures):
            return  # already named by another manager of this process
        _failures.append(
            PluginInfo(
                name=name,
                module=module,
                distribution=BUILTIN_DISTRIBUTION if builtin else dist.name if dist else None,
                version=None if builtin else dist.version if dist else None,
                hooks=(),
                builtin=builtin,
                error=f"{type(e).__name__}: {e}",
            )
        )
        warn(f"plugin {name!r} failed to load: {type(e).__name__}: {e}")
        return
    _dists[name] = (BUILTIN_DISTRIBUTION, None) if builtin else (dist.name, dist.version) if dist else (None, None)


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


def call_hook(hook: str, builtins: bool = True, **kwargs: Any) -> tuple[list[Any], list[HookFailure]]:
    """A hook called by pluggy: the answers, and the failures of this call (each also a warning)."""
    before = len(_hook_failures)
    answers = getattr(_manager(builtins).hook, hook)(**kwargs)
    failed = _hook_failures[before:]
    for f in failed:
        warn(f"plugin {f.plugin!r} failed in its {f.hook} hook: {f.error}")
    return (answers if isinstance(answers, list) else [answers]), failed


@cache
def backends() -> dict[str, Backend]:
    """Every registered Backend by name (the first registration of a name wins)."""
    found: dict[str, Backend] = {}

    def register(backend: Backend) -> None:
        found.setdefault(backend.name, backend)

    call_hook("register_backends", register=register)
    return found


@cache
def engines() -> dict[str, EngineType]:
    """Every registered engine factory by name (the first registration of a name wins)."""
    found: dict[str, EngineType] = {}

    def register(name: str, factory: EngineType) -> None:
        found.setdefault(str(name).strip().lower(), factory)

    call_hook("register_engines", register=register)
    return found


def extensions() -> Extensions:
    """What the plugins add, resolved once, for the CLI to pass down to the core."""
    from ggprof.machine.profiles import ProfileDB
    from ggprof.pipelines.extensions import Extensions

    dirs = [Path(p) for paths in call_hook("profile_dirs")[0] for p in paths]
    return Extensions(
        backends=backends(),
        engines=engines(),
        profiles=ProfileDB.default(dirs),
        swa_default=swa_default(),
        extra_findings=extra_findings,
    )


def swa_default() -> Callable[[str], SwaPattern | None]:
    """The plugins' architecture rules alone: what reading a model needs (`inspect` loads no
    engine, backend or profile for it)."""
    hook = plugin_manager().hook
    return lambda arch: hook.swa_pattern(architecture=arch)


def extra_findings(case: JudgeCase) -> list[Finding]:
    """Every plugin's `judge` findings for a case. A plugin that raises (or answers something
    that is not a list of Findings) is named in a warning and an `unknown` finding; the other
    plugins' findings and the measurement are kept."""
    answers, failed = call_hook("judge", case=case)
    return [f for answer in answers for f in answer] + [plugin_failed(f) for f in failed]


def plugin_failed(failure: HookFailure) -> Finding:
    from ggprof.verdict.finding import plugin_failed

    return plugin_failed(failure.plugin, f"in its {failure.hook} hook", "its findings are missing", failure.error)


def register_commands(group: object) -> None:
    """Every plugin's commands; a plugin that raises is named in a warning and left out. The
    built-in backends add none, so they are not imported for it."""
    call_hook("register_commands", builtins=False, cli=group)


def reset() -> None:
    """Forget loaded plugins (tests use this after changing GGPROF_PLUGINS or sys.path)."""
    _manager.cache_clear()
    backends.cache_clear()
    engines.cache_clear()
    _failures.clear()
    _hook_failures.clear()
    _dists.clear()

"""The Click group, shared options and helpers of the command modules.

Only the ggprof.cli package imports click; commands parse options, call the core, render.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ggprof import __version__
from ggprof.cli.options import remote_header_bytes, remote_header_timeout
from ggprof.errors import exit_status_help
from ggprof.llamacpp import (
    N_CTX,
)
from ggprof.units import clean_name, warn

if TYPE_CHECKING:
    from ggprof.engines import ModelSource
    from ggprof.model.spec import ModelSpec, SwaDefault
    from ggprof.pipelines.extensions import Extensions


@cache
def extensions() -> Extensions:
    """What the plugins add, resolved once per command and passed down to the core."""
    from ggprof.plugins import extensions as resolve

    return resolve()


@cache
def swa_default() -> SwaDefault:
    """The plugins' architecture rules, all a model's header needs: a command that only reads a
    model (`inspect`) loads no engine, backend or profile."""
    from ggprof.plugins import swa_default as resolve

    return resolve()


invocation: list[str] = []  # this command's arguments, as given (kept with each saved run)


def emit_json(obj: Any) -> None:
    """JSON on stdout, written as it is encoded (a result of 30,000 rows is never one string)."""
    json.dump(obj, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def show(as_json: bool, as_dict: Callable[..., Any], as_text: Callable[..., str], *args: Any) -> None:
    """A result on stdout: `as_dict(*args)` as JSON, or `as_text(*args)`."""
    if as_json:
        emit_json(as_dict(*args))
    else:
        click.echo(as_text(*args))


# Which module defines each built-in command: a command's module (and what it imports) loads
# only when that command runs or `--help` lists them all (tests/test_readme.py checks this table).
COMMAND_MODULES = {
    "profile": "runs",
    "bench": "runs",
    "check": "check",
    "inspect": "models",
    "predict": "models",
    "fit": "models",
    "synth": "models",
    "plugins": "models",
    "host": "machine",
    "profiles": "machine",
    "plan": "models",
    "history": "history",
    "compare": "history",
    "report": "history",
    "plot": "history",
}


class PluginGroup(click.Group):
    """The `ggprof` group, lazy: a built-in command's module is imported when that command runs
    (COMMAND_MODULES), and plugins' commands (the `register_commands` hook) are added the first
    time a command is not a built-in one or the list is shown."""

    _plugins_loaded = False

    def load_plugin_commands(self) -> None:
        if not self._plugins_loaded:
            from ggprof.plugins import register_commands

            self._plugins_loaded = True
            register_commands(self)

    def load_builtin(self, cmd_name: str) -> None:
        """Import the module that defines a built-in command (it registers itself on `cli`)."""
        import importlib

        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"ggprof.cli.{module}")

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self.load_builtin(cmd_name)
        if cmd_name not in self.commands:
            self.load_plugin_commands()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for name in COMMAND_MODULES:
            self.load_builtin(name)
        self.load_plugin_commands()
        return super().list_commands(ctx)

    def invoke(self, ctx: click.Context) -> Any:
        """Click answers a closed pipe with status 1, the internal-error status; ggprof ends
        quietly instead (the reader asked for no more): `main` catches ClosedPipe."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError as e:
            raise ClosedPipe from e


def check_plot(plot: str | None, what: str = "--plot") -> Path | None:
    """--plot (or `ggprof plot`'s -o), checked before anything runs (a run or sweep is never
    wasted on a path that cannot be written)."""
    if plot is None:
        return None
    from ggprof.report.plots import check_plot_target

    check_plot_target(Path(plot), what)
    return Path(plot)


def draw(draw_to: Callable[[Path], Path], plot: Path) -> None:
    """A plot after a run: one that cannot be written (a full disk, a folder gone meanwhile) is a
    warning naming the path; the run's result and exit status stand."""
    from ggprof.errors import GGProfError

    try:
        click.echo(f"plot: {draw_to(plot)}", err=True)
    except (OSError, ValueError, GGProfError) as e:
        warn(f"the plot was not written to {plot}: {getattr(e, 'strerror', None) or e}")


class ClosedPipe(Exception):
    """The reader of stdout went away (`ggprof history | head -1`)."""


@click.group(cls=PluginGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ggprof")
def cli() -> None:
    """How fast should a GGUF model run on this machine, how fast does it run,
    and is that number believable?"""


cli.help = f"{cli.help}\n\n{exit_status_help()}"  # from the one table of exit statuses (ggprof.errors)


def context_tokens(spec: ModelSpec, ctx: int | None, depth: int, prompt: int, gen: int) -> int:
    needed = depth + prompt + gen
    if ctx is None:
        return max(min(N_CTX, spec.context_length or N_CTX), needed)
    if depth > ctx:
        raise click.UsageError(f"--depth {depth} is larger than --ctx {ctx}")
    if needed > ctx:
        what = "--depth + --prompt + --gen" if depth else "--prompt + --gen"
        raise click.UsageError(f"{what} = {needed} does not fit in --ctx {ctx}")
    return ctx


def resolve_model(model: str | None) -> tuple[ModelSpec, Path]:
    """The model to run: the given file (inspected first), or the default synthetic model."""
    if model is None:
        from ggprof.model.synth import DEFAULT_QUANT, DEFAULT_SHAPE, default_path, ensure_model

        if not default_path(DEFAULT_SHAPE, DEFAULT_QUANT).exists():
            click.echo(f"writing the default synthetic model ({DEFAULT_SHAPE}, {DEFAULT_QUANT})...", err=True)
        path = ensure_model()
        return load_model_arg(str(path)), path
    from ggprof.errors import BadInputError
    from ggprof.model.stores import is_remote

    if is_remote(model):
        raise BadInputError(
            f"{clean_name(model, 100)}: a model is run from this machine's disk: download it first "
            "(`hf download ORG/REPO FILE.gguf`, `ollama pull`), or judge it unrun with `predict` / `fit`"
        )
    spec = load_model_arg(model)
    return spec, spec.path


def model_source() -> ModelSource:
    """What an engine resolves a model argument with: as the commands do (None: the default
    synthetic model), with the plugins' architecture rules."""
    from ggprof.engines import ModelSource

    return ModelSource(load=lambda text: resolve_model(text)[0], swa_default=extensions().swa_default)


def load_model_arg(text: str) -> ModelSpec:
    """Inspect a model: a file, `ollama:NAME[:TAG]`, LM Studio's `publisher/model`, or a remote one
    (`hf://ORG/REPO/FILE.gguf`, an http(s) URL, `ollama://NAMESPACE/MODEL:TAG`: its header by range
    requests), with the plugins' architecture rules."""
    from ggprof.model.spec import load_model, model_from_headers
    from ggprof.model.stores import is_remote, resolve_reference

    if is_remote(text):
        from ggprof.model.hub import model_ref, read_remote_model
        from ggprof.model.ranges import Traffic
        from ggprof.netio import Deadline

        traffic = Traffic()
        deadline = Deadline.after(remote_header_timeout(), "--header-timeout")  # the manifest's too
        headers = read_remote_model(model_ref(text, deadline), remote_header_bytes(), traffic, deadline)
        if traffic.requests:
            click.echo(
                f"{clean_name(headers[0].path, 120)}: header read in {traffic.requests} range request"
                f"{'s' if traffic.requests != 1 else ''}, {traffic.bytes / 1e6:.2f} MB",
                err=True,
            )
        return model_from_headers(headers, swa_default=swa_default())
    return load_model(resolve_reference(text), swa_default=swa_default())

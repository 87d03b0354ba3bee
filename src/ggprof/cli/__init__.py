"""The thin Click layer: parse options, call the core, render. Nothing else imports click.

Commands live in base (the group), models, machine and runs; `main` turns every failure
into one `Error: ...` line and a documented exit status.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

import click

from ggprof.cli import machine, models, runs  # noqa: F401  (registers the commands)
from ggprof.cli.base import cli, extensions
from ggprof.errors import ExitStatus, GGProfError


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; every failure becomes one `Error: ...` line and a documented status."""
    try:
        from ggprof.plugins import plugin_manager

        extensions.cache_clear()  # resolved afresh for each invocation (tests run many in one process)
        plugin_manager().hook.register_commands(cli=cli)
        rv = cli.main(args=list(argv) if argv is not None else None, prog_name="ggprof", standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.UsageError as e:
        click.echo(f"Error: {e.format_message()}", err=True)
        return int(ExitStatus.BAD_INPUT)
    except click.ClickException as e:
        click.echo(f"Error: {e.format_message()}", err=True)
        return int(e.exit_code)
    except click.Abort:
        click.echo("Error: aborted", err=True)
        return int(ExitStatus.INTERNAL_ERROR)
    except GGProfError as e:
        click.echo(f"Error: {e}", err=True)
        return int(e.exit_status)
    except KeyboardInterrupt:
        click.echo("Error: interrupted", err=True)
        return 130
    except Exception as e:  # a bug: still one line, the traceback on request
        if os.environ.get("GGPROF_DEBUG"):
            traceback.print_exc()
        click.echo(f"Error: internal error: {type(e).__name__}: {e} (GGPROF_DEBUG=1 shows the traceback)", err=True)
        return int(ExitStatus.INTERNAL_ERROR)
    return int(rv) if isinstance(rv, int) else int(ExitStatus.OK)


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


__all__ = ["cli", "main", "run"]

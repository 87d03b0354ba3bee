"""The thin Click layer: parse options, call the core, render. Nothing else imports click.

Commands live in base (the group), options (the options they share), models, machine, runs,
check and history; `main` turns every failure into one `Error: ...` line and a documented exit
status.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Sequence

import click

from ggprof.cli.base import ClosedPipe, cli, extensions, invocation, swa_default
from ggprof.errors import ExitStatus, GGProfError
from ggprof.machine.profiles import SEARCHES
from ggprof.machine.tools import tool_notes, tool_timeout_cap_s
from ggprof.units import clean_name

# Click 8.2 raises this for a group given no command (8.1 printed the help and exited 0 itself)
NO_ARGS_IS_HELP: type[click.UsageError] | tuple[()] = getattr(click.exceptions, "NoArgsIsHelpError", ())
MAX_ERROR_CHARS = 500  # one error line, however long the name or message from outside


class Terminated(Exception):
    """SIGTERM or SIGHUP (a closed terminal, a dropped SSH session) arrived: unwind (ending the
    llama.cpp child and all it started) and exit 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated(signum)


ENDING_SIGNALS = tuple(s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


def error_line(message: str) -> None:
    click.echo(f"Error: {clean_name(message, MAX_ERROR_CHARS)}", err=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; every failure becomes one `Error: ...` line and a documented status."""
    extensions.cache_clear()  # resolved afresh for each invocation (tests run many in one process)
    swa_default.cache_clear()
    SEARCHES.arm()  # each command's profile-pattern searches are bounded in all
    tool_notes()  # and its vendor tools' notes are its own
    invocation[:] = list(argv) if argv is not None else sys.argv[1:]
    previous = {s: signal.signal(s, _on_sigterm) for s in ENDING_SIGNALS}
    try:
        tool_timeout_cap_s()  # environment values are checked where they enter, before anything runs
        rv = cli.main(args=list(argv) if argv is not None else None, prog_name="ggprof", standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except NO_ARGS_IS_HELP as e:  # `ggprof` alone: the group's help, readable, as Click shows it
        e.show()
        return int(e.exit_code)
    except click.UsageError as e:
        error_line(e.format_message())
        return int(ExitStatus.BAD_INPUT)
    except click.ClickException as e:
        error_line(e.format_message())
        return int(e.exit_code)
    except (ClosedPipe, BrokenPipeError):  # the reader went away (`ggprof history | head -1`)
        _quiet_stdout()
        return int(ExitStatus.OK)
    except (click.Abort, KeyboardInterrupt):  # click turns Ctrl-C into Abort
        error_line("interrupted")
        return int(ExitStatus.INTERRUPTED)
    except Terminated as e:
        if e.signum == signal.SIGTERM:
            error_line("terminated")
            return int(ExitStatus.TERMINATED)
        error_line("hung up (the terminal closed)")
        return int(ExitStatus.HUNG_UP)
    except GGProfError as e:
        error_line(str(e))
        return int(e.exit_status)
    except Exception as e:  # a bug: still one line, the traceback on request
        if os.environ.get("GGPROF_DEBUG"):
            traceback.print_exc()
        error_line(f"internal error: {type(e).__name__}: {e} (GGPROF_DEBUG=1 shows the traceback)")
        return int(ExitStatus.INTERNAL_ERROR)
    finally:
        SEARCHES.disarm()  # the bound is one command's: a library call after it is not counted
        for s, handler in previous.items():
            signal.signal(s, handler)
    return int(rv) if isinstance(rv, int) else int(ExitStatus.OK)


def _quiet_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's last flush of a closed pipe
    prints no traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def run() -> None:
    """Console-script entry point."""
    status = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
    sys.exit(status)


__all__ = ["cli", "main", "run"]

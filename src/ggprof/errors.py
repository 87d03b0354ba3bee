"""Exit statuses and the project's own error types (one line each, never a traceback)."""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """Exit status of every ggprof command; the verdict statuses follow the worst finding."""

    OK = 0  # ok, or the measurement is plausible
    INTERNAL_ERROR = 1  # a bug in ggprof
    BAD_INPUT = 2  # bad input file, bad flag value, usage error
    SUSPICIOUS = 3  # measured far below what the hardware allows
    IMPOSSIBLE = 4  # measured above what the hardware allows
    RUN_FAILED = 5  # the program or server being measured failed: crashed, timed out, broke off, answered an error
    HUNG_UP = 129  # SIGHUP (the terminal closed): 128 + 1
    INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, as shells report it
    TERMINATED = 143  # SIGTERM: 128 + 15


class GGProfError(Exception):
    """Base of every error ggprof reports as one `Error: ...` line."""

    exit_status: ExitStatus = ExitStatus.INTERNAL_ERROR


class BadInputError(GGProfError):
    """The user gave something ggprof cannot use: a file, a flag value, a profile."""

    exit_status = ExitStatus.BAD_INPUT


class GGUFError(BadInputError):
    """A GGUF file is malformed, hostile, or unsupported."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class NoBandwidthError(BadInputError):
    """No bandwidth is known for the device a command must reason about."""


class ProfileError(BadInputError):
    """A hardware profile TOML file is malformed."""


class RunError(GGProfError):
    """The run being measured failed: a llama.cpp program that crashed, was killed, timed out or
    printed what it must not; a server that broke off or answered an error."""

    exit_status = ExitStatus.RUN_FAILED


class RemoteError(BadInputError):
    """A remote model that cannot be read: not found, behind a token or terms, or a server that
    stalls, breaks off, ignores ranges or sends what it was not asked for."""

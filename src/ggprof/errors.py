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
    NETWORK_FAILED = 6  # a remote model's host could not be reached: DNS, refused, reset, no route, TLS
    HUNG_UP = 129  # SIGHUP (the terminal closed): 128 + 1
    INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, as shells report it
    TERMINATED = 143  # SIGTERM: 128 + 15


# What each status means: the one table `ggprof --help` (its brief, the start of its meaning) and
# docs/commands.md's "Exit statuses" (its meaning) are generated from; tests/test_docs.py holds them equal.
EXIT_STATUSES: tuple[tuple[ExitStatus, str, str], ...] = (
    (ExitStatus.OK, "ok; for a verdict: plausible (or unknown)", "ok; for a verdict: plausible (or unknown)"),
    (ExitStatus.INTERNAL_ERROR, "internal error: a bug in ggprof", "internal error: a bug in ggprof"),
    (
        ExitStatus.BAD_INPUT,
        "bad input or usage",
        "bad input or usage (a bad file, flag value, profile; a model llama.cpp refuses; a URL or path "
        "that names nothing; a log that is binary or cannot be read; a remote model that cannot be read: "
        "gated, private or missing, or a server that breaks the protocol or its deadline)",
    ),
    (ExitStatus.SUSPICIOUS, "suspicious", "suspicious: measured far below what the hardware allows"),
    (ExitStatus.IMPOSSIBLE, "impossible", "impossible: measured above what the hardware allows"),
    (
        ExitStatus.RUN_FAILED,
        "the run being measured failed",
        "the run being measured failed: llama.cpp's child or llama-bench crashed, was killed, timed out or "
        "printed what is not its output (a program that is not llama-bench); a server broke off, answered "
        "an error, ran past its deadline or sent an answer that contradicts itself",
    ),
    (
        ExitStatus.NETWORK_FAILED,
        "network failure",
        "network failure: a remote model's host could not be reached (its name does not resolve, the "
        "connection is refused, reset or times out, no route, TLS fails) before it answered; a server that "
        "answers (not found, gated) is 2. Give a local path, or `HF_HUB_OFFLINE=1` to use a header ggprof "
        "has cached",
    ),
    (
        ExitStatus.HUNG_UP,
        "hung up (SIGHUP)",
        "hung up (SIGHUP): the terminal closed, an SSH session dropped; everything the run started is ended",
    ),
    (ExitStatus.INTERRUPTED, "interrupted (Ctrl-C)", "interrupted (Ctrl-C); the llama.cpp child is ended with ggprof"),
    (ExitStatus.TERMINATED, "terminated (SIGTERM)", "terminated (SIGTERM); the llama.cpp child is ended with ggprof"),
)


def exit_status_help() -> str:
    """The exit statuses as `ggprof --help` lists them (one a line, kept as written by Click)."""
    return "\b\nExit status:\n" + "\n".join(f"  {int(s):>3}  {brief}" for s, brief, _ in EXIT_STATUSES)


def exit_status_table() -> str:
    """The exit statuses as docs/commands.md's table gives them."""
    rows = "\n".join(f"| {int(s)} | {meaning} |" for s, _, meaning in EXIT_STATUSES)
    return f"| status | meaning |\n|---|---|\n{rows}\n"


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


class NetworkError(GGProfError):
    """A remote model's host could not be reached (DNS, a connection refused, reset or timed
    out, no route, a TLS handshake that failed): the network, not the input, is at fault."""

    exit_status = ExitStatus.NETWORK_FAILED


class RemoteError(BadInputError):
    """A remote model that cannot be read: not found, behind a token or terms, or a server that
    stalls, breaks off, ignores ranges or sends what it was not asked for."""

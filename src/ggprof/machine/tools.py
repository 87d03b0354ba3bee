"""Running vendor and OS tools (nvidia-smi, sysctl, vulkaninfo ...): never raises, never hangs."""

from __future__ import annotations

import math
import os
import subprocess

from ggprof.errors import BadInputError

TOOL_TIMEOUT_ENV = "GGPROF_TOOL_TIMEOUT_S"
DEFAULT_TOOL_TIMEOUT_S = 5.0
MAX_TOOL_TIMEOUT_S = 600.0


def tool_timeout_cap_s() -> float | None:
    """GGPROF_TOOL_TIMEOUT_S as seconds (None when unset); BadInputError naming it otherwise."""
    raw = os.environ.get(TOOL_TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_TOOL_TIMEOUT_S):
        shown = raw[:40].encode("ascii", "replace").decode()
        raise BadInputError(
            f"{TOOL_TIMEOUT_ENV}={shown!r}: must be seconds, a number above 0 and at most {MAX_TOOL_TIMEOUT_S:g}"
        )
    return value


def run_tool(args: list[str], timeout_s: float | None = None) -> str | None:
    """Run a vendor or OS tool; None when it is missing, fails or hangs (never raises).

    GGPROF_TOOL_TIMEOUT_S caps how long any tool may take (default 5 s, or the caller's).
    """
    try:
        cap = tool_timeout_cap_s()
    except BadInputError:
        cap = None  # the CLI refuses a bad value before anything runs; a library caller gets the default
    timeout = cap or timeout_s or DEFAULT_TOOL_TIMEOUT_S
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return out.stdout if out.returncode == 0 else None

"""The figures a log states for a speed, read whole and refused when no run can have them.

A speed's figures are matched as whole tokens (`1e308`, `-5`, `inf`, `nan`, 400 digits), never as
the digits in front of them: `1e308 t/s` read by a pattern of digits was 1 t/s, and `-5`, `inf` or
`2e9` matched no pattern and the line was left out unsaid. Each figure is then checked: a speed
must be a finite number above 0 and at most MAX_TOK_S (as `check --tg` and llama-bench JSON's
`avg_ts` must), a time finite, 0 or more and under MAX_MS, a count of tokens a whole number in
llama.cpp's int32. A number that is none of these is refused with its line (BadFigure: one line,
exit 2), as a damaged or made-up log.

No claim is made, and no speed stated, by what is no number at all (`xx.xx`, a placeholder in
a guide's excerpt: None), or by what llama.cpp or Ollama print themselves when nothing was
timed: a count of 0 tokens (their rate `nan`), a time printed as 0 (`0.00 ms`, `0s`: their rate
`inf`).
"""

from __future__ import annotations

import math

from ggprof.errors import BadInputError
from ggprof.logs.text import Line
from ggprof.units import MAX_TOK_S, MAX_TOKENS, clean_name

MAX_MS = 1e11  # three years


class BadFigure(BadInputError):
    """A figure of a speed's line that no run can have (the log's name is added by its reader)."""

    def __init__(self, line: Line, what: str) -> None:
        super().__init__(f"line {line.number}: {what}: {clean_name(line.text, 160)!r}")


def number(token: str) -> float | None:
    """A number as llama.cpp, Go or a locale print it (`602,64` is 602.64, `1,234.5`, `+Inf`,
    `-nan`); None for what is no number at all. nan and infinities are returned as such."""
    t = token.strip().rstrip(",;")
    if "," in t and "." not in t:
        t = t.replace(",", ".") if t.count(",") == 1 else t.replace(",", "")
    t = t.replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def speed(token: str, line: Line, what: str = "a speed") -> float | None:
    """A stated rate in tokens a second: a finite number above 0, at most MAX_TOK_S (None: no
    number stated)."""
    v = number(token)
    return checked_speed(v, token, line, what) if v is not None else None


def checked_speed(v: float, token: str, line: Line, what: str = "a speed") -> float:
    """`v` (read from `token`, or worked out as `token` says) as a rate in tokens a second, or
    BadFigure naming why no run has it."""
    shown = clean_name(token, 40)
    said = f"{what} of {shown} t/s" if number(token) is not None else f"{shown}, {what} of {v:.3g} t/s,"
    if math.isnan(v):
        raise BadFigure(line, f"{said} is not a number")
    if v <= 0:
        raise BadFigure(line, f"{said} is not above 0")
    if v > MAX_TOK_S:
        raise BadFigure(line, f"{said} is above {MAX_TOK_S:,.0f}: no machine runs a model that fast")
    return v


def duration_ms(token: str, line: Line, scale: float = 1.0) -> float | None:
    """A stated time (`token` x `scale` milliseconds): finite, 0 or more, under MAX_MS (None: no
    number stated)."""
    v = number(token)
    if v is None:
        return None
    ms = v * scale
    if not math.isfinite(ms) or not 0 <= ms < MAX_MS:
        raise BadFigure(line, f"a time of {clean_name(token, 24)} is no time a run took")
    return ms


def tokens(token: str, line: Line) -> int | None:
    """A stated count of tokens: a whole number from 0 to llama.cpp's int32 limit (None: no
    number stated)."""
    v = number(token)
    if v is None:
        return None
    if not math.isfinite(v) or v != int(v) or not 0 <= v <= MAX_TOKENS:
        raise BadFigure(line, f"a count of {clean_name(token, 24)} tokens is no count llama.cpp keeps")
    return int(v)


def rate(line: Line, n: int, ms: float | None, printed: str | None) -> float | None:
    """The speed of `n` tokens timed in `ms` (None: no time stated) by a printer that may print
    its rate: the printed rate where there is one (the printer knows what it timed: llama-server
    times n - 1 tokens of a decode, the first one belonging to the prompt), else the tokens over
    the time; a rate printed as 0 beside a time is the tokens over it (under 0.005 t/s, printed
    with two decimals). None where nothing was timed: 0 tokens, or no time with the rate such a
    division prints (inf, nan) or none."""
    stated = number(printed) if printed is not None else None  # `xx.xx`: no rate printed
    if n == 0 or (not ms and (stated is None or math.isnan(stated) or math.isinf(stated))):
        return None
    if stated is not None and not (stated == 0 and ms):
        return checked_speed(stated, printed or "", line)
    assert ms
    return checked_speed(n / ms * 1e3, f"{n} tokens in {ms:g} ms", line)

"""Unit formatting and parsing. GB = 1e9 bytes, GiB = 2**30 bytes, always labelled."""

from __future__ import annotations

import math
import re
import unicodedata

GB = 1e9
GiB = float(1 << 30)
MAX_TOKENS = 2**31 - 1  # llama.cpp counts tokens (context, batch, depth) in int32
MAX_TOK_S = 1e9  # a claimed speed above this is no run's (a 1M-parameter model at 1 PFLOP/s: 5e8)
_BIDI_AND_FORMAT = {"Cc", "Cf", "Co", "Cs"}


MAX_NAME_CHARS = 200  # a path or a key from outside, as shown in one line


def clean(text: object) -> str:
    """Strip control, escape and bidi-format characters before text reaches a terminal."""
    s = str(text)
    if s.isprintable():  # no Cc, Cf, Co or Cs character in it (the usual case, checked in C)
        return s
    return "".join(ch for ch in s if unicodedata.category(ch) not in _BIDI_AND_FORMAT)


def warn(message: str) -> None:
    """A warning on stderr, one line, cleaned: nothing was lost, but the user should know."""
    import sys

    print(f"warning: {clean_name(message, 300)}", file=sys.stderr)


def cut(text: str, max_chars: int) -> str:
    """`text`, or its first and last characters around an ellipsis when it is longer."""
    if len(text) <= max_chars:
        return text
    half = (max_chars - 3) // 2
    return f"{text[:half]}...{text[-half:]}"


def clean_name(text: object, max_chars: int = MAX_NAME_CHARS) -> str:
    """A name from outside (a path, a key, a field) cleaned and cut for one line of output."""
    return cut(clean(cut(str(text), 4 * max_chars)), max_chars)


def sig3(x: float) -> str:
    """A number with 3 significant digits (no exponent for everyday magnitudes)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    if abs(x) >= 1000:
        return f"{round(x):,}"
    digits = 3 - math.floor(math.log10(abs(x))) - 1
    if digits <= 0:
        return f"{round(x, digits):,.0f}"
    return f"{x:,.{digits}f}"


def pct(x: float) -> str:
    """A share as a percentage: whole percents, or two decimals under 1%."""
    return f"{x:.0%}" if x >= 0.01 else f"{x:.2%}"


def fmt_bytes(n: float, binary: bool = True) -> str:
    """`253 MB (241 MiB)`: decimal first, binary in parentheses; both labelled."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            dec = f"{sig3(n / size)} {unit}"
            break
    else:
        return f"{int(n)} B"
    if not binary:
        return dec
    for unit_b, size_b in (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if abs(n) >= size_b:
            return f"{dec} ({sig3(n / size_b)} {unit_b})"
    return dec


def fmt_rate(bytes_per_s: float) -> str:
    return f"{sig3(bytes_per_s / GB)} GB/s"


def fmt_flops(n: float) -> str:
    """`113 GFLOP`, `16.0 TFLOP`."""
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if abs(n) >= size:
            return f"{sig3(n / size)} {unit}"
    return f"{sig3(n)} FLOP"


def fmt_count(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{sig3(n / size)}{unit}"
    return f"{n:g}"


_BW = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z/]*)\s*$")
_BW_UNITS = {
    "": 1e9, "gb/s": 1e9, "gbps": 1e9, "gb": 1e9, "g": 1e9,
    "tb/s": 1e12, "tbps": 1e12, "tb": 1e12, "t": 1e12,
    "mb/s": 1e6, "mbps": 1e6, "mb": 1e6,
    "gib/s": GiB, "tib/s": 2.0**40, "mib/s": 2.0**20,
}  # fmt: skip
# No memory system a GGUF runs on moves more than this (an H200 is ~4.8 TB/s).
MAX_BANDWIDTH_BYTES_PER_S = 1e14
MIN_BANDWIDTH_BYTES_PER_S = 1e8


_SIZE = re.compile(r"\s*(\d[\d.,]*)\s*([kmgt]i?b|b)?\b\s*", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE_UNITS |= {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_bytes(text: str, *, require_unit: bool = False, whole: bool = False) -> float | None:
    """'3.56 GiB', '64MiB', '100000000' (bytes) -> bytes; `602,64` is 602.64, `1,234.5` is 1234.5.
    None when the text does not start with a size (with `whole`, is not one; with
    `require_unit`, names no unit)."""
    m = (_SIZE.fullmatch if whole else _SIZE.match)(text)
    if not m or (require_unit and not m[2]):
        return None
    number = m[1].replace(",", ".") if "." not in m[1] else m[1].replace(",", "")
    try:
        return float(number) * _SIZE_UNITS[(m[2] or "b").lower()]
    except ValueError:
        return None


def parse_bandwidth(text: str) -> float:
    """'90' (GB/s), '850GB/s', '1.2TB/s' -> bytes/s. ValueError with the reason otherwise."""
    m = _BW.match(text)
    if not m:
        raise ValueError(f"cannot read bandwidth {text!r}: use a number of GB/s, or e.g. 850GB/s, 1.2TB/s")
    unit = m[2].lower()
    if unit not in _BW_UNITS:
        raise ValueError(f"unknown bandwidth unit {m[2]!r} in {text!r} (GB/s, TB/s, MB/s, GiB/s)")
    value = float(m[1]) * _BW_UNITS[unit]
    if value <= 0:
        raise ValueError(f"bandwidth must be positive, got {text!r}")
    if not MIN_BANDWIDTH_BYTES_PER_S <= value <= MAX_BANDWIDTH_BYTES_PER_S:
        raise ValueError(f"bandwidth {text!r} = {value / GB:g} GB/s is outside 0.1 GB/s .. 100 TB/s: check the units")
    return value


def tps(x: float | None) -> str:
    """A speed in tokens per second, three significant digits ("unknown" for None)."""
    return "unknown" if x is None else f"{sig3(x)} tok/s"

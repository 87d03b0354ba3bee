"""JSON from outside, parsed only when its size in items is bounded.

Parsing multiplies memory: 63 MiB of `[{},{},...]` becomes 1.6 GB of Python objects, a
list of numbers about ten times its text. A byte cap alone does not bound that; counting
the items first (every object or array opened, every separating comma: an upper bound on
the values the parser would make) does, at the cost of a few C-speed scans of the text.
"""

from __future__ import annotations

import json
from typing import Any


class TooManyItems(ValueError):
    """JSON that would parse into more items than its caller allows."""


def item_bound(text: str | bytes) -> int:
    """An upper bound on the values `json.loads(text)` makes (commas inside strings count too)."""
    if isinstance(text, str):
        return text.count(",") + text.count("{") + text.count("[") + 1
    return text.count(b",") + text.count(b"{") + text.count(b"[") + 1


def loads_bounded(text: str | bytes, max_items: int) -> Any:
    """`json.loads`, refused (TooManyItems) where the text could make more than `max_items`."""
    if item_bound(text) > max_items:
        raise TooManyItems(f"more than {max_items:,} JSON items")
    return json.loads(text)

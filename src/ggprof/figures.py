"""Figure: a number with the place it came from, so no output shows a guess as a measurement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Source = Literal["measured", "profile", "os", "user", "derived", "theoretical"]


@dataclass(frozen=True)
class Figure:
    """A value and its source. `detail` says how: a profile id, a method, a spread."""

    value: float
    source: Source
    detail: str = ""
    spread: float | None = None  # measured: how far its repetitions disagreed, (best - worst) / best

    def describe(self) -> str:
        return f"{self.source}: {self.detail}" if self.detail else self.source

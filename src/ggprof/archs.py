"""Built-in architecture rules llama.cpp hard-codes rather than reading from the GGUF.

Registered as the plugin `ggprof.archs`; a plugin can answer `swa_pattern` for an
architecture this table does not know (firstresult: the first answer wins).
"""

from __future__ import annotations

from ggprof import hookimpl
from ggprof.model import SwaPattern

# llama.cpp src/models/*.cpp: load_swa_pattern(ml, n_pattern, dense_first) defaults,
# used when the GGUF has a sliding window but no sliding_window_pattern key.
SWA_DEFAULTS: dict[str, SwaPattern] = {
    "gemma2": SwaPattern(2),
    "gemma3": SwaPattern(6),
    "gemma-embedding": SwaPattern(6),
    "gemma3n": SwaPattern(5),
    "cohere2": SwaPattern(4),
    "exaone4": SwaPattern(4),
    "llama4": SwaPattern(4),
    "olmo2": SwaPattern(4),
    "gpt-oss": SwaPattern(2),
    "afmoe": SwaPattern(4),
    "smallthinker": SwaPattern(4, dense_first=True),
    "modern-bert": SwaPattern(3, dense_first=True),
    "plamo3": SwaPattern(8),
    "phi3": SwaPattern(1),
}


@hookimpl(trylast=True)
def swa_pattern(architecture: str) -> SwaPattern | None:
    return SWA_DEFAULTS.get(architecture)

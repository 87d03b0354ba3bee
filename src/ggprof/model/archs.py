"""Built-in architecture rules llama.cpp hard-codes rather than reading from the GGUF.

The plugin manager answers the `swa_pattern` hook from this table (as the built-in plugin
`ggprof.archs`); a plugin can answer for an architecture the table does not know.
"""

from __future__ import annotations

from ggprof.model.spec import SwaPattern

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

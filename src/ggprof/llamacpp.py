"""llama.cpp's numbers that ggprof mirrors, in one place (plain values, imported everywhere).

llama-bench's defaults are those of tools/llama-bench/llama-bench.cpp (`cmd_params_defaults`):
`-p 512 -n 128 -r 5 -b 2048 -ub 512`. ggml creates at most GGML_MAX_N_THREADS threads
(ggml/include/ggml.h), the most `-t` may ask for.
"""

from __future__ import annotations

N_PROMPT = 512  # -p: prompt tokens of a pp test
N_GEN = 128  # -n: generated tokens of a tg test
REPETITIONS = 5  # -r
N_BATCH = 2048  # -b: the logical batch (logits once per batch)
N_UBATCH = 512  # -ub: the physical batch
GGML_MAX_N_THREADS = 512


def test_name(n_prompt: int, n_gen: int, n_depth: int = 0, n_parallel: int = 1) -> str:
    """llama-bench's name of a test: pp512, tg128, pp512+tg128 (both), `@ d4096` at a depth; and
    ggprof's `x4` for a batch of 4 sequences decoded together."""
    name = "+".join(([f"pp{n_prompt}"] if n_prompt else []) + ([f"tg{n_gen}"] if n_gen else []))
    name += f" @ d{n_depth}" if n_depth else ""
    return name + (f" x{n_parallel}" if n_parallel > 1 else "")

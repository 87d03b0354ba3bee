"""How a GPU's driver served, or will serve, what is over its memory (`check --spill`, `predict
--spill`): Windows' CUDA system-memory fallback, managed memory, or managed memory mapped in RAM
(ggprof.physics.placement.SPILLS)."""

from __future__ import annotations

from typing import Any

import click

from ggprof.physics.placement import SPILLS


def spill_option(f: Any) -> Any:
    """--spill fallback|managed|mapped, for a CUDA GPU's full offload over its memory."""
    return click.option(
        "--spill",
        type=click.Choice(list(SPILLS)),
        help="How the CUDA GPU's driver serves what is over its memory: fallback (Windows' system-memory "
        "fallback: what no longer fits the memory free, the cache llama.cpp allocates last, is read from RAM), "
        "managed (GGML_CUDA_ENABLE_UNIFIED_MEMORY=1: pages migrate, out and in, each token) or mapped (managed "
        "memory a patched build advises to stay in RAM: every weight read in place). Without it: fallback or managed.",
    )(f)

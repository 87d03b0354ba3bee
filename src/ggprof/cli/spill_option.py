"""How a GPU's driver served, or will serve, what is over its memory (`check --spill`, `predict
--spill`): Windows' CUDA system-memory fallback or managed memory (ggprof.physics.placement.SPILLS)."""

from __future__ import annotations

from typing import Any

import click

from ggprof.physics.placement import SPILLS


def spill_option(f: Any) -> Any:
    """--spill fallback|managed, for a CUDA GPU's full offload over its memory."""
    return click.option(
        "--spill",
        type=click.Choice(list(SPILLS)),
        help="How the CUDA GPU's driver serves what is over its memory: fallback (Windows' system-memory "
        "fallback: the cache llama.cpp allocates last is read from RAM) or managed "
        "(GGML_CUDA_ENABLE_UNIFIED_MEMORY=1: pages migrate each token). Without it: either.",
    )(f)

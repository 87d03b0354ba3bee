"""llama.cpp's --fit as a report states it (`check`, `predict`): -fit on|off, -fitt MiB, -fitc N,
each llama.cpp's option; and whether --fit placed the run (pipelines.placements.FitAsked)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ggprof.cli.options import fact_option


def fit_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--fit, --fit-target and --fit-ctx, passed as `fit`, `fit_target` and `fit_min_ctx`."""
    f = fact_option(
        "fit_min_ctx",
        default=None,
        help="The least context --fit may cut a -c not given to [default: 4096]; implies --fit on.",
    )(f)
    f = fact_option(
        "fit_target", default=None, help="The MiB --fit leaves free on the GPU [default: 1024]; implies --fit on."
    )(f)
    out: Callable[..., Any] = fact_option(
        "fit",
        default=None,
        help="on: no -ngl, -ncmoe or -ot was given and llama.cpp's --fit chose them (llama-server's default): "
        "the placement --fit would choose, named as derived (check: on by default with --build 7474 or later).",
    )(f)
    return out


def fit_asked(
    fit: str | None, target: int | None, min_ctx: int | None, ctx_given: bool, build: int | None = None
) -> Any:
    """--fit as the options state it (pipelines.placements.fit_asked); off beside --fit-target or
    --fit-ctx is a usage error."""
    from ggprof.pipelines.placements import fit_asked as asked

    if fit == "off" and (target is not None or min_ctx is not None):
        raise click.UsageError("--fit off: no --fit-target or --fit-ctx beside it")
    return asked(fit, target, min_ctx, ctx_given, build)


def refuse_fit_beside_placement(
    asked: Any, n_gpu_layers: int | None, placement: tuple[tuple[str, Any], ...], rpc: bool
) -> None:
    """--fit derives what a command line left unset: given beside -ngl, -ncmoe, -ot or -ts (which
    llama.cpp's --fit leaves as given) or an RPC split, it is a usage error."""
    from ggprof.pipelines.placements import FIT_LEAVES

    given = n_gpu_layers is not None or any(n in FIT_LEAVES for n, _ in placement)
    if asked is not None and (given or rpc):
        raise click.UsageError(
            "--fit derives a placement none was given for: not beside -ngl, -ncmoe, -ot, -ts or RPC "
            "(llama.cpp's --fit leaves those as given)"
        )

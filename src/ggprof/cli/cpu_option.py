"""The host RAM a user names by its CPU (`check --cpu`, `fit --cpu`): the name checked against
the platform table (ggprof.machine.platforms), one clear error where the table does not know it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ggprof.units import clean_name


def cpu_platform_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--cpu: a CPU's name, its control characters stripped; one whose platform ggprof's table
    (machine/platforms.toml) does not know is one clear error."""
    from ggprof.errors import BadInputError
    from ggprof.machine.platforms import platform_of, platforms

    if value is None:
        return None
    name = clean_name(value, 120)
    if platform_of(name) is None:
        known = ", ".join(p.name for p in platforms()[:4])
        raise BadInputError(f"--cpu {name!r}: its platform is not known ({known}, ...; machine/platforms.toml)")
    return name


def cpu_option(what: str) -> Callable[[Any], Any]:
    """--cpu NAME: the CPU beside the GPU, whose platform bounds a RAM not given (`what`: the command's words)."""
    return click.option("--cpu", "cpu_name", metavar="NAME", callback=cpu_platform_name, help=what)

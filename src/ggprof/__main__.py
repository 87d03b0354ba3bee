"""`python -m ggprof`: the same as the `ggprof` console script."""

from ggprof.cli import run

run()

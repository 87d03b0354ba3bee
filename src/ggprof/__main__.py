"""`python -m ggprof` and the `ggprof` console script.

`ggprof --version` is answered here, before the command line's own imports (click, the
plugins): a script that asks it for every model it checks does not wait for them.
"""

from __future__ import annotations

import sys


def run() -> None:
    if sys.argv[1:] == ["--version"]:
        from ggprof import __version__

        print(f"ggprof, version {__version__}")  # click's version_option says the same
        return
    from ggprof.bench.orphans import adopt_orphans
    from ggprof.cli import run as run_cli

    adopt_orphans()  # a process the measured program leaves behind becomes ours, to be ended
    run_cli()


if __name__ == "__main__":
    run()

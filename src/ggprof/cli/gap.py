"""`profile --server URL --vs-bench`: the waterfall from llama-bench's number to the server's
(the measuring lives in ggprof.pipelines.gap)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ggprof.cli.base import draw, model_source, show
from ggprof.cli.history import record, save_run
from ggprof.errors import BadInputError


def gap(
    run: Any, server: str | None, as_json: bool, db: str | None, no_save: bool, plot: Path | None, others: list[str]
) -> int:
    """Measure, print, keep and draw the gap; exit status 0 (a gap is explained, not judged).
    `others`: the options given that measure something else."""
    from ggprof.pipelines.gap import GapRequest, run_gap
    from ggprof.pipelines.runs import int_list
    from ggprof.report.gap import gap_record, gap_text

    if server is None:
        raise BadInputError("--vs-bench compares a server with llama-bench: give --server [URL]")
    if others:
        raise BadInputError(f"--vs-bench measures one turn against llama-bench: leave out {' and '.join(others)}")
    if run.rpc.active:
        raise BadInputError("--vs-bench runs llama-bench beside the server: leave out --rpc")
    lists = {flag: int_list(text, flag) for flag, text in (("-p", run.prompt), ("-n", run.gen), ("-d", run.depth))}
    if any(len(v) > 1 for v in lists.values()) or (run.threads and "," in run.threads):
        raise BadInputError("--vs-bench measures one turn: give one -p, -n, -d and -t")
    request = GapRequest(
        server=server,
        model=run.model,
        prompt=lists["-p"][0],
        gen=lists["-n"][0],
        depth=lists["-d"][0],
        reps=run.reps or 3,
        threads=int_list(run.threads, "-t", low=1)[0] if run.threads else None,
        facts=run.facts,
        repack=run.repack,
        llama_bench=run.engine,
        timeout_s=run.timeout_s,
    )
    say = (lambda text: None) if as_json else (lambda text: click.echo(text, err=True))
    outcome = run_gap(request, model_source(), say)
    result = outcome.gap.to_dict()
    show(as_json, lambda r: r, gap_text, result)
    save_run(db, no_save, lambda: record("gap", outcome.spec, outcome.facts, [], gap_record(result)))
    if plot is not None:
        from ggprof.report.plots import plot_gap

        draw(lambda p: plot_gap(result, p), plot)
    return 0

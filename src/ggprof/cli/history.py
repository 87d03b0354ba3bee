"""Commands about runs kept: history, compare, report, plot; and the saving of each run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ggprof import __version__
from ggprof.cli.base import (
    check_plot,
    cli,
    emit_json,
    invocation,
)
from ggprof.units import warn

if TYPE_CHECKING:
    from ggprof.history.store import RunRecord
    from ggprof.machine.facts import HostFacts
    from ggprof.model.spec import ModelSpec


RUN_ID = click.IntRange(1, 2**63 - 1)  # SQLite's integer row ids

db_option = click.option(
    "--db", "db", type=click.Path(dir_okay=False), help="History database [default: GGPROF_DB]."
)  # the one declaration of --db, for the commands that save runs and those that read them


def db_options(f: Any) -> Any:
    """--db and --no-save, for the commands that save what they measured."""
    f = click.option("--no-save", is_flag=True, help="Do not keep this run in the history.")(f)
    return db_option(f)


def db_path(db: str | None) -> Path:
    from ggprof.history.store import default_path

    return Path(db) if db else default_path()


def record(kind: str, spec: ModelSpec, facts: HostFacts, devices: list[str], result: dict[str, Any]) -> RunRecord:
    """What a run keeps (ggprof.history.store.RunRecord), with this command's arguments."""
    from ggprof.history.store import RunRecord

    return RunRecord.new(kind, spec, facts, devices, result, command=invocation, version=__version__)


def save_run(db: str | None, no_save: bool, make: Callable[[], RunRecord]) -> None:
    """Keep the run (`make` builds its record, which hashes the model's header: only when it is
    kept); a database that cannot be written is a warning, never a lost result."""
    if no_save:
        return
    rec = make()
    from ggprof.errors import GGProfError
    from ggprof.history.store import save

    path = db_path(db)
    try:
        run_id = save(path, rec)
    except (GGProfError, OSError) as e:
        warn(f"the run was not saved to the history: {e}")
        return
    click.echo(f"saved as run {run_id} in {path}", err=True)


@cli.command()
@click.option("--model", help="A model name (part of it) or model key.")
@click.option("--host", help="A host fingerprint (its start).")
@click.option("--since", metavar="DATE", help="Runs from this day on (YYYY-MM-DD).")
@click.option(
    "--fact",
    "facts",
    metavar="NAME=VALUE",
    multiple=True,
    help="Runs with this setting: a run fact's name or llama.cpp flag, and a value (n_ubatch=256, -fa=on).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.option("--format", "fmt", type=click.Choice(["text", "csv", "jsonl"]), default="text", show_default=True)
@click.option(
    "--limit",
    type=click.IntRange(0, 10**9),
    default=1000,
    show_default=True,
    help="Show at most this many runs, the newest (0: all of them).",
)
@db_option
def history(
    model: str | None,
    host: str | None,
    since: str | None,
    facts: tuple[str, ...],
    as_json: bool,
    fmt: str,
    limit: int,
    db: str | None,
) -> None:
    """List the runs kept: when, model, device, pp and tg tok/s with their spread, share of the ceiling, verdict."""
    from ggprof.errors import BadInputError
    from ggprof.history.settings import wanted
    from ggprof.history.store import runs
    from ggprof.report.history import history_csv, history_rows, history_text

    if since is not None and not (
        len(since) == 10 and since[4] == since[7] == "-" and since.replace("-", "").isdigit()
    ):
        raise BadInputError(f"--since {since!r}: give a day as YYYY-MM-DD")
    chosen = tuple(wanted(f) for f in facts)
    listing = runs(db_path(db), model=model, host=host, since=since, limit=limit or None, facts=chosen)
    for damaged in listing.skipped:
        warn(f"run {damaged}: skipped")
    if limit and listing.total > limit:
        warn(f"showing the newest {limit:,} of {listing.total:,} runs (--limit 0 shows all)")
    found = listing.runs
    rows = history_rows(found)
    if as_json:
        emit_json(rows)
    elif fmt == "jsonl":
        for r in rows:
            click.echo(json.dumps(r, allow_nan=False))
    elif fmt == "csv":
        click.echo(history_csv(rows), nl=False)
    else:
        click.echo(history_text(found))


def _side(ref: str, db: str | None) -> tuple[str, list[dict[str, Any]]]:
    """A compared side: a run id in the history, or a file of llama-bench or ggprof JSON."""
    from ggprof.bench.llamabench import MAX_RESULTS_BYTES
    from ggprof.errors import BadInputError
    from ggprof.files import read_text
    from ggprof.history.store import get, rows_of

    if ref.isdigit() and len(ref) < 18:
        return f"run {ref}", get(db_path(db), int(ref)).record.rows
    text = read_text(ref, MAX_RESULTS_BYTES)
    try:
        try:
            data: Any = json.loads(text)
        except ValueError:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (ValueError, RecursionError):
        raise BadInputError(f"{ref}: neither a run id nor llama-bench / ggprof JSON") from None
    if isinstance(data, dict):
        data = rows_of(data) or [data]
    rows = [r for r in data if isinstance(r, dict) and "avg_ts" in r]  # each checked by compare
    if not rows:
        raise BadInputError(f"{ref}: no llama-bench rows (objects with avg_ts)")
    return ref, rows


@cli.command()
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@db_option
def compare(a: str, b: str, as_json: bool, db: str | None) -> None:
    """Compare two runs test by test (run ids, or files of llama-bench -o json/jsonl or ggprof JSON)."""
    from ggprof.history.compare import compare as run_compare
    from ggprof.report.history import compare_dict, compare_text

    a_label, a_rows = _side(a, db)
    b_label, b_rows = _side(b, db)
    result = run_compare(a_label, a_rows, b_label, b_rows)
    if as_json:
        emit_json(compare_dict(result))
    else:
        click.echo(compare_text(result))


@cli.command()
@click.argument("run_id", metavar="[RUN]", required=False, type=RUN_ID)
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@db_option
def report(run_id: int | None, fmt: str, db: str | None) -> None:
    """A block to paste into a llama.cpp, Ollama or LM Studio issue (default: the latest run)."""
    from ggprof.history.store import get
    from ggprof.report.triage import triage_dict, triage_markdown

    run = get(db_path(db), run_id)
    if fmt == "json":
        emit_json(triage_dict(run))
    else:
        click.echo(triage_markdown(run))


@cli.command()
@click.argument("run_id", metavar="[RUN]", required=False, type=RUN_ID)
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), required=True, help="FILE.png or FILE.svg")
@db_option
def plot(run_id: int | None, output: str, db: str | None) -> None:
    """The roofline of a kept profile run (default: the latest): bandwidth slope, compute roof,
    ridge, predicted and measured prefill and decode, and decode tok/s against depth; of a
    `profile --vs-bench` run, its waterfall from llama-bench to the server."""
    from ggprof.errors import BadInputError
    from ggprof.history.store import get
    from ggprof.report.plots import plot_roofline

    target = check_plot(output, "`ggprof plot`")
    assert target is not None
    run = get(db_path(db), run_id)
    if run.kind == "gap" and isinstance(gap := run.record.result.get("gap"), dict):
        from ggprof.report.plots import plot_gap

        try:
            click.echo(f"plot: {plot_gap(gap, target)}", err=True)
        except OSError as e:
            raise BadInputError(f"{output}: the plot was not written ({e.strerror or e})") from None
        return
    if run.kind != "profile":
        raise BadInputError(f"run {run.id} is a {run.kind} run: a roofline needs a profile (with its prediction)")
    try:
        click.echo(f"plot: {plot_roofline(run.record.result, target)}", err=True)
    except OSError as e:  # drawing is this command's job: not written is an error (exit 2), not a warning
        raise BadInputError(f"{output}: the plot was not written ({e.strerror or e})") from None

"""Commands about this machine and others: host, profiles."""

from __future__ import annotations

import click

from ggprof.cli.base import cli, extensions, show
from ggprof.units import warn


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quick", is_flag=True, help="A ~2 s measurement (smaller arrays, fewer repetitions).")
@click.option("--refresh", is_flag=True, help="Measure again even if a cached measurement exists.")
@click.option("--no-measure", is_flag=True, help="Measure nothing; show a cached measurement if any.")
@click.option(
    "--rpc",
    "rpc",
    metavar="HOST:PORT,...",
    help="Instead: reach these llama.cpp rpc-servers and measure each link (round trip, throughput).",
)
def host(as_json: bool, quick: bool, refresh: bool, no_measure: bool, rpc: str | None) -> None:
    """Detect this machine's devices and measure its memory bandwidth and FLOP/s (or, with
    --rpc, the rpc-servers' devices and the links to them)."""
    from ggprof.machine.host import describe_host
    from ggprof.report.host import host_dict, host_text

    if refresh and no_measure:
        raise click.UsageError("--refresh and --no-measure contradict each other")
    if rpc is not None:
        from ggprof.machine.rpc import parse_endpoints
        from ggprof.pipelines.rpc import probe_servers
        from ggprof.report.rpc import servers_dict, servers_text

        endpoints = parse_endpoints(rpc)
        if not as_json:
            click.echo("measuring the links through llama.cpp's RPC client...", err=True)
        servers = list(probe_servers(endpoints, measure=not no_measure))
        show(as_json, servers_dict, servers_text, servers)
        return
    if not no_measure and not as_json:
        click.echo("measuring memory bandwidth...", err=True)
    ext = extensions()
    report = describe_host(ext.backends.values(), ext.profiles, measure=not no_measure, quick=quick, refresh=refresh)
    for w in report.warnings:
        warn(w)
    show(as_json, host_dict, host_text, report)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def profiles(as_json: bool) -> None:
    """List the hardware profiles (built-in, from plugins, and your own)."""
    from ggprof.report.host import profile_dict, profiles_text

    found = sorted(extensions().profiles.all().values(), key=lambda p: (p.kind, p.id))
    show(as_json, lambda ps: [profile_dict(p) for p in ps], profiles_text, found)

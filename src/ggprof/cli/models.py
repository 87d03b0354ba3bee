"""Commands about models and plugins: inspect, predict, fit, plan, synth, plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ggprof.cli.base import (
    check_plot,
    cli,
    context_tokens,
    draw,
    emit_json,
    extensions,
    load_model_arg,
    show,
)
from ggprof.cli.cpu_option import cpu_option
from ggprof.cli.fit_option import fit_asked, fit_options, refuse_fit_beside_placement
from ggprof.cli.options import (
    GB,
    POSITIVE_TOKENS,
    TOK_S,
    TOKENS,
    bandwidth_figure,
    device_options,
    fact_option,
    finite_in,
    placement_options,
    remote_header_bytes,
    remote_header_timeout,
    remote_options,
    rpc_options,
)
from ggprof.cli.spill_option import spill_option
from ggprof.llamacpp import N_CTX, N_GEN, N_PROMPT
from ggprof.units import warn

if TYPE_CHECKING:
    from ggprof.figures import Figure
    from ggprof.machine.target import DeviceChoice
    from ggprof.physics.rpc import Member
    from ggprof.pipelines.placements import RankBy
    from ggprof.pipelines.rpc import RpcChoice


@cli.command()
@click.argument("model", metavar="MODEL.gguf")
@remote_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def inspect(model: str, as_json: bool) -> None:
    """Read a GGUF model's header: size, architecture, bytes a token reads."""
    from ggprof.report.inspect import inspect_dict, inspect_text

    spec = load_model_arg(model)
    show(as_json, inspect_dict, inspect_text, spec)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def plugins(as_json: bool) -> None:
    """List loaded plugins and the hooks each implements."""
    from dataclasses import asdict

    from ggprof.plugins import backends, engines, plugin_infos
    from ggprof.units import clean_name

    infos = plugin_infos()
    if as_json:
        emit_json([asdict(i) | {"hooks": list(i.hooks)} for i in infos])
        return
    names = sorted(backends())
    for info in infos:
        origin = "built-in" if info.builtin else f"{info.distribution} {info.version or ''}".strip()
        status = f"FAILED: {info.error}" if info.error else ", ".join(info.hooks)
        click.echo(f"{clean_name(info.name, 40):<14} {clean_name(origin, 40):<22} {clean_name(status, 300)}")
    click.echo(f"backends: {clean_name(', '.join(names) or 'none', 300)}")
    for name, factory in sorted(engines().items()):
        summary = getattr(factory, "summary", "") or ""
        click.echo(f"engine {clean_name(name, 30)}: {clean_name(summary, 200)}")


@cli.command()
@click.argument("model", metavar="MODEL.gguf")
@remote_options
@device_options
@click.option("--depth", type=TOKENS, default=0, show_default=True, help="Tokens already in the KV cache.")
@click.option("--prompt", type=TOKENS, default=N_PROMPT, show_default=True, help="Prompt tokens (prefill).")
@click.option("--gen", type=TOKENS, default=N_GEN, show_default=True, help="Generated tokens.")
@click.option(
    "--ctx",
    type=POSITIVE_TOKENS,
    help=f"Context to allocate [default: {N_CTX}, or the model's, or depth+prompt+gen if larger].",
)
@click.option(
    "--batch", type=click.IntRange(1, 1 << 20), default=1, show_default=True, help="Sequences decoded together."
)
@fact_option("type_k", param="cache_type_k")
@fact_option("type_v", param="cache_type_v")
@fact_option("n_gpu_layers", default=None, help="Layers offloaded (-1 or more than the model has: all).")
@placement_options
@fit_options
@click.option(
    "--ram-bandwidth",
    metavar="BW",
    callback=bandwidth_figure,
    help="Bandwidth of the RAM beside the GPU, holding what -ngl, -ncmoe or -ot keep there: 80 (GB/s) "
    "[default: this host's measured].",
)
@cpu_option(
    "The CPU beside the GPU ('Ryzen 9 9950X', 'EPYC 9654'): without --ram-bandwidth, its platform's channels "
    "and rates bound the RAM (a band from its slowest to its fastest)."
)
@spill_option
@rpc_options
@click.option("--plot", type=click.Path(dir_okay=False), help="Draw the roofline (.png or .svg).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def predict(
    model: str,
    choice: DeviceChoice,
    rpc: RpcChoice,
    depth: int,
    prompt: int,
    gen: int,
    ctx: int | None,
    batch: int,
    cache_type_k: str,
    cache_type_v: str,
    n_gpu_layers: int | None,
    placement: tuple[tuple[str, Any], ...],
    fit: str | None,
    fit_target: int | None,
    fit_min_ctx: int | None,
    ram_bandwidth: Figure | None,
    cpu_name: str | None,
    spill: str | None,
    plot: str | None,
    as_json: bool,
) -> None:
    """Predict decode and prefill ceilings, latency and memory fit for a model on a device
    (or split over machines with llama.cpp's RPC: --rpc-device, --rpc)."""
    from ggprof.physics.roofline import PredictInputs
    from ggprof.pipelines.predict import predict_on
    from ggprof.report.predict import predict_dict, predict_text

    spec = load_model_arg(model)
    inputs = PredictInputs(
        depth=depth,
        prompt=prompt,
        gen=gen,
        ctx=context_tokens(spec, ctx, depth, prompt, gen),
        batch=batch,
        cache_type_k=cache_type_k.lower(),
        cache_type_v=cache_type_v.lower(),
        n_gpu_layers=n_gpu_layers,
        **dict(placement),
    )
    plot_path = check_plot(plot)
    from ggprof.machine.platforms import given_ram

    ram = given_ram(ram_bandwidth, cpu_name)
    asked = fit_asked(fit, fit_target, fit_min_ctx, ctx is not None)
    refuse_fit_beside_placement(asked, n_gpu_layers, placement, rpc.active)
    result, target = predict_on(spec, inputs, choice, extensions(), rpc, ram=ram, fit=asked, spill=spill)
    for w in result.warnings:
        warn(w)
    show(as_json, predict_dict, predict_text, spec, result, target.description)
    if plot_path is not None:
        from ggprof.report.plots import plot_roofline

        draw(lambda p: plot_roofline(predict_dict(spec, result, target.description), p), plot_path)


@cli.command()
@click.argument("paths", metavar="[PATH]...", nargs=-1)
@remote_options
@click.option("--ctx", type=POSITIVE_TOKENS, default=N_CTX, show_default=True, help="Context the models must hold.")
@device_options
@click.option("--memory", "--ram", "memory_gb", type=float, callback=GB, help="Memory of the device (RAM), GB.")
@click.option("--gpu-memory", "gpu_memory_gb", type=float, callback=GB, help="Memory of the GPU (VRAM), GB.")
@click.option(
    "--ram-bandwidth",
    metavar="BW",
    callback=bandwidth_figure,
    help="Bandwidth of the RAM holding what a GPU does not: 80 (GB/s) [default: this host's measured].",
)
@cpu_option(
    "The CPU of the machine the GPU sits in ('Ryzen 9 9950X', 'EPYC 9654'): without --ram-bandwidth, its "
    "platform's channels and rates bound the RAM (each speed a band from its slowest to its fastest)."
)
@fact_option("type_k", param="cache_type_k")
@fact_option("type_v", param="cache_type_v")
@click.option(
    "--rank-by",
    type=click.Choice(["tg", "pp"]),
    default="tg",
    show_default=True,
    help="Rank a model's placements by expected decode (tg) or prefill (pp).",
)
@click.option(
    "--min-tok-s",
    "--min-tg",
    "min_tok_s",
    type=float,
    callback=TOK_S,
    default=10.0,
    show_default=True,
    help="Decode speed the pick must reach.",
)
@rpc_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def fit(
    paths: tuple[str, ...],
    ctx: int,
    choice: DeviceChoice,
    rpc: RpcChoice,
    memory_gb: float | None,
    gpu_memory_gb: float | None,
    ram_bandwidth: Figure | None,
    cpu_name: str | None,
    cache_type_k: str,
    cache_type_v: str,
    rank_by: RankBy,
    min_tok_s: float,
    as_json: bool,
) -> None:
    """Which models run well here? Rank GGUF files (or, with no PATH, the models of Ollama,
    LM Studio, the Hugging Face cache and llama.cpp's cache) by expected decode speed; on a GPU,
    each model's placements that fit (llama.cpp's flags), fastest first."""
    from pathlib import Path

    from ggprof.errors import BadInputError, NoBandwidthError
    from ggprof.machine.host import describe_host
    from ggprof.machine.platforms import with_platform_ram
    from ggprof.machine.target import resolve_target, with_memories
    from ggprof.model.stores import Candidate, default_locations, is_remote
    from ggprof.pipelines.choose import RAM_BANDWIDTH_UNKNOWN, ChooseOptions, choose_models, scan
    from ggprof.report.choose import choose_dict, choose_text

    ext = extensions()
    listed = []  # models elsewhere, listed first: a network failure ends the command before any measurement
    for ref in (p for p in paths if is_remote(p)):
        from ggprof.model.hub import models_of

        listed += models_of(ref, remote_header_timeout())
    host = describe_host(ext.backends.values(), ext.profiles, measure=False)
    if choice.needs_host and host.context.bandwidth is None and host.context.refused_bandwidth is None:
        # the first time: what `fit` needs is measured, as `profile` measures it, and kept
        click.echo("measuring this host's memory bandwidth (once: it is kept for the next commands)...", err=True)
        host = describe_host(ext.backends.values(), ext.profiles, measure=True, quick=True, facts=host.facts)
        for w in host.warnings:
            warn(w)
    target = resolve_target(choice, profiles=ext.profiles, host=host)
    ram, vram = (int(gb * 1e9) if gb else None for gb in (memory_gb, gpu_memory_gb))
    target = with_memories(target, ram, vram, ram_bandwidth)
    if cpu_name is not None and not target.device.is_discrete_gpu:
        raise click.UsageError(
            "--cpu names the RAM beside a GPU (--device GPU); a CPU alone is --device PROFILE (ddr5-6000-dual) "
            "or --bandwidth BW"
        )
    if cpu_name is not None and ram_bandwidth is None:  # another machine's CPU: its platform's RAM, not this host's
        target = with_platform_ram(target, cpu_name)
    locations = [] if paths else default_locations()
    found = scan([Path(p) for p in paths if not is_remote(p)], locations)
    for m in listed:  # models elsewhere: their headers by range requests
        name = m.name.rsplit("/", 1)[-1]  # the file's name: the row's; the reference: its path
        found.candidates.append(Candidate(path=Path(m.name), name=name, store="remote", remote=m))
    remote: tuple[Member, ...] = ()
    if rpc.active:  # a model that does not fit the device alone is considered split over these
        from ggprof.pipelines.rpc import probe_servers, split_members

        remote = split_members(rpc, probe_servers(rpc.endpoints), ext.profiles, host.cpu)
    options = ChooseOptions(
        ctx=ctx,
        min_tok_s=min_tok_s,
        remote=remote,
        max_header_bytes=remote_header_bytes(),
        header_timeout_s=remote_header_timeout(),
        cache_type_k=cache_type_k,
        cache_type_v=cache_type_v,
        rank_by=rank_by,
    )
    report = choose_models(found, target, options, ext, scanned=locations)
    for w in dict.fromkeys(w for m in report.models for w in m.prediction.warnings):
        warn(w)
    if not report.models and report.skipped and all(s.reason == RAM_BANDWIDTH_UNKNOWN for s in report.skipped):
        raise NoBandwidthError(RAM_BANDWIDTH_UNKNOWN)  # not the files' fault: a figure is missing
    if not report.models:
        where = ", ".join(paths) if paths else ", ".join(f"{loc.store} {loc.path}" for loc in locations)
        first = f"; {report.skipped[0].path}: {report.skipped[0].reason}" if report.skipped else ""
        raise BadInputError(f"no readable GGUF model in {where}{first}")
    show(as_json, choose_dict, choose_text, report)


@cli.command()
@click.argument("model", metavar="MODEL.gguf")
@remote_options
@click.option(
    "--qps", type=float, callback=finite_in(1e-6, 1e6), required=True, help="Requests per second (above 1e-6)."
)
@click.option("--prompt", type=POSITIVE_TOKENS, required=True, help="Prompt tokens per request.")
@click.option("--gen", type=POSITIVE_TOKENS, required=True, help="Generated tokens per request.")
@click.option(
    "--tpot-slo",
    "tpot_slo_ms",
    metavar="MS",
    type=float,
    callback=finite_in(0, 1e6),
    required=True,
    help="Time per output token each user must get, ms.",
)
@click.option(
    "--ttft-slo", "ttft_slo_ms", metavar="MS", type=float, callback=finite_in(0, 1e7), help="Time to first token, ms."
)
@click.option("--ctx", type=POSITIVE_TOKENS, help="Context each sequence holds [default: prompt + gen].")
@device_options
@click.option("--memory", "memory_gb", type=float, callback=GB, help="The device's memory, GB (overrides its own).")
@rpc_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def plan(
    model: str,
    qps: float,
    prompt: int,
    gen: int,
    tpot_slo_ms: float,
    ttft_slo_ms: float | None,
    ctx: int | None,
    choice: DeviceChoice,
    memory_gb: float | None,
    rpc: RpcChoice,
    as_json: bool,
) -> None:
    """How many devices serve QPS requests/s within the TPOT SLO? Little's law, memory,
    bandwidth, each step with its figures; with --rpc-device, a model one device cannot
    hold is split over the listed machines."""
    from ggprof.physics.serving import PlanInputs
    from ggprof.pipelines.plan import plan_on
    from ggprof.report.plan import plan_dict, plan_text

    ext = extensions()
    spec = load_model_arg(model)
    if ctx is not None:
        context_tokens(spec, ctx, 0, prompt, gen)  # a context that holds a request, as predict asks
    inputs = PlanInputs(qps=qps, prompt=prompt, gen=gen, tpot_slo_ms=tpot_slo_ms, ttft_slo_ms=ttft_slo_ms, ctx=ctx)
    memory = int(memory_gb * 1e9) if memory_gb is not None else None
    result = plan_on(spec, inputs, choice, ext, rpc=rpc, memory_bytes=memory)
    show(as_json, plan_dict, plan_text, spec, result.plan, result.description, result.alone)


@cli.command()
@click.option("--shape", default="small", show_default=True, help="A shape from --list.")
@click.option("--quant", type=click.Choice(["q4_0", "q8_0", "f16"]), default="q4_0", show_default=True)
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), help="Write here instead of the cache.")
@click.option("--list", "list_shapes", is_flag=True, help="List the shapes with their sizes.")
@click.option("--json", "as_json", is_flag=True, help="With --list: a JSON list; else the written file as JSON.")
def synth(shape: str, quant: str, output: str | None, list_shapes: bool, as_json: bool) -> None:
    """Write a synthetic GGUF model (random weights, a real shape llama.cpp runs)."""
    from pathlib import Path

    from ggprof.model import synth as synth_mod
    from ggprof.units import fmt_bytes

    if list_shapes:
        rows = [
            {
                "shape": s.name,
                "description": s.description,
                "n_params": s.n_params,
                **{f"size_bytes_{q}": s.size_bytes(q) for q in synth_mod.QUANTS},
            }
            for s in synth_mod.SHAPES.values()
        ]
        if as_json:
            emit_json(rows)
            return
        click.echo(f"{'shape':<11} {'params':>7} {'q4_0':>9} {'q8_0':>9} {'f16':>9}  description")
        for s in synth_mod.SHAPES.values():
            sizes = " ".join(f"{fmt_bytes(s.size_bytes(q), binary=False):>9}" for q in synth_mod.QUANTS)
            click.echo(f"{s.name:<11} {s.n_params / 1e6:6.0f}M {sizes}  {s.description}")
        click.echo("sizes in GB/MB (1e9/1e6 bytes)")
        return
    spec_shape = synth_mod.get_shape(shape)
    if output is None:
        path = synth_mod.ensure_model(shape, quant)
    else:
        path = synth_mod.write_model(spec_shape, quant, Path(output))
    if as_json:
        emit_json({"path": str(path), "shape": shape, "quant": quant, "file_size_bytes": path.stat().st_size})
    else:
        click.echo(f"{path}  ({shape}, {quant}, {fmt_bytes(path.stat().st_size)})")

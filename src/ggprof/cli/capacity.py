"""Commands about serving: plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ggprof.cli.base import (
    GB,
    POSITIVE_TOKENS,
    cli,
    context_tokens,
    device_options,
    extensions,
    finite_in,
    load_model_arg,
    rpc_options,
    show,
)

if TYPE_CHECKING:
    from ggprof.machine.target import DeviceChoice
    from ggprof.pipelines.rpc import RpcChoice


@cli.command()
@click.argument("model", metavar="MODEL.gguf")
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

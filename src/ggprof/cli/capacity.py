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
    show,
)

if TYPE_CHECKING:
    from ggprof.machine.target import DeviceChoice


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
    as_json: bool,
) -> None:
    """How many devices serve QPS requests/s within the TPOT SLO? Little's law, memory,
    bandwidth, each step with its figures."""
    from dataclasses import replace

    from ggprof.machine.device import with_memory
    from ggprof.machine.host import describe_host
    from ggprof.machine.target import resolve_target
    from ggprof.physics.serving import PlanInputs
    from ggprof.physics.serving import plan as make_plan
    from ggprof.report.plan import plan_dict, plan_text

    ext = extensions()
    spec = load_model_arg(model)
    if ctx is not None:
        context_tokens(spec, ctx, 0, prompt, gen)  # a context that holds a request, as predict asks
    host = describe_host(ext.backends.values(), ext.profiles, measure=False) if choice.needs_host else None
    target = resolve_target(choice, profiles=ext.profiles, host=host)
    if memory_gb is not None:
        target = replace(target, device=with_memory(target.device, int(memory_gb * 1e9), "--memory"))
    inputs = PlanInputs(qps=qps, prompt=prompt, gen=gen, tpot_slo_ms=tpot_slo_ms, ttft_slo_ms=ttft_slo_ms, ctx=ctx)
    result = make_plan(spec, target.device, inputs)
    show(as_json, plan_dict, plan_text, spec, result, target.description)

"""`ggprof plan`: how many devices serve a load, on one kind of device or, when one does not
suffice, split over the machines `--rpc`/`--rpc-device` list (llama.cpp's RPC)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ggprof.errors import BadInputError
from ggprof.machine.device import with_memory
from ggprof.machine.host import describe_host
from ggprof.machine.target import DeviceChoice, resolve_target
from ggprof.model.spec import ModelSpec
from ggprof.physics.serving import Plan, PlanInputs, plan, split_shards
from ggprof.pipelines.extensions import Extensions
from ggprof.pipelines.rpc import RpcChoice, split_setup


@dataclass(frozen=True, kw_only=True)
class PlanResult:
    plan: Plan
    description: str  # the device (or the split) in words
    alone: str | None = None  # with a split: why one device did not suffice


def plan_on(
    spec: ModelSpec,
    inputs: PlanInputs,
    choice: DeviceChoice,
    ext: Extensions,
    *,
    rpc: RpcChoice,
    memory_bytes: int | None,
) -> PlanResult:
    """The plan on the chosen device; with `rpc`, when that device cannot hold one copy of the
    model (or cannot meet the TPOT SLO even at batch 1, or lacks a figure to plan with), the
    plan over the split instead."""
    host = describe_host(ext.backends.values(), ext.profiles, measure=False) if choice.needs_host else None
    target = resolve_target(choice, profiles=ext.profiles, host=host)
    if memory_bytes is not None:
        target = replace(target, device=with_memory(target.device, memory_bytes, "--memory"))
    try:
        alone = plan(spec, target.device, inputs)
    except BadInputError as e:  # an SLO below its floor, no room for a sequence, no figures
        if not rpc.active:
            raise
        why = str(e)
    else:
        if not rpc.active or alone.group_size == 1:
            return PlanResult(plan=alone, description=target.description)
        why = f"one copy of the model needs {alone.group_size} x {target.device.name}"
    setup = split_setup(choice, ext, rpc)
    shards, wires = split_shards(spec, setup.chain(), inputs, tensor_split=rpc.tensor_split)
    split = plan(spec, setup.host_cpu, inputs, shards, wires)
    return PlanResult(plan=split, description=setup.description, alone=why)

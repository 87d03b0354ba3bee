"""What a pasted log's command line says of a run beyond its speeds: where it put the weights
the GPU does not hold (-ncmoe, -cmoe, -ot ...=CPU, -nkvo) and how it drafted (--spec-type,
--spec-draft-n-max, -md, with the log's own acceptance counts), read through the run-fact table."""

from __future__ import annotations

from dataclasses import replace

from ggprof.errors import GGProfError
from ggprof.logs.records import LogRun, Speed
from ggprof.model.spec import ModelSpec
from ggprof.physics.speculative import Drafting, DraftPlacement, acceptance_from, drafting_for
from ggprof.runfacts import BY_NAME as RUN_FACTS
from ggprof.runfacts import DRAFTING, MAX_COUNT, MULTI_DEVICE, PLACEMENT


def placed_in_ram(run: LogRun, speed: Speed | None = None) -> tuple[tuple[str, object], ...]:
    """The placement facts that put something in RAM (none: ()): the run's command line's, and a
    llama-bench row's own columns over them (`speed`; without one, any row's)."""
    in_ram = [n for n in PLACEMENT if n != "n_gpu_layers" and n not in MULTI_DEVICE]
    rows = [speed] if speed is not None else run.speeds
    given = dict(run.value("command_facts") or ())
    for row in rows:
        given |= {n: v for n, v in row.facts if n in in_ram and (v or speed is not None)}
    placed = tuple((n, given[n]) for n in in_ram if given.get(n))
    if not any(n != "tensor_buft_overrides" or any(b.upper().startswith("CPU") for _, b in v) for n, v in placed):
        return ()  # nothing put in RAM (an -ot to a GPU's buffer alone): a GPU's run, judged as one
    return placed


def drafting_of(run: LogRun, spec: ModelSpec | None) -> Drafting | None:
    """How a log's run drafted: its command line's --spec-type, --spec-draft-n-max (or older
    --draft-max) and -md, and what its `draft acceptance` lines counted, with each request's
    decoded tokens (steps = decoded - accepted, as llama-server's timings count them) and its
    `acc per pos` lines (the acceptance per draft position; as many positions as its n-max).
    None: it did not draft, or did not say how."""
    if spec is None or run.facts.get("speculative") is None:
        return None
    given = {n: v for n, v in run.value("command_facts") or () if n in DRAFTING}
    kind = given.get("spec_type") or ("draft-simple" if "model_draft" in given else None)
    if kind is None:
        return None
    kept, drafted, decoded = run.value("draft_counts") or (0, 0, 0)
    counted = run.facts.get("draft_counts")
    said = [
        f"the log's draft acceptance lines: {kept:,} of {drafted:,} drafted tokens accepted over {decoded:,} "
        f"decoded (line {counted.line})"
    ] if counted else []  # fmt: skip
    per_position = per_position_of(run)
    if per_position:
        listed = ", ".join(f"{p:.0%}" for p in per_position)
        said.append(f"kept per draft position {listed} (line {run.facts['draft_per_position'].line})")
    n_max = given.get("spec_draft_n_max") or (len(per_position) or None)
    try:
        drafting = drafting_for(
            spec,
            kind,
            n_max,
            None,
            acceptance_from(kept, drafted),
            "; ".join(said),
            draft_unread=True,
            draft_placement=DraftPlacement.of(given),
        )
    except GGProfError:
        return None
    if drafting is None:
        return None
    drafting = replace(drafting, acceptance_per_position=per_position)
    steps = decoded - kept
    if not counted or steps <= 0:
        return drafting
    return replace(drafting, drafted_per_step=drafted / steps, tokens_per_step=decoded / steps)


def per_position_of(run: LogRun) -> tuple[float, ...]:
    """A log's acceptance per draft position over all its requests (each weighted by its verify
    steps), as llama-server prints it: the share of verify steps that kept each position."""
    sums, steps = run.value("draft_per_position") or ((), 0.0)
    return tuple(x / steps for x in sums) if steps > 0 else ()


def named(placed: tuple[tuple[str, object], ...]) -> str:
    """What a command line keeps in RAM, in llama.cpp's words: `the experts of -ncmoe 4`."""

    def named(n: str, v: object) -> str:
        if n == "n_cpu_moe":
            return "every layer's experts (-cmoe)" if v == MAX_COUNT else f"the experts of -ncmoe {v}"
        if n == "no_kv_offload":
            return "the KV cache (-nkvo)"
        if n == "tensor_buft_overrides" and isinstance(v, tuple) and len(v) > 2:  # --fit's one per layer
            return f"what -ot's {len(v)} patterns put in a CPU buffer ({v[0][0]}=CPU, ...)"
        return f"what {RUN_FACTS[n].spelled(v)} puts there"

    return " and ".join(named(n, v) for n, v in placed)

"""A llama-server's effective settings, read into the run-fact table (ggprof.runfacts): what
/props states (its slots, their context, the sampler chain and its parameters, how it drafts),
what /slots states (each slot's context), and for a server on this machine what its command
line sets (threads and prompt threads, batches, flash attention, KV types, offload and
placement, context, slots, the prompt cache). /props wins where both say: it states what the
server made of its command line (`-np -1` is 4 slots). A fact none of them states is
llama.cpp's default, and is said to be."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ggprof.engines.server.apis import Server
from ggprof.engines.server.client import Client, ServerError
from ggprof.engines.server.process import command_line_of
from ggprof.runfacts import BY_NAME, FACTS, facts_from_argv, from_props

PROPS, SLOTS, COMMAND_LINE = "/props", "/slots", "its command line"


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    facts: dict[str, Any]  # every fact known, by the table's name
    sources: dict[str, str]  # where each was read: PROPS, SLOTS, COMMAND_LINE
    command_line: tuple[str, ...] | None = None  # the process's argv, where it could be seen
    program: Path | None = None  # its executable
    build: str | None = None
    model_path: str | None = None
    slots_busy: int | None = None  # slots processing a request when read
    notes: tuple[str, ...] = field(default=())

    def bench(self) -> dict[str, Any]:
        """The facts llama-bench takes, as the server has them (those it states)."""
        return {n: v for n, v in self.facts.items() if BY_NAME[n].bench}

    @property
    def slots(self) -> int:
        """Its slots (llama.cpp's auto, 4, where nothing says)."""
        n = self.facts.get("n_slots")
        return n if isinstance(n, int) and n > 0 else 4


def read_settings(server: Server, client: Client) -> ServerSettings:
    """The settings of the llama-server behind `client`; ServerError where /props does not answer."""
    props = client.get_json(PROPS, timeout_s=10.0)
    if not isinstance(props, dict):
        raise ServerError(f"{server.title()}: /props answered something other than an object")
    facts = from_props(props)
    sources = dict.fromkeys(facts, PROPS)
    notes: list[str] = []
    busy, slots = None, None
    try:
        slots = client.get_json(SLOTS, timeout_s=10.0)
    except ServerError:
        notes.append("/slots did not answer (--no-slots?): each slot's context from /props")
    if isinstance(slots, list) and slots and all(isinstance(s, dict) for s in slots):
        sizes = {s.get("n_ctx") for s in slots}
        n_ctx = BY_NAME["n_ctx_slot"].read(sizes.pop()) if len(sizes) == 1 else None
        if n_ctx is not None:
            facts["n_ctx_slot"], sources["n_ctx_slot"] = n_ctx, SLOTS
        facts.setdefault("n_slots", len(slots))
        sources.setdefault("n_slots", SLOTS)
        busy = sum(1 for s in slots if s.get("is_processing") is True)
    seen = command_line_of(server.endpoint) if server.endpoint.is_local else None
    argv, program = (seen[0], seen[1]) if seen else (None, None)
    if argv:
        for name, value in facts_from_argv(argv, [f.name for f in FACTS]):
            if name not in facts:
                facts[name], sources[name] = value, COMMAND_LINE
    elif server.endpoint.is_local:
        notes.append("its process could not be seen (another user's, or a container's): its command line is unknown")
    path = props.get("model_path")
    build = props.get("build_info")
    return ServerSettings(
        facts=facts,
        sources=sources,
        command_line=tuple(argv) if argv else None,
        program=program,
        build=build if isinstance(build, str) else None,
        model_path=path if isinstance(path, str) else None,
        slots_busy=busy,
        notes=tuple(notes),
    )

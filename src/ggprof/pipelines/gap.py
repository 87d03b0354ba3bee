"""`ggprof profile --server URL --vs-bench`: why the server is slower (or faster) than
llama-bench, term by term, each term measured as the difference of two runs or requests.

On the server's machine, with the model file it serves (its /props model path, or MODEL):
- llama-bench as it was run (its defaults, or the flags given) and llama-bench with the
  server's settings (its command line and /props, through the run-fact table) at depth 0 and
  at the depth of the server's turn: `settings` and `depth`;
- the server's own turns at that depth: greedy and answered whole (the work llama-bench
  does), its sampler chain (`sampling`), streamed (`streaming`), the conversation cached as
  the server caches by default (`prompt_cache`, with a conversation before the turn);
- beyond the server's number: what the client saw of the same turns, and every slot busy.
Each repetition runs every one of them once, in an order that turns each time; each rate is
the median of its repetitions. A server elsewhere gets the terms that need no llama-bench.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from ggprof.bench.gap import Gap, Measured, NotMeasured, Term, Waterfall
from ggprof.bench.results import BenchParams
from ggprof.engines import ModelSource
from ggprof.engines.llama_bench import LlamaBenchEngine
from ggprof.engines.llama_bench.run import bench_command, run_rows
from ggprof.engines.server import ServerEngine
from ggprof.engines.server.client import Client
from ggprof.engines.server.process import llama_cpp_default_threads
from ggprof.engines.server.settings import ServerSettings, read_settings
from ggprof.engines.server.turns import TurnKind, TurnResult, Turns
from ggprof.errors import BadInputError
from ggprof.files import is_regular
from ggprof.llamacpp import test_name
from ggprof.machine.facts import HostFacts, gather_facts
from ggprof.model.spec import ModelSpec
from ggprof.runfacts import BENCH, BY_NAME, SAMPLING, command_line
from ggprof.units import clean_name

BASE = TurnKind(greedy=True, stream=False, cached=True)  # the work llama-bench does
CHAIN = TurnKind(greedy=False, stream=False, cached=True)
STREAMED = TurnKind(greedy=False, stream=True, cached=True)
DEFAULT = TurnKind(greedy=False, stream=True, cached=False)  # the conversation as the server caches it
MAX_AT_ONCE = 8  # turns sent together for the `slots` step, at most
OWN_FLAGS = ("n_threads", "repack")  # BenchParams' own spellings of these (the rest go as run facts)


@dataclass(frozen=True, kw_only=True)
class GapRequest:
    server: str  # its URL ("": the usual local ports)
    model: str | None = None
    prompt: int = 512
    gen: int = 128
    depth: int = 0  # the conversation before the turn
    reps: int = 3
    threads: int | None = None  # llama-bench's -t as it was run (None: llama.cpp's default)
    facts: dict[str, Any] = field(default_factory=dict)  # llama-bench's other flags as it was run
    repack: str = "auto"
    llama_bench: str | None = None  # --engine llama-bench[=PATH] (None: beside the server, else PATH)
    timeout_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class GapOutcome:
    gap: Gap
    spec: ModelSpec
    facts: HostFacts


def run_gap(request: GapRequest, source: ModelSource, say: Callable[[str], None]) -> GapOutcome:
    """Measure every term (`say` tells what runs) and add them up."""
    if not request.prompt or not request.gen:
        raise BadInputError("--vs-bench measures a turn's prompt and its decode: -p and -n must both be above 0")
    engine = ServerEngine(request.server or None)
    engine.timeout_s = request.timeout_s
    engine.prepare(request.model)
    server = engine.server()
    if server.kind != "llama-server":
        raise BadInputError(f"--vs-bench needs a llama-server (its /props and per-request samplers): {server.title()}")
    spec = engine.resolve_model(request.model, source)
    client = Client(server.endpoint, engine.read_timeout_s)
    settings = read_settings(server, client)
    p, n, d = request.prompt, request.gen, request.depth
    slot_ctx = settings.facts.get("n_ctx_slot")
    if isinstance(slot_ctx, int) and slot_ctx and d + p + n + 1 > slot_ctx:
        raise BadInputError(
            f"the server's slots hold {slot_ctx:,} tokens: depth + prompt + gen + 1 = {d + p + n + 1:,} does not fit "
            "(give smaller -d, -p or -n)"
        )
    host = gather_facts()
    local = server.endpoint.is_local and is_regular(spec.path)
    plan = _Plan(request, settings, spec, host, _program(request, settings) if local else None)
    turns = Turns(server, client, spec.vocab_size, request.timeout_s or 600.0)
    kinds = [BASE, CHAIN, STREAMED] + ([DEFAULT] if d else [])
    served: dict[TurnKind, list[TurnResult]] = {k: [] for k in kinds}
    together: list[TurnResult] = []
    at_once = min(settings.slots, MAX_AT_ONCE) if settings.facts.get("n_slots") != 1 else 1
    for rep in range(request.reps):
        runs = "llama-bench as run, with the server's settings, and the server's turns" if local else "the turns"
        say(f"repetition {rep + 1}/{request.reps}: {runs}, in an order that turns")
        steps: list[Callable[[], None]] = [
            *plan.steps(),
            *(partial(_turn, served[k], turns, k, (d, p, n)) for k in kinds),
        ]
        for step in steps[rep % len(steps) :] + steps[: rep % len(steps)]:
            step()
        if at_once > 1:
            together += turns.together(kinds[-1], d, p, n, at_once)
    notes = list(settings.notes)
    if settings.slots_busy:
        notes.append(f"{settings.slots_busy} of its slots served others' requests when read: they share the device")
    if not local:
        notes.append("llama-bench did not run: the server is not on this machine, or its model file is not")
    describe = f"a {d:,}-token conversation, then {p:,} new tokens and {n:,} decoded"
    measured = _Served(settings=settings, turns=served, together=together, at_once=at_once, describe=describe)
    return GapOutcome(gap=_gap(request, server.title(), spec, plan, measured, notes), spec=spec, facts=host)


def _turn(into: list[TurnResult], turns: Turns, kind: TurnKind, size: tuple[int, int, int]) -> None:
    into.append(turns.run(kind, *size))


def _program(request: GapRequest, settings: ServerSettings) -> Path:
    """The llama-bench to run: --engine llama-bench[=PATH], else the one beside the server's
    program (the same build), else llama-bench on PATH or $LLAMA_BENCH."""
    engine = None if request.llama_bench in (None, "python") else request.llama_bench  # python: --engine's default
    if engine is not None and engine != "llama-bench" and not engine.startswith("llama-bench="):
        raise BadInputError("--vs-bench runs llama-bench: --engine may name only llama-bench[=PATH]")
    option = engine.partition("=")[2] if engine else None
    if not option and settings.program is not None:
        beside = settings.program.with_name("llama-bench" + settings.program.suffix)
        if is_regular(beside) and shutil.which(str(beside)):
            return beside
    return LlamaBenchEngine(option or None).program()


class _Plan:
    """llama-bench's runs: as it was run (A), and with the server's settings at depth 0 and at the
    turn's depth (B); each repetition runs each once."""

    def __init__(
        self, request: GapRequest, settings: ServerSettings, spec: ModelSpec, host: HostFacts, program: Path | None
    ) -> None:
        self.program, self.amx = program, "AMX_INT8" in host.simd
        p, n, d = request.prompt, request.gen, request.depth
        defaults = {name: BY_NAME[name].default for name in BENCH}
        threads = llama_cpp_default_threads(host)
        self.given = defaults | {k: v for k, v in request.facts.items() if v is not None}
        self.given |= {"n_threads": request.threads or threads, "repack": _repack(request.repack, self.amx)}
        server = defaults | settings.bench() | {"n_threads": settings.facts.get("n_threads") or threads}
        self.server = server
        self.differs = [name for name in BENCH if self.given.get(name) != server.get(name)]
        batch_threads = settings.facts.get("n_threads_batch") or server["n_threads"]
        self.batch_threads = batch_threads if batch_threads != server["n_threads"] else None
        again = bool(self.differs) or batch_threads != server["n_threads"]
        base = BenchParams(model=spec.path, n_prompt=(p,), n_gen=(n,), reps=1, timeout_s=request.timeout_s)
        self.runs: dict[str, tuple[BenchParams, dict[str, Any]]] = {"A": self._params(base, self.given)}
        pp_depths = tuple(sorted({*((0,) if again else ()), d})) if again or d else ()
        if pp_depths:
            pp = replace(base, n_gen=(0,), n_depth=pp_depths)
            self.runs["B-pp"] = self._params(pp, server | {"n_threads": batch_threads})
        tg = replace(base, n_prompt=(0,), n_depth=tuple(sorted({*((0,) if again else ()), d + p})))
        self.runs["B-tg"] = self._params(tg, server)
        self.rows: dict[str, list[tuple[dict[str, Any], str]]] = {}
        self.again = again

    @staticmethod
    def _params(base: BenchParams, facts: dict[str, Any]) -> tuple[BenchParams, dict[str, Any]]:
        repack = facts.get("repack")
        own = {"n_threads": facts["n_threads"], "repack": "auto" if repack is None else "on" if repack else "off"}
        fields = {k: v for k, v in facts.items() if k not in OWN_FLAGS and hasattr(base, k) and v is not None}
        params = replace(base, **own, **fields)
        more = {k: v for k, v in facts.items() if k not in OWN_FLAGS and not hasattr(base, k)}
        return params, more

    def steps(self) -> list[Callable[[], None]]:
        if self.program is None:
            return []
        return [partial(self._run, key) for key in self.runs]

    def _run(self, key: str) -> None:
        params, more = self.runs[key]
        assert self.program is not None
        command = bench_command(self.program, params, self.amx, more)
        shown = " ".join(
            [Path(command[0]).name, *(Path(a).name if a == str(params.model) else a for a in command[1:-4])]
        )  # without `-o jsonl --progress -v`, which ggprof reads it by
        for row in run_rows(self.program, params, self.amx, more):
            self.rows.setdefault(f"{key}:{test_name(row['n_prompt'], row['n_gen'], row['n_depth'])}", []).append(
                (row, shown)
            )

    def measured(self, key: str, n_prompt: int, n_gen: int, depth: int, label: str) -> Measured:
        found = self.rows.get(f"{key}:{test_name(n_prompt, n_gen, depth)}", [])
        rates = tuple(float(r["avg_ts"]) for r, _ in found)
        return Measured(label=label, samples=rates, evidence=found[0][1] if found else "")

    def build(self) -> str | None:
        rows = [r for found in self.rows.values() for r, _ in found]
        commit = rows[0].get("build_commit") if rows else None
        return f"b{rows[0].get('build_number')}-{commit}" if commit else None


def _repack(text: str, amx: bool) -> bool:
    """llama-bench's repacking as ggprof runs it: `auto` is off on a CPU with AMX (as the
    llama-bench engine does), else llama-bench's default, on."""
    return {"on": True, "off": False}.get(text, not amx)


def _changed(facts: dict[str, Any], names: Iterable[str], keep: tuple[str, ...] = ()) -> str:
    """The facts among `names` that are not llama.cpp's default (and those in `keep`), as a
    command line spells them."""
    return command_line(facts, [n for n in names if n in keep or facts.get(n) != BY_NAME[n].default])


def _served(label: str, kind: TurnKind, results: list[TurnResult], what: str, turn: str) -> Measured:
    rates = tuple(v for r in results if (v := getattr(r, what)) is not None)
    return Measured(label=label, samples=rates, evidence=f"POST /completion ({turn}; {kind.describe()})")


@dataclass(frozen=True)
class _Served:
    """The server's turns, as measured."""

    settings: ServerSettings
    turns: dict[TurnKind, list[TurnResult]]
    together: list[TurnResult]
    at_once: int
    describe: str  # the turn, in words


def _gap(request: GapRequest, title: str, spec: ModelSpec, plan: _Plan, served: _Served, notes: list[str]) -> Gap:
    settings = served.settings
    if plan.build() and settings.build and plan.build() != settings.build:
        notes.append(f"llama-bench's build ({plan.build()}) is not the server's ({settings.build})")
    p, n, d = request.prompt, request.gen, request.depth
    return Gap(
        server=f"{title}{f', build {clean_name(settings.build, 60)}' if settings.build else ''}",
        model=spec.path.name,
        local=plan.program is not None,
        turn={"prompt": p, "gen": n, "depth": d, "repetitions": request.reps},
        settings=settings.facts,
        sources=settings.sources,
        bench_flags=_changed(plan.given, BENCH, keep=("n_threads",)),
        server_flags=_changed(plan.server, BENCH, keep=("n_threads",)),
        prefill=_waterfall("prefill", request, plan, served),
        decode=_waterfall("decode", request, plan, served),
        notes=tuple(notes),
    )


def _waterfall(test: str, request: GapRequest, plan: _Plan, served: _Served) -> Waterfall:
    """One test's terms: llama-bench's (settings, depth), then the server's (sampling,
    streaming, the prompt cache), then the steps beyond its number (the client, every slot)."""
    pp = test == "prefill"
    p, n, d = request.prompt, request.gen, request.depth
    t_p, t_n = (p, 0) if pp else (0, n)
    name, key, depth = test_name(t_p, t_n), "B-pp" if pp else "B-tg", d if pp else d + p
    what, client_what = ("prompt_tok_s", "client_prompt_tok_s") if pp else ("decode_tok_s", "client_decode_tok_s")
    settings = served.settings
    terms: list[Term] = []
    missing: list[NotMeasured] = []
    start = plan.measured("A", t_p, t_n, 0, f"llama-bench {name}, as it was run") if plan.program else None
    if start is None:
        why = "llama-bench must run on the server's machine, with its model file"
        missing += [NotMeasured(key="settings", name="the server's settings", why=why)]
        missing += [NotMeasured(key="depth", name="depth", why=why)]
    else:
        b0 = start
        if plan.again:
            b0 = plan.measured(key, t_p, t_n, 0, f"llama-bench {name}, the server's settings")
            differs = [
                f"{BY_NAME[k].spelled(plan.server[k])} (llama-bench's: {BY_NAME[k].spell(plan.given[k])})"
                for k in plan.differs
            ]
            if pp and plan.batch_threads:
                differs.append(f"-t {plan.batch_threads} for the prompt (its -tb)")
            what_differs = ", ".join(differs) or "its prompt threads only (-tb): llama-bench's decode is the same"
            terms.append(Term(key="settings", name="the server's settings", what=what_differs, before=start, after=b0))
        else:
            why = "llama-bench takes none of the server's settings that differ"
            missing.append(NotMeasured(key="settings", name="the server's settings", why=why))
        if depth:
            bd = plan.measured(key, t_p, t_n, depth, f"llama-bench {name} at depth {depth:,}")
            after = "the conversation" if pp else "the conversation and its prompt"
            said = f"the server's turn runs after {after}, at depth {depth:,}; llama-bench's {name} at 0"
            terms.append(Term(key="depth", name="depth", what=said, before=b0, after=bd))
    turn = served.describe
    base = _served("the server, greedy, answered whole", BASE, served.turns[BASE], what, turn)
    chained = _served("the server, its sampler chain", CHAIN, served.turns[CHAIN], what, turn)
    streamed = _served("the server, its sampler chain, streamed", STREAMED, served.turns[STREAMED], what, turn)
    chain = _changed(settings.facts, SAMPLING) or "llama.cpp's default chain"
    terms.append(
        Term(key="sampling", name="the sampler chain", what=f"{chain}; against greedy", before=base, after=chained)
    )
    terms.append(
        Term(key="streaming", name="streaming", what="streamed, against answered whole", before=chained, after=streamed)
    )
    end, end_kind = streamed, STREAMED
    if d:
        end, end_kind = _served("the server, as it caches", DEFAULT, served.turns[DEFAULT], what, turn), DEFAULT
        cache = "on" if settings.facts.get("cache_prompt", True) else "off (--no-cache-prompt)"
        said = f"the server's own default ({cache}), against the conversation cached"
        terms.append(Term(key="prompt_cache", name="the prompt cache", what=said, before=streamed, after=end))
    else:
        why = "no conversation before the turn (-d 0): nothing to cache"
        missing.append(NotMeasured(key="prompt_cache", name="the prompt cache", why=why))
    seen = tuple(v for r in served.turns[end_kind] if (v := getattr(r, client_what)) is not None)
    client = Measured(label="what the client saw", samples=seen, evidence=end.evidence)
    said = "the client's clock on the same turns: " + ("the first token's arrival" if pp else "first to last token")
    beyond = [Term(key="client", name="HTTP and the client", what=said, before=end, after=client)]
    if served.at_once > 1:
        label = f"{served.at_once} turns at once, one a slot"
        busy = _served(label, end_kind, served.together, what, label)
        said = f"{served.at_once} of its {settings.slots} slots serving a turn each, against one turn alone"
        beyond.append(Term(key="slots", name="every slot busy", what=said, before=end, after=busy))
    else:
        missing.append(NotMeasured(key="slots", name="every slot busy", why="one slot: turns wait, none shares it"))
    own = _changed(settings.facts, [f for f in settings.facts if not BY_NAME[f].bench and f not in SAMPLING])
    if isinstance(slot_ctx := settings.facts.get("n_ctx_slot"), int):
        own = f"{own}, {slot_ctx:,} tokens a slot" if own else f"{slot_ctx:,} tokens a slot"
    rest = (
        f"llama-bench with the server's settings at depth {depth:,} against the server's greedy turn doing the same "
        f"work: what llama-bench cannot set ({own or 'nothing read'}) and the server's own loop"
    )
    return Waterfall(
        test=test,
        start=start,
        end=end,
        terms=tuple(terms),
        beyond=tuple(beyond),
        missing=tuple(missing),
        rest_evidence=rest,
    )

"""The `server` engine: attach to a running llama-server, Ollama or LM Studio and measure what
it serves (`ggprof profile --server [URL]`, or `--engine server[=URL]`).

Without a URL it looks on the usual local ports (Ollama 11434, llama-server 8080, LM Studio
1234) and says what it found (`discovery.py`). The kind is told by the API (`apis.py`: one
class per server API). The model is the one the server has loaded: llama-server's model path, Ollama's manifest -> blob
in its store (else `/api/show` verbose for a server on another machine), LM Studio's
publisher/model in its folder. Where it runs: Ollama's size_vram of size (the share on the
GPU), LM Studio's runtime name, and for a local llama-server the GPU libraries its process
has loaded and its -ngl.

Each request's prompt defeats the prompt cache (random token ids for llama-server, a random
word salad elsewhere, never the same twice). One request per repetition gives prefill and
decode: the server's own timings where it reports them (llama-server `timings`, Ollama
`*_duration`, LM Studio `stats`), and the client's view beside them (TTFT, decode tok/s,
inter-token latency). `--concurrency 1,2,4` sends that many requests at once, per level.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ggprof.bench.context import UNKNOWN_PLACEMENT, RunContext, host_cores
from ggprof.bench.results import BenchParams, BenchResult, BenchRow, ModelInfo, ThreadProbe
from ggprof.bench.stopping import PROBE_NOT_NEEDED, PROBE_REPS, PROBE_TOKENS, ProbeSchedule, probe_threads, stop_key
from ggprof.engines import Engine, ModelSource, ProgressFn
from ggprof.engines.server.apis import KIND_TITLES, Server
from ggprof.engines.server.client import Client, ServerError
from ggprof.engines.server.discovery import find_server
from ggprof.engines.server.process import Placement, llama_cpp_default_threads
from ggprof.engines.server.requests import (
    Requester,
    Sample,
    client_note,
    concurrent_row,
    decode_tok_s,
    drafted,
    prompt_tokens,
    single_rows,
    token_steps_ns,
)
from ggprof.errors import BadInputError, RunError
from ggprof.files import is_regular
from ggprof.llamacpp import test_name
from ggprof.units import clean_name, sig3

if TYPE_CHECKING:
    from ggprof.machine.facts import HostFacts
    from ggprof.machine.host import HostReport
    from ggprof.model.spec import ModelSpec

__all__ = ["KIND_TITLES", "Placement", "Server", "ServerEngine"]

DEFAULT_READ_TIMEOUT_S = 120.0  # a token (or the first one, after a prompt) within this, else it hangs
DEFAULT_REQUEST_TIMEOUT_S = 600.0
WARMUP_TOKENS = 4


class ServerEngine(Engine):
    name = "server"
    summary = "a running llama-server, Ollama or LM Studio: server[=URL] (without a URL: the usual local ports)"
    can_depth = False  # a server's cache cannot be filled to a depth
    can_rpc = False  # a server is split (or not) as it was started
    can_sweep_threads = False  # a server decodes at its own -t
    can_serve_users = True
    can_batch = False  # a server batches its own users (--concurrency), not one context's sequences

    def __init__(self, option: str | None = None) -> None:
        super().__init__(option)
        self._server: Server | None = None
        self.read_timeout_s = DEFAULT_READ_TIMEOUT_S
        self.model_name: str | None = None  # the model to ask for (Ollama, LM Studio), when given
        self.gpu_backend: str | None = None  # this host's GPU backend, for a local server on "the GPU"

    # -- finding the server ----------------------------------------------------------------------
    def server(self) -> Server:
        if self._server is None:
            if self.timeout_s:  # --timeout bounds every request, the ones before the run too
                self.read_timeout_s = min(self.read_timeout_s, self.timeout_s)
            self._server = find_server(self.option, self.read_timeout_s, self.model_name)
        return self._server

    def describe(self) -> str:
        s = self.server()
        build = f", build {clean_name(s.build, 60)}" if s.build else ""
        runtime = f", runtime {clean_name(s.runtime, 80)}" if s.runtime else ""
        return f"{s.title()} serving {clean_name(s.model, 80)}{build}{runtime}"

    def model_reference(self) -> str | None:
        """The model file the server serves, as a path (None: not on this machine)."""
        f = self.server().model_file
        return str(f) if f is not None else None

    def prepare(self, model: str | None) -> None:
        """Find and identify the server now (a bad URL fails before anything is measured);
        `ollama:NAME` also names the model to ask Ollama for."""
        if model is not None and model.startswith("ollama:"):
            self.model_name = model[len("ollama:") :]
        self.server()

    def resolve_model(self, model: str | None, source: ModelSource) -> ModelSpec:
        """The model the server serves: MODEL when given, else its file on this machine
        (llama-server's model path, Ollama's store, LM Studio's folder), else the header
        Ollama describes (/api/show verbose)."""
        if model is not None:
            return source.load(model)
        server = self.server()
        reference = self.model_reference() or server.store_reference
        if reference is not None:
            try:
                return source.load(reference)
            except BadInputError:
                if not server.api.describes_models:
                    raise
        if not server.api.describes_models:
            raise BadInputError(
                f"{server.title()} serves {clean_name(server.model, 80)}, whose file is not on this machine: "
                "give it as MODEL.gguf (a copy of the file, or its header)"
            )
        from ggprof.model.remote import header_from_show
        from ggprof.model.spec import model_from_headers

        answer = Client(server.endpoint, self.read_timeout_s).get_json(
            "/api/show", {"model": server.model, "verbose": True}
        )
        return model_from_headers([header_from_show(server.model, answer)], swa_default=source.swa_default)

    def attach(self, host: HostReport) -> None:
        """A local server that runs on "the GPU" runs on this host's first GPU's backend."""
        self.gpu_backend = next((d.backend for d in host.devices if d.backend != "cpu"), None)

    def planned_tests(self, params: BenchParams) -> int:
        return 1 + len([n for n in params.n_parallel if n > 1])

    # -- measuring -------------------------------------------------------------------------------
    def run(
        self, spec: ModelSpec, params: BenchParams, facts: HostFacts, progress: ProgressFn | None = None
    ) -> BenchResult:
        server = self.server()
        if params.timeout_s:
            self.read_timeout_s = min(self.read_timeout_s, params.timeout_s)
        client = Client(server.endpoint, self.read_timeout_s)
        requester = Requester(server, client, spec, params.timeout_s or DEFAULT_REQUEST_TIMEOUT_S)
        t_start, wall0 = time.time(), time.monotonic()
        requester.one(8, WARMUP_TOKENS)  # loads the model (Ollama loads on first use); untimed
        busy = server.api.busy_slots(client)  # others' requests in flight share the device
        placement = self._placement(server, requester.runtime)  # LM Studio names it with each answer
        notes = [f"found {server.found}" if server.found else "", f"placement: {placement.evidence}"]
        threads = placement.n_threads
        n_prompt, n_gen = params.n_prompt[0], params.n_gen[0]
        key = stop_key(0, n_gen, 0)
        wants_probe = placement.backends_used == ("cpu",) and server.endpoint.is_local and is_regular(spec.path)
        if wants_probe and threads is None:
            threads = llama_cpp_default_threads(facts)
            notes.append(f"threads: not on the server's command line; llama.cpp's default ({threads}) assumed")
        # a CPU server cannot be thread-probed: its compute roof comes from ggprof's own llama.cpp
        # decoding the same file at half the server's threads, with the server idle (between
        # requests). The roof only lowers the low end of the range where the decode is plausible:
        # with that range known it waits for a request below it, or for a decode not wholly
        # inside it; without it, it runs before the timed requests
        schedule = ProbeSchedule(params.stop, key, wanted=wants_probe)
        probes: list[ThreadProbe | None] = []  # at most one: ggprof's own decode, once run

        def run_probe() -> None:
            probe, said = _own_probe(spec, params, facts, threads or 1)
            probes.append(probe)
            notes.append(said)

        if schedule.before():
            run_probe()
        rows: list[BenchRow] = []
        samples: list[Sample] = []
        try:
            stop = None
            for rep in range(params.max_reps):
                samples.append(requester.one(n_prompt, n_gen))
                if progress:
                    progress(test_name(n_prompt, n_gen), rep + 1, params.max_reps)
                rates = [r for x in samples if (r := decode_tok_s(x)) is not None]
                if schedule.during(rates, probed=bool(probes)):
                    run_probe()
                probe = probes[0] if probes else None
                steps, probe_tok_s = token_steps_ns(samples), probe.tok_s if probe else None
                if params.stop and (stop := params.stop.reason(rates, steps, key, probe_tok_s)):
                    break
            rates = [r for x in samples if (r := decode_tok_s(x)) is not None]
            needed = schedule.after(rates, probed=bool(probes))
            if needed is False:  # wholly inside the range without it
                stop = f"{stop or 'stopped'}; {PROBE_NOT_NEEDED}"
            elif needed:
                run_probe()
            n_prompt = prompt_tokens(samples) or n_prompt  # the prompt as the server counted it
            rows += [
                replace(r, stop_reason=stop) if r.kind == "tg" else r for r in single_rows(samples, n_prompt, n_gen)
            ]
            for level in (n for n in params.n_parallel if n > 1):  # one user: the requests above
                rounds: list[list[Sample]] = []
                for rep in range(params.max_reps):
                    rounds.append(requester.together(level, n_prompt, n_gen))
                    if progress:
                        progress(test_name(0, n_gen, 0, level), rep + 1, params.max_reps)
                    row = concurrent_row(rounds, level, n_gen)
                    if params.stop and (stop := params.stop.reason(row.samples_ts)):
                        break
                rows.append(replace(concurrent_row(rounds, level, n_gen), stop_reason=stop))
        except (ServerError, RunError) as e:
            if samples and not rows:
                with contextlib.suppress(ServerError):
                    rows = single_rows(samples, n_prompt, n_gen)
            done = ", ".join(f"{r.name} {r.avg_ts:.2f} t/s" for r in rows)
            kept = f"; measured before the fault: {done}" if done else ""
            raise type(e)(f"{e}{kept}") from None
        if requester.runtime:
            self._server = server = replace(server, runtime=requester.runtime)
        notes += [client_note(samples)] if samples else []
        if probes and (probe := probes[0]) is not None:
            rows = [replace(r, probe=probe) if r.kind == "tg" and r.n_parallel == 1 else r for r in rows]
        drafts = drafted(samples)
        run_params = replace(
            params,
            n_prompt=(n_prompt,),
            n_gpu_layers=_layers(placement, spec),
            n_threads=threads or params.n_threads,
            probe_threads=None,
        )
        return BenchResult(
            params=run_params,
            model=ModelInfo(
                model_filename=str(spec.path),
                model_type=f"{spec.architecture} {spec.quant_label}",
                model_size=spec.file_size_bytes,
                model_n_params=spec.n_params,
                n_layer=spec.n_layers,
                n_vocab=spec.vocab_size,
            ),
            rows=tuple(rows),
            context=RunContext(
                backends_used=placement.backends_used or (UNKNOWN_PLACEMENT,),
                engine=self.name,
                build_number=server.build_number,
                cpu_model=facts.cpu_model if server.endpoint.is_local else None,
                n_threads=threads,
                **(host_cores(facts) if server.endpoint.is_local else {}),
                n_gpu_layers_requested=placement.n_gpu_layers,
                n_gpu_layers_offloaded=_layers(placement, spec) if placement.gpu_fraction is not None else None,
                n_layers=spec.n_layers,
                backends_compiled=placement.backends_used,
                server_slots=placement.slots,
                other_requests=busy,
                drafting=placement.drafting,
                draft_n=drafts[0],
                draft_n_accepted=drafts[1],
                draft_steps=drafts[2],
                notes=tuple(n for n in notes if n),
            ),
            test_time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
            elapsed_s=time.monotonic() - wall0,
            notes=tuple(n for n in notes if n),
        )

    def runs_on_this_host(self) -> bool:
        return self.server().endpoint.is_local

    def host_cpu_threads(self, facts: HostFacts) -> int | None:
        """A server on this machine whose process mapped no GPU library: its -t (llama.cpp's
        default when its command line does not say)."""
        server = self.server()
        if not server.endpoint.is_local or self._placement(server, None).backends_used != ("cpu",):
            return None
        return server.placement.n_threads or llama_cpp_default_threads(facts)

    def _placement(self, server: Server, runtime: str | None) -> Placement:
        """The server's placement with "gpu" named: LM Studio's runtime, or this host's GPU."""
        p = server.api.placement(server.placement, runtime)
        if "gpu" in p.backends_used:
            if self.gpu_backend is None or not server.endpoint.is_local:
                return replace(p, backends_used=(), evidence=f"{p.evidence}; which GPU is not visible from here")
            used = tuple(self.gpu_backend if b == "gpu" else b for b in p.backends_used)
            return replace(p, backends_used=used)
        return p


def _own_probe(spec: ModelSpec, params: BenchParams, facts: HostFacts, threads: int) -> tuple[ThreadProbe | None, str]:
    """Decode the server's model with ggprof's own llama.cpp at half the server's threads (the
    python engine, tg16, 2 repetitions): the CPU's compute roof for this model, and what was done."""
    from ggprof.engines.python.runner import run_bench

    if threads < 2:
        return None, "compute roof: the server runs 1 thread; no thread probe"
    half = min(probe_threads(threads) or 1, facts.usable_cores)  # never more than this process may use
    probe_params = BenchParams(
        model=spec.path,
        n_prompt=(0,),
        n_gen=(PROBE_TOKENS,),
        reps=PROBE_REPS,
        n_threads=half,
        timeout_s=params.timeout_s,
    )
    try:
        row = run_bench(probe_params, facts).row("tg")
    except (RunError, BadInputError) as e:
        return None, f"compute roof: ggprof's own llama.cpp could not decode the file ({clean_name(e, 120)})"
    if row is None:
        return None, "compute roof: ggprof's own llama.cpp produced no decode row"
    probe = ThreadProbe(n_threads=half, n_gen=row.n_gen, samples_ns=row.samples_ns)
    return probe, (
        f"compute roof: ggprof's own llama.cpp (llama-cpp-python) decoded the same file at {sig3(probe.tok_s)} tok/s "
        f"on {half} thread(s), with the server idle"
    )


def _layers(p: Placement, spec: ModelSpec) -> int:
    """Layers on the GPU: -ngl when known, else the GPU share of the model's layers, else all or none."""
    if p.n_gpu_layers is not None:
        return min(p.n_gpu_layers, spec.n_layers) if p.n_gpu_layers >= 0 else -1
    if p.gpu_fraction is not None:
        return round(p.gpu_fraction * spec.n_layers)
    return 0 if p.backends_used in ((), ("cpu",)) else -1

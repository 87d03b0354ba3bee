"""The `server` engine: attach to a running llama-server, Ollama or LM Studio and measure what
it serves (`ggprof profile --server [URL]`, or `--engine server[=URL]`).

Without a URL it looks on the usual local ports (Ollama 11434, llama-server 8080, LM Studio
1234) and says what it found. The kind is told by the API (ggprof.engines.server_api). The
model is the one the server has loaded: llama-server's model path, Ollama's manifest -> blob
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
import random
import re
import statistics
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from ggprof.bench.context import UNKNOWN_PLACEMENT, RunContext
from ggprof.bench.results import PROBE_NOT_NEEDED, BenchParams, BenchResult, BenchRow, ModelInfo, ThreadProbe, stop_key
from ggprof.engines import Engine, ModelSource, ProgressFn
from ggprof.engines.server_api import (
    Client,
    Endpoint,
    ServerError,
    ServerTimings,
    finished,
    reachable,
    timings_llama_server,
    timings_lm_studio,
    timings_ollama,
    tokens_in_event,
)
from ggprof.errors import BadInputError, RunError
from ggprof.llamacpp import test_name
from ggprof.units import clean_name, sig3

if TYPE_CHECKING:
    from ggprof.machine.facts import HostFacts
    from ggprof.machine.host import HostReport
    from ggprof.model.spec import ModelSpec

# (port, kind) where each server listens by default, in the order they are tried
DEFAULT_PORTS = ((11434, "ollama"), (8080, "llama-server"), (1234, "lm-studio"))
KIND_TITLES = {
    "llama-server": "llama-server",
    "ollama": "Ollama",
    "lm-studio": "LM Studio",
    "openai": "an OpenAI-compatible server",
}
DEFAULT_READ_TIMEOUT_S = 120.0  # a token (or the first one, after a prompt) within this, else it hangs
DEFAULT_REQUEST_TIMEOUT_S = 600.0
WARMUP_TOKENS = 4
# LM Studio's runtime names say the backend: llama.cpp-win-x86_64-nvidia-cuda12-avx2, ...-vulkan-...
RUNTIME_BACKENDS = (
    ("cuda", "cuda"),
    ("vulkan", "vulkan"),
    ("rocm", "rocm"),
    ("metal", "metal"),
    ("mlx", "metal"),
    ("cpu", "cpu"),
)
# shared libraries a process maps when a backend is live in it (/proc/PID/maps)
GPU_LIBRARIES = (
    ("libggml-cuda", "cuda"),
    ("libcuda.so", "cuda"),
    ("libggml-hip", "rocm"),
    ("libamdhip64", "rocm"),
    ("libggml-vulkan", "vulkan"),
    ("libvulkan", "vulkan"),
    ("libggml-metal", "metal"),
    ("libggml-sycl", "sycl"),
)
_WORD_TEXT = (
    "river stone amber violet copper meadow signal harbor lantern orbit velvet granite willow canyon ember "
    "falcon glacier marble quartz saffron thunder tundra walnut zephyr cobalt dune fern grove haze iris "
    "juniper kelp lotus maple nectar onyx pebble quill reef sable thistle umber vale wren yarrow"
)
WORDS = _WORD_TEXT.split()  # a prompt of these in random order is new to any cache


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where the server runs the model, and how that was learned."""

    backends_used: tuple[str, ...]  # ("cuda",), ("cuda", "cpu") for a split, ("cpu",); () unknown
    gpu_fraction: float | None = None  # share of the model on the GPU (Ollama's size_vram / size)
    n_gpu_layers: int | None = None  # -ngl, when the command line says
    n_threads: int | None = None
    slots: int | None = None
    evidence: str = ""


@dataclass(frozen=True, kw_only=True)
class Server:
    kind: str
    endpoint: Endpoint
    model: str  # the name requests use
    model_file: Path | None  # the GGUF on this machine, when it can be found
    store_reference: str | None = None  # ollama:NAME, LM Studio's publisher/model: its local store
    build: str | None = None
    runtime: str | None = None
    placement: Placement = field(default_factory=lambda: Placement(backends_used=()))
    found: str = ""  # how it was found, in words

    def title(self) -> str:
        return f"{KIND_TITLES[self.kind]} at {self.endpoint}"


@dataclass
class Sample:
    """One streamed completion as the client saw it, and as the server reported it."""

    start_ns: int
    token_ns: list[int]  # arrival of each event carrying generated tokens
    n_tokens: int  # generated tokens seen by the client
    server: ServerTimings | None

    @property
    def ttft_ns(self) -> int | None:
        return self.token_ns[0] - self.start_ns if self.token_ns else None

    @property
    def itl_ns(self) -> list[int]:
        return [b - a for a, b in zip(self.token_ns, self.token_ns[1:], strict=False)]


class ServerEngine(Engine):
    name = "server"
    summary = "a running llama-server, Ollama or LM Studio: server[=URL] (without a URL: the usual local ports)"
    can_depth = False  # a server's cache cannot be filled to a depth
    can_rpc = False  # a server is split (or not) as it was started
    can_sweep_threads = False  # a server decodes at its own -t
    can_serve_users = True

    def __init__(self, option: str | None = None) -> None:
        super().__init__(option)
        self._server: Server | None = None
        self.read_timeout_s = DEFAULT_READ_TIMEOUT_S
        self.model_name: str | None = None  # the model to ask for (Ollama, LM Studio), when given
        self.gpu_backend: str | None = None  # this host's GPU backend, for a local server on "the GPU"

    # -- finding the server ----------------------------------------------------------------------
    def server(self) -> Server:
        if self._server is None:
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
                if server.kind != "ollama":
                    raise
        if server.kind != "ollama":
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
        requester = _Requester(server, client, spec, params.timeout_s or DEFAULT_REQUEST_TIMEOUT_S)
        t_start, wall0 = time.time(), time.monotonic()
        requester.one(8, WARMUP_TOKENS)  # loads the model (Ollama loads on first use); untimed
        busy = _busy_slots(server, client)  # others' requests in flight share the device
        placement = self._placement(server, requester.runtime)  # LM Studio names it with each answer
        notes = [f"found {server.found}" if server.found else "", f"placement: {placement.evidence}"]
        threads = placement.n_threads
        n_prompt, n_gen = params.n_prompt[0], params.n_gen[0]
        key = stop_key(0, n_gen, 0)
        wants_probe = placement.backends_used == ("cpu",) and server.endpoint.is_local and spec.path.is_file()
        if wants_probe and threads is None:
            threads = llama_cpp_default_threads(facts)
            notes.append(f"threads: not on the server's command line; llama.cpp's default ({threads}) assumed")
        # a CPU server cannot be thread-probed: its compute roof comes from ggprof's own llama.cpp
        # decoding the same file at half the server's threads, with the server idle (between
        # requests). The roof only lowers the low end of the range where the decode is plausible:
        # with that range known it waits for a request below it, or for a decode not wholly
        # inside it; without it, it runs before the timed requests
        plausible = params.stop.plausible(key) if params.stop and wants_probe else None
        probes: list[ThreadProbe | None] = []  # at most one: ggprof's own decode, once run

        def run_probe() -> None:
            probe, said = _own_probe(spec, params, facts, threads or 1)
            probes.append(probe)
            notes.append(said)

        if wants_probe and plausible is None:
            run_probe()
        rows: list[BenchRow] = []
        samples: list[Sample] = []
        try:
            stop = None
            for rep in range(params.max_reps):
                samples.append(requester.one(n_prompt, n_gen))
                if progress:
                    progress(test_name(n_prompt, n_gen), rep + 1, params.max_reps)
                rates = [r for x in samples if (r := _decode_tok_s(x)) is not None]
                if plausible and not probes and rates and min(rates) < plausible[0]:
                    run_probe()
                probe = probes[0] if probes else None
                steps, probe_tok_s = _token_steps_ns(samples), probe.tok_s if probe else None
                if params.stop and (stop := params.stop.reason(rates, steps, key, probe_tok_s)):
                    break
            if plausible and not probes and params.stop:
                rates = [r for x in samples if (r := _decode_tok_s(x)) is not None]
                if params.stop.settled(rates, key):
                    stop = f"{stop or 'stopped'}; {PROBE_NOT_NEEDED}"
                else:
                    run_probe()
            n_prompt = _prompt_tokens(samples) or n_prompt  # the prompt as the server counted it
            rows += [
                replace(r, stop_reason=stop) if r.kind == "tg" else r for r in _single_rows(samples, n_prompt, n_gen)
            ]
            for level in (n for n in params.n_parallel if n > 1):  # one user: the requests above
                rounds: list[list[Sample]] = []
                for rep in range(params.max_reps):
                    rounds.append(requester.together(level, n_prompt, n_gen))
                    if progress:
                        progress(test_name(0, n_gen, 0, level), rep + 1, params.max_reps)
                    row = _concurrent_row(rounds, level, n_gen)
                    if params.stop and (stop := params.stop.reason(row.samples_ts)):
                        break
                rows.append(replace(_concurrent_row(rounds, level, n_gen), stop_reason=stop))
        except (ServerError, RunError) as e:
            if samples and not rows:
                with contextlib.suppress(ServerError):
                    rows = _single_rows(samples, n_prompt, n_gen)
            done = ", ".join(f"{r.name} {r.avg_ts:.2f} t/s" for r in rows)
            kept = f"; measured before the fault: {done}" if done else ""
            raise type(e)(f"{e}{kept}") from None
        if requester.runtime:
            self._server = server = replace(server, runtime=requester.runtime)
        notes += [_client_note(samples)] if samples else []
        if probes and (probe := probes[0]) is not None:
            rows = [replace(r, probe=probe) if r.kind == "tg" and r.n_parallel == 1 else r for r in rows]
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
                cpu_model=facts.cpu_model if server.endpoint.is_local else None,
                n_threads=threads,
                physical_cores=facts.physical_cores if server.endpoint.is_local else None,
                usable_cores=facts.usable_cores if server.endpoint.is_local else None,
                cores_limited_by=facts.cpus.limited_by if server.endpoint.is_local and facts.cpus else None,
                n_gpu_layers_requested=placement.n_gpu_layers,
                n_gpu_layers_offloaded=_layers(placement, spec) if placement.gpu_fraction is not None else None,
                n_layers=spec.n_layers,
                backends_compiled=placement.backends_used,
                server_slots=placement.slots,
                other_requests=busy,
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
        p = server.placement
        if server.kind == "lm-studio" and runtime:
            backend = runtime_backend(runtime)
            where = f"LM Studio's runtime {clean_name(runtime, 80)}"
            return replace(p, backends_used=(backend,) if backend else (), evidence=where)
        if "gpu" in p.backends_used:
            if self.gpu_backend is None or not server.endpoint.is_local:
                return replace(p, backends_used=(), evidence=f"{p.evidence}; which GPU is not visible from here")
            used = tuple(self.gpu_backend if b == "gpu" else b for b in p.backends_used)
            return replace(p, backends_used=used)
        return p


def _own_probe(spec: ModelSpec, params: BenchParams, facts: HostFacts, threads: int) -> tuple[ThreadProbe | None, str]:
    """Decode the server's model with ggprof's own llama.cpp at half the server's threads (the
    python engine, tg16, 2 repetitions): the CPU's compute roof for this model, and what was done."""
    from ggprof.bench.runner import run_bench

    if threads < 2:
        return None, "compute roof: the server runs 1 thread; no thread probe"
    half = max(threads // 2, 1)
    probe_params = BenchParams(
        model=spec.path, n_prompt=(0,), n_gen=(16,), reps=2, n_threads=half, timeout_s=params.timeout_s
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


def _busy_slots(server: Server, client: Client) -> int | None:
    """llama-server's slots processing a request now (`/slots`); None where the server cannot say."""
    if server.kind != "llama-server":
        return None
    try:
        slots = client.get_json("/slots", timeout_s=5.0)
    except ServerError:  # started with --no-slots, or an older build
        return None
    if not isinstance(slots, list):
        return None
    return sum(1 for x in slots if isinstance(x, dict) and x.get("is_processing") is True)


def _layers(p: Placement, spec: ModelSpec) -> int:
    """Layers on the GPU: -ngl when known, else the GPU share of the model's layers, else all or none."""
    if p.n_gpu_layers is not None:
        return min(p.n_gpu_layers, spec.n_layers) if p.n_gpu_layers >= 0 else -1
    if p.gpu_fraction is not None:
        return round(p.gpu_fraction * spec.n_layers)
    return 0 if p.backends_used in ((), ("cpu",)) else -1


def _prompt_tokens(samples: list[Sample]) -> int | None:
    """The prompt's tokens as the server counted them (the median over requests), if it said."""
    counts = [s.server.prompt_n for s in samples if s.server and s.server.prompt_n]
    return int(statistics.median(counts)) if counts else None


def _client_note(samples: list[Sample]) -> str:
    rates = [
        (s.n_tokens - 1) / ((s.token_ns[-1] - s.token_ns[0]) / 1e9)
        for s in samples
        if len(s.token_ns) > 1 and s.token_ns[-1] > s.token_ns[0]
    ]
    ttfts = [s.ttft_ns / 1e6 for s in samples if s.ttft_ns is not None]
    if not rates:
        return ""
    return (
        f"as the client saw it: decode {statistics.fmean(rates):.2f} tok/s (first to last token), "
        f"TTFT {statistics.median(ttfts):.0f} ms (median of {len(ttfts)})"
    )


def _single_rows(samples: list[Sample], n_prompt: int, n_gen: int) -> list[BenchRow]:
    """A pp row and a tg row from the same requests: the server's timings where it gave them,
    else the client's (TTFT for the prompt, first-to-last token for decode)."""
    pp_ns, tg_ns, client_ns = [], [], []
    for s in samples:
        if len(s.token_ns) > 1 and s.n_tokens > 1:  # first to last token: n_tokens - 1 intervals
            client_ns.append(int((s.token_ns[-1] - s.token_ns[0]) * n_gen / (s.n_tokens - 1)))
        t = s.server
        if t and t.prompt_ms and t.prompt_n:
            pp_ns.append(int(t.prompt_ms * 1e6 * n_prompt / t.prompt_n))
        elif s.ttft_ns:
            pp_ns.append(s.ttft_ns)
        if t and t.gen_ms and t.gen_n:
            tg_ns.append(int(t.gen_ms * 1e6 * n_gen / t.gen_n))  # normalized to n_gen tokens
        elif len(s.token_ns) > 1 and s.n_tokens > 1:
            tg_ns.append(client_ns[-1])
    ttft = tuple(s.ttft_ns for s in samples if s.ttft_ns is not None)
    itl = tuple(i for s in samples for i in s.itl_ns)
    rows = []
    if pp_ns and n_prompt:
        rows.append(
            BenchRow(
                name=test_name(n_prompt, 0),
                n_prompt=n_prompt,
                n_gen=0,
                n_depth=0,
                samples_ns=tuple(pp_ns),
                ttft_ns=ttft,
            )
        )
    if tg_ns and n_gen:
        rows.append(
            BenchRow(
                name=test_name(0, n_gen),
                n_prompt=0,
                n_gen=n_gen,
                n_depth=0,
                samples_ns=tuple(tg_ns),
                itl_ns=itl,
                client_samples_ns=tuple(client_ns),
            )
        )
    if not rows:
        raise ServerError("the server streamed no tokens: nothing to time")
    return rows


def _token_steps_ns(samples: list[Sample]) -> list[int]:
    """Per-token decode times as the client saw them, from the streams whose every event carried
    one token (where an event carries several, its gap is not one token's time)."""
    return [i for s in samples if s.n_tokens == len(s.token_ns) for i in s.itl_ns]


def _decode_tok_s(s: Sample) -> float | None:
    """One request's decode rate: the server's timings, else first to last streamed token."""
    if s.server and s.server.gen_ms and s.server.gen_n:
        return s.server.gen_n / (s.server.gen_ms / 1e3)
    if len(s.token_ns) > 1 and s.n_tokens > 1 and s.token_ns[-1] > s.token_ns[0]:
        return (s.n_tokens - 1) / ((s.token_ns[-1] - s.token_ns[0]) / 1e9)
    return None


def _concurrent_row(rounds: list[list[Sample]], level: int, n_gen: int) -> BenchRow:
    """Each round: `level` requests at once, decoding together. The aggregate is the sum of the
    users' decode rates (as one user's row is its decode rate: prefill is the TTFT columns),
    kept as the time `level x n_gen` tokens take at that rate."""
    samples_ns, ttft, itl = [], [], []
    for samples in rounds:
        rates = [r for s in samples if (r := _decode_tok_s(s)) is not None]
        if len(rates) < len(samples):
            raise ServerError(f"{level} requests at once: a request streamed too few tokens to time its decode")
        samples_ns.append(int(level * n_gen / sum(rates) * 1e9))
        ttft += [s.ttft_ns for s in samples if s.ttft_ns is not None]
        itl += [i for s in samples for i in s.itl_ns]
    return BenchRow(
        name=test_name(0, n_gen, 0, level),
        n_prompt=0,
        n_gen=n_gen,
        n_depth=0,
        samples_ns=tuple(samples_ns),
        ttft_ns=tuple(ttft),
        itl_ns=tuple(itl),
        n_parallel=level,
    )


class _Requester:
    """Streamed completions with prompts no cache has seen."""

    def __init__(self, server: Server, client: Client, spec: ModelSpec, timeout_s: float) -> None:
        self.server, self.client, self.spec, self.timeout_s = server, client, spec, timeout_s
        self.rng = random.Random(time.time_ns())
        self.lock = threading.Lock()
        self.runtime: str | None = None  # LM Studio names its runtime in each completion

    def _prompt(self, n_prompt: int) -> Any:
        with self.lock:
            if self.server.kind == "llama-server":  # token ids: exactly n_prompt tokens, never cached
                low = min(1000, self.spec.vocab_size // 4)
                return [self.rng.randrange(low, max(self.spec.vocab_size, low + 1)) for _ in range(max(n_prompt, 1))]
            words = [self.rng.choice(WORDS) for _ in range(max(n_prompt, 1))]
            return f"{self.rng.getrandbits(64):016x} " + " ".join(words)

    def _request(self, n_prompt: int, n_gen: int) -> tuple[str, dict[str, Any]]:
        prompt, kind, model = self._prompt(n_prompt), self.server.kind, self.server.model
        if kind == "llama-server":
            body = {"prompt": prompt, "n_predict": n_gen, "stream": True, "cache_prompt": False}
            return "/completion", {**body, "ignore_eos": True, "temperature": 0, "n_probs": 0}
        if kind == "ollama":
            options = {"num_predict": n_gen, "temperature": 0}
            return "/api/generate", {"model": model, "prompt": prompt, "raw": True, "stream": True, "options": options}
        if kind == "lm-studio":  # not streamed: its stats come whole with the answer
            return "/api/v0/completions", {"model": model, "prompt": prompt, "max_tokens": n_gen, "stream": False}
        return "/v1/completions", {
            "model": model,
            "prompt": prompt,
            "max_tokens": n_gen,
            "stream": True,
            "temperature": 0,
        }

    def one(self, n_prompt: int, n_gen: int) -> Sample:
        path, body = self._request(n_prompt, n_gen)
        kind = self.server.kind
        if kind == "lm-studio":
            return self._whole(path, body)
        timings = {"llama-server": timings_llama_server, "ollama": timings_ollama}.get(kind)
        start = time.perf_counter_ns()
        sample = Sample(start_ns=start, token_ns=[], n_tokens=0, server=None)
        done = False
        for at, event in self.client.stream(path, body, time.monotonic() + self.timeout_s):
            n = tokens_in_event(kind, event)
            if n:
                sample.token_ns.append(at)
                sample.n_tokens += n
            if timings is not None and (t := timings(event)) is not None:
                sample.server = t
            done = done or finished(kind, event)
        if not done:
            raise ServerError(
                f"{self.server.title()}: the stream ended before the completion did "
                f"(after {sample.n_tokens} tokens): the server broke off"
            )
        if not sample.token_ns and not (sample.server and sample.server.gen_n):
            raise ServerError(f"{self.server.title()}: a completion ended without a single token")
        return sample

    def _whole(self, path: str, body: dict[str, Any]) -> Sample:
        """One answer, not streamed: the server's stats time it; the client sees only the end."""
        start = time.perf_counter_ns()
        answer = self.client.get_json(path, body, timeout_s=self.timeout_s)
        end = time.perf_counter_ns()
        if not isinstance(answer, dict):
            raise ServerError(f"{self.server.title()}: {path} answered something other than a completion")
        timings = timings_lm_studio(answer)
        runtime = answer.get("runtime")
        if isinstance(runtime, dict) and isinstance(runtime.get("name"), str):
            self.runtime = runtime["name"][:200]
        made = timings.gen_n if timings and timings.gen_n else 0
        if not made:
            raise ServerError(f"{self.server.title()}: a completion came back without tokens or stats")
        return Sample(start_ns=start, token_ns=[end], n_tokens=made, server=timings)

    def together(self, level: int, n_prompt: int, n_gen: int) -> list[Sample]:
        """`level` requests sent at once, each on its own connection."""
        results: list[Sample | BaseException] = [RuntimeError("not run")] * level

        def go(i: int) -> None:
            try:
                results[i] = self.one(n_prompt, n_gen)
            except BaseException as e:  # handed to the caller below
                results[i] = e

        threads = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(level)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0] if isinstance(errors[0], (ServerError, RunError)) else ServerError(str(errors[0]))
        return [r for r in results if isinstance(r, Sample)]


# -- finding a server ---------------------------------------------------------------------------
def find_server(url: str | None, read_timeout_s: float, model_name: str | None = None) -> Server:
    """The server at `url`, or the first one on the usual local ports; BadInputError naming what
    was tried when there is none."""
    if url:
        endpoint = Endpoint.parse(url)
        if not reachable(endpoint):
            raise BadInputError(f"--server {endpoint}: nothing accepts connections there")
        return identify(endpoint, Client(endpoint, read_timeout_s), model_name, found="the URL given")
    tried = []
    for port, kind in DEFAULT_PORTS:
        endpoint = Endpoint("http", "127.0.0.1", port, "")
        tried.append(f"{KIND_TITLES[kind]} :{port}")
        if reachable(endpoint, 0.5):
            return identify(
                endpoint, Client(endpoint, read_timeout_s), model_name, found=f"on {KIND_TITLES[kind]}'s port {port}"
            )
    raise BadInputError(f"--server: no server on the usual local ports ({', '.join(tried)}): give its URL")


def identify(endpoint: Endpoint, client: Client, model_name: str | None, found: str) -> Server:
    """Which API answers, and what it serves. BadInputError when it is none of them."""
    probes = (
        ("/api/version", _ollama),
        ("/props", _llama_server),
        ("/api/v0/models", _lm_studio),
        ("/v1/models", _openai),
    )
    for path, make in probes:
        try:
            answer = client.get_json(path, timeout_s=5.0)
        except ServerError:
            continue
        server = make(endpoint, client, answer, model_name)
        if server is not None:
            return replace(server, found=f"{server.title()} ({found})")
    raise BadInputError(
        f"--server {endpoint}: not llama-server, Ollama, LM Studio or an OpenAI-compatible server "
        "(none of /api/version, /props, /api/v0/models, /v1/models answered as they do)"
    )


def _llama_server(endpoint: Endpoint, client: Client, props: Any, model_name: str | None) -> Server | None:
    if not isinstance(props, dict) or not ("model_path" in props or "default_generation_settings" in props):
        return None
    path = props.get("model_path") if isinstance(props.get("model_path"), str) else None
    slots = props.get("total_slots") if isinstance(props.get("total_slots"), int) else None
    model_file = Path(path) if path and endpoint.is_local and Path(path).is_file() else None
    placement = _local_process(endpoint) if endpoint.is_local else None
    if placement is None:
        placement = Placement(
            backends_used=(), slots=slots, evidence="a remote llama-server: its device is not visible from here"
        )
    return Server(
        kind="llama-server",
        endpoint=endpoint,
        model=Path(path).name if path else "model",
        model_file=model_file,
        build=props.get("build_info") if isinstance(props.get("build_info"), str) else None,
        placement=replace(placement, slots=slots),
    )


def _ollama(endpoint: Endpoint, client: Client, version: Any, model_name: str | None) -> Server | None:
    if not isinstance(version, dict) or not isinstance(version.get("version"), str):
        return None
    ps = client.get_json("/api/ps")
    running = ps.get("models") if isinstance(ps, dict) else None
    models = [m for m in running if isinstance(m, dict)] if isinstance(running, list) else []
    wanted = model_name
    chosen = next((m for m in models if wanted and m.get("name") in (wanted, f"{wanted}:latest")), None)
    if chosen is None and wanted is None:
        if not models:
            raise BadInputError(f"Ollama at {endpoint} has no model loaded: give the model (MODEL as ollama:NAME)")
        if len(models) > 1:
            names = ", ".join(clean_name(m.get("name"), 40) for m in models[:5])
            raise BadInputError(f"Ollama at {endpoint} has several models loaded ({names}): give one as ollama:NAME")
        chosen = models[0]
    name = str((chosen or {}).get("name") or wanted)
    return Server(
        kind="ollama",
        endpoint=endpoint,
        model=name,
        model_file=None,
        store_reference=f"ollama:{name}" if endpoint.is_local else None,
        build=f"Ollama {clean_name(version['version'], 30)}",
        placement=ollama_placement(chosen) if chosen else Placement(backends_used=(), evidence="not loaded yet"),
    )


def ollama_placement(model: dict[str, Any]) -> Placement:
    """Ollama's /api/ps: size_vram of size is the share on the GPU (0: CPU only)."""
    size, vram = model.get("size"), model.get("size_vram")
    if not isinstance(size, int) or not isinstance(vram, int) or size <= 0 or vram < 0:
        return Placement(backends_used=(), evidence="Ollama's /api/ps gave no size_vram")
    fraction = min(vram / size, 1.0)
    evidence = f"Ollama's /api/ps: size_vram {vram / 1e9:.2f} GB of {size / 1e9:.2f} GB ({fraction:.0%} on the GPU)"
    if fraction <= 0.001:
        return Placement(backends_used=("cpu",), gpu_fraction=0.0, evidence=evidence)
    # the GPU's backend is this host's GPU when the server is local (filled in by the caller)
    used: tuple[str, ...] = ("gpu",) if fraction >= 0.999 else ("gpu", "cpu")
    return Placement(backends_used=used, gpu_fraction=fraction, evidence=evidence)


def _lm_studio(endpoint: Endpoint, client: Client, models: Any, model_name: str | None) -> Server | None:
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) and "state" in m for m in data):
        return None
    loaded = [m for m in data if m.get("state") == "loaded" and m.get("type") in ("llm", "vlm", None)]
    chosen = next((m for m in loaded if model_name and m.get("id") == model_name), None)
    if chosen is None:
        if not loaded:
            raise BadInputError(f"LM Studio at {endpoint} has no model loaded: load one, or give it as MODEL")
        chosen = loaded[0]
    publisher = chosen.get("publisher") if isinstance(chosen.get("publisher"), str) else None
    ident = str(chosen.get("id"))
    return Server(
        kind="lm-studio",
        endpoint=endpoint,
        model=ident,
        model_file=None,
        placement=Placement(backends_used=(), evidence="LM Studio says its runtime with each completion"),
        store_reference=f"{publisher}/{ident}" if publisher and endpoint.is_local else None,
    )


def runtime_backend(runtime: str) -> str | None:
    """LM Studio's runtime name -> a backend (llama.cpp-win-x86_64-nvidia-cuda12-avx2 -> cuda)."""
    low = runtime.lower()
    return next((b for key, b in RUNTIME_BACKENDS if key in low), None)


def _openai(endpoint: Endpoint, client: Client, models: Any, model_name: str | None) -> Server | None:
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return None
    ident = model_name or str(data[0].get("id"))
    return Server(
        kind="openai",
        endpoint=endpoint,
        model=ident,
        model_file=None,
        placement=Placement(backends_used=(), evidence="an OpenAI-compatible API does not say where it runs"),
    )


def _local_process(endpoint: Endpoint) -> Placement | None:
    """The local process listening on the port: the GPU libraries it mapped, its -ngl and -t."""
    try:
        pid = next(
            c.pid
            for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == endpoint.port and c.pid
        )
        proc = psutil.Process(pid)
        cmdline = proc.cmdline()
    except (StopIteration, psutil.Error, OSError):
        return None
    libs: set[str] = set()
    with contextlib.suppress(psutil.Error, OSError):
        for m in proc.memory_maps(grouped=True):
            name = Path(m.path).name
            libs.update(b for key, b in GPU_LIBRARIES if name.startswith(key))
    ngl = _flag(cmdline, ("-ngl", "--n-gpu-layers", "--gpu-layers"))
    threads = _flag(cmdline, ("-t", "--threads"))
    program = clean_name(Path(cmdline[0]).name if cmdline else "?", 60)
    if not libs or ngl == 0:
        why = "no GPU library mapped" if not libs else "-ngl 0"
        return Placement(
            backends_used=("cpu",), n_gpu_layers=0, n_threads=threads, evidence=f"process {pid} ({program}): {why}"
        )
    used = tuple(sorted(libs))
    return Placement(
        backends_used=used,
        n_gpu_layers=ngl,
        n_threads=threads,
        evidence=f"process {pid} ({program}) mapped {', '.join(used).upper()} libraries; "
        f"-ngl {ngl if ngl is not None else 'default'}",
    )


def _flag(cmdline: list[str], names: tuple[str, ...]) -> int | None:
    for i, arg in enumerate(cmdline[:-1]):
        if arg in names and re.fullmatch(r"-?\d{1,6}", cmdline[i + 1]):
            return int(cmdline[i + 1])
    for arg in cmdline:
        for name in names:
            if arg.startswith(name + "=") and re.fullmatch(r"-?\d{1,6}", arg[len(name) + 1 :]):
                return int(arg[len(name) + 1 :])
    return None


def llama_cpp_default_threads(facts: HostFacts) -> int:
    """The threads a llama.cpp server started without -t runs: the machine's physical
    (performance) cores, whatever its affinity set or cgroup quota (llama.cpp's
    cpu_get_num_math reads the topology, not the process's limits)."""
    return max(facts.physical_cores - (facts.efficiency_cores or 0), 1)

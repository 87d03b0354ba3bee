"""What each kind of server asks and answers: one class per API, as llama-bench has one printer
per format. The engine and discovery never switch on the kind; they ask `server.api`.

APIs (checked against each project's documentation; tests replay recorded answers):
- llama-server (tools/server/README.md): GET /health, /props (model_path, total_slots,
  build_info), /slots, POST /completion with `stream`, `n_predict`, `ignore_eos`,
  `cache_prompt`; its last event holds `timings` (prompt_n, prompt_ms, predicted_n,
  predicted_ms).
- Ollama (docs/api.md): GET /api/version, /api/ps (size, size_vram), POST /api/show
  (`verbose`: model_info, tensors), POST /api/generate (stream of objects; the last has
  prompt_eval_count/_duration and eval_count/_duration in ns).
- LM Studio (REST API v0): GET /api/v0/models (id, publisher, arch, quantization, state),
  POST /api/v0/completions (not streamed: the answer holds `stats` and `runtime`).
- OpenAI-compatible: GET /v1/models, POST /v1/completions (client-side timing only).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ggprof.engines.server.client import Client, Endpoint, ServerError
from ggprof.engines.server.process import Placement, local_process
from ggprof.errors import BadInputError
from ggprof.files import is_regular
from ggprof.logs.patterns import SERVER_BUILD
from ggprof.units import clean_name

# LM Studio's runtime names say the backend: llama.cpp-win-x86_64-nvidia-cuda12-avx2, ...-vulkan-...
RUNTIME_BACKENDS = (
    ("cuda", "cuda"),
    ("vulkan", "vulkan"),
    ("rocm", "rocm"),
    ("metal", "metal"),
    ("mlx", "metal"),
    ("cpu", "cpu"),
)


@dataclass(frozen=True, kw_only=True)
class Server:
    kind: str  # the API it speaks: a key of APIS
    endpoint: Endpoint
    model: str  # the name requests use
    model_file: Path | None  # the GGUF on this machine, when it can be found
    store_reference: str | None = None  # ollama:NAME, LM Studio's publisher/model: its local store
    build: str | None = None
    runtime: str | None = None
    placement: Placement = field(default_factory=lambda: Placement(backends_used=()))
    found: str = ""  # how it was found, in words

    @property
    def build_number(self) -> int | None:
        """llama-server's build number from its /props build_info (`b5315-8c83449c`)."""
        m = SERVER_BUILD.match(self.build or "")
        return int(m[1]) if m else None

    @property
    def api(self) -> ServerApi:
        return APIS[self.kind]

    def title(self) -> str:
        return f"{self.api.title} at {self.endpoint}"


@dataclass(frozen=True, kw_only=True)
class ServerTimings:
    """What the server itself measured for one completion (None: it did not say)."""

    prompt_n: int | None = None
    prompt_ms: float | None = None
    gen_n: int | None = None  # the decode steps gen_ms covers
    gen_ms: float | None = None
    draft_n: int | None = None  # speculative decoding: tokens drafted (llama-server's timings.draft_n)
    draft_n_accepted: int | None = None  # ... and of those, kept by the target

    def prompt_ns(self, n_prompt: int) -> int | None:
        """The prompt's time scaled to `n_prompt` tokens, in whole ns (at least 1: a server that
        claims no time at all is judged on that claim, never divided by)."""
        return _scaled_ns(self.prompt_ms, self.prompt_n, n_prompt)

    def gen_ns(self, n_gen: int) -> int | None:
        """The decode's time scaled to `n_gen` tokens, in whole ns (at least 1)."""
        return _scaled_ns(self.gen_ms, self.gen_n, n_gen)


def _scaled_ns(ms: float | None, n: int | None, to_n: int) -> int | None:
    if ms is None or not n:
        return None
    return max(1, min(round(ms * 1e6 * to_n / n), 1 << 62))


def _number(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v > 1e15:
        return None
    return float(v)


def _count(d: dict[str, Any], key: str) -> int | None:
    v = _number(d, key)
    return int(v) if v is not None else None


def _first_choice(event: dict[str, Any]) -> dict[str, Any]:
    choices = event.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    return first if isinstance(first, dict) else {}


class ServerApi:
    """One server API: how it is told apart, what it serves, how a completion is asked for and
    what its answer says. The defaults are the OpenAI-compatible API's."""

    kind: ClassVar[str] = "openai"
    title: ClassVar[str] = "an OpenAI-compatible server"
    identify_path: ClassVar[str] = "/v1/models"
    streamed: ClassVar[bool] = True  # completions come as a stream of events
    token_prompt: ClassVar[bool] = False  # prompts as token ids (exactly n tokens, never cached)
    describes_models: ClassVar[bool] = False  # a model's header is read from the API (Ollama's /api/show)

    def make(self, endpoint: Endpoint, client: Client, answer: Any, model_name: str | None) -> Server | None:
        """The server that answered `identify_path` with `answer`, or None: not this API."""
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or not data or not isinstance(data[0], dict):
            return None
        return Server(
            kind=self.kind,
            endpoint=endpoint,
            model=model_name or str(data[0].get("id")),
            model_file=None,
            placement=Placement(backends_used=(), evidence="an OpenAI-compatible API does not say where it runs"),
        )

    def request(self, prompt: Any, model: str, n_gen: int) -> tuple[str, dict[str, Any]]:
        """The path and body of one completion of `n_gen` tokens."""
        return "/v1/completions", {
            "model": model,
            "prompt": prompt,
            "max_tokens": n_gen,
            "stream": True,
            "temperature": 0,
        }

    def timings(self, event: dict[str, Any]) -> ServerTimings | None:
        """What the server measured itself, where an event says (None: nothing)."""
        return None

    def text_of(self, event: dict[str, Any]) -> str | None:
        """The generated text an event carries (None: an event without a token)."""
        v = _first_choice(event).get("text")
        return v if isinstance(v, str) and v else None

    def finished(self, event: dict[str, Any]) -> bool:
        """Whether an event is the last of a completion (a stream that ends before one broke off)."""
        return _first_choice(event).get("finish_reason") is not None

    def tokens_in_event(self, event: dict[str, Any]) -> int:
        """How many generated tokens one event carries."""
        return 1 if self.text_of(event) is not None else 0

    def tokens_at_most(self, event: dict[str, Any]) -> int:
        """The most generated tokens one event can stand for. A server holds back a token that
        ends inside a UTF-8 character and sends its bytes with a later token's, so each byte of
        text may be a token of its own (byte-fallback tokens are one byte each)."""
        text = self.text_of(event)
        return max(self.tokens_in_event(event), len(text.encode("utf-8", "replace")) if text else 0)

    def busy_slots(self, client: Client) -> int | None:
        """Its slots busy with a request now (None: it cannot say)."""
        return None

    def placement(self, p: Placement, runtime: str | None) -> Placement:
        """Where it runs, given what a completion said (LM Studio names its runtime)."""
        return p


class LlamaServerApi(ServerApi):
    kind = "llama-server"
    title = "llama-server"
    identify_path = "/props"
    token_prompt = True

    def make(self, endpoint: Endpoint, client: Client, answer: Any, model_name: str | None) -> Server | None:
        props = answer
        if not isinstance(props, dict) or not ("model_path" in props or "default_generation_settings" in props):
            return None
        path = props.get("model_path") if isinstance(props.get("model_path"), str) else None
        slots = props.get("total_slots") if isinstance(props.get("total_slots"), int) else None
        model_file = Path(path) if path and endpoint.is_local and is_regular(Path(path)) else None
        placement = local_process(endpoint) if endpoint.is_local else None
        if placement is None:
            placement = Placement(
                backends_used=(), slots=slots, evidence="a remote llama-server: its device is not visible from here"
            )
        return Server(
            kind=self.kind,
            endpoint=endpoint,
            model=Path(path).name if path else "model",
            model_file=model_file,
            build=props.get("build_info") if isinstance(props.get("build_info"), str) else None,
            placement=replace(placement, slots=slots),
        )

    def request(self, prompt: Any, model: str, n_gen: int) -> tuple[str, dict[str, Any]]:
        body = {"prompt": prompt, "n_predict": n_gen, "stream": True, "cache_prompt": False}
        return "/completion", {**body, "ignore_eos": True, "temperature": 0, "n_probs": 0}

    def timings(self, event: dict[str, Any]) -> ServerTimings | None:
        t = event.get("timings")
        if not isinstance(t, dict):
            return None
        # predicted_ms spans predicted_n - 1 decode steps: "the first token is free, it comes from
        # the logits of the last prompt batch" (tools/server/server-common.h, n_gen_steps)
        predicted = _count(t, "predicted_n")
        return ServerTimings(
            prompt_n=_count(t, "prompt_n"),
            prompt_ms=_number(t, "prompt_ms"),
            gen_n=predicted - 1 if predicted and predicted > 1 else None,
            gen_ms=_number(t, "predicted_ms"),
            draft_n=_count(t, "draft_n"),
            draft_n_accepted=_count(t, "draft_n_accepted"),
        )

    def text_of(self, event: dict[str, Any]) -> str | None:
        v = event.get("content")
        return v if isinstance(v, str) and v else None

    def finished(self, event: dict[str, Any]) -> bool:
        return event.get("stop") is True

    def tokens_in_event(self, event: dict[str, Any]) -> int:
        """llama-server may send several per event when `n_probs` or a slow client batches them:
        `tokens` lists their ids."""
        if isinstance(event.get("tokens"), list) and event["tokens"]:
            return len(event["tokens"])
        return super().tokens_in_event(event)

    def tokens_at_most(self, event: dict[str, Any]) -> int:
        """A token whose text is empty (a control token) still comes as an event of its own."""
        token_event = isinstance(event.get("content"), str) and event.get("stop") is not True
        return max(int(token_event), super().tokens_at_most(event))

    def busy_slots(self, client: Client) -> int | None:
        """Its slots processing a request now (`/slots`)."""
        try:
            slots = client.get_json("/slots", timeout_s=5.0)
        except ServerError:  # started with --no-slots, or an older build
            return None
        if not isinstance(slots, list):
            return None
        return sum(1 for x in slots if isinstance(x, dict) and x.get("is_processing") is True)


class OllamaApi(ServerApi):
    kind = "ollama"
    title = "Ollama"
    identify_path = "/api/version"
    describes_models = True

    def make(self, endpoint: Endpoint, client: Client, answer: Any, model_name: str | None) -> Server | None:
        version = answer
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
                raise BadInputError(
                    f"Ollama at {endpoint} has several models loaded ({names}): give one as ollama:NAME"
                )
            chosen = models[0]
        name = str((chosen or {}).get("name") or wanted)
        return Server(
            kind=self.kind,
            endpoint=endpoint,
            model=name,
            model_file=None,
            store_reference=f"ollama:{name}" if endpoint.is_local else None,
            build=f"Ollama {clean_name(version['version'], 30)}",
            placement=ollama_placement(chosen) if chosen else Placement(backends_used=(), evidence="not loaded yet"),
        )

    def request(self, prompt: Any, model: str, n_gen: int) -> tuple[str, dict[str, Any]]:
        options = {"num_predict": n_gen, "temperature": 0}
        return "/api/generate", {"model": model, "prompt": prompt, "raw": True, "stream": True, "options": options}

    def timings(self, event: dict[str, Any]) -> ServerTimings | None:
        if event.get("done") is not True:
            return None
        prompt_ns, gen_ns = _number(event, "prompt_eval_duration"), _number(event, "eval_duration")
        return ServerTimings(
            prompt_n=_count(event, "prompt_eval_count"),
            prompt_ms=prompt_ns / 1e6 if prompt_ns is not None else None,
            gen_n=_count(event, "eval_count"),
            gen_ms=gen_ns / 1e6 if gen_ns is not None else None,
        )

    def text_of(self, event: dict[str, Any]) -> str | None:
        v = event.get("response")
        return v if isinstance(v, str) and v else None

    def finished(self, event: dict[str, Any]) -> bool:
        return event.get("done") is True


class LMStudioApi(ServerApi):
    kind = "lm-studio"
    title = "LM Studio"
    identify_path = "/api/v0/models"
    streamed = False  # its stats come whole with the answer

    def make(self, endpoint: Endpoint, client: Client, answer: Any, model_name: str | None) -> Server | None:
        data = answer.get("data") if isinstance(answer, dict) else None
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
            kind=self.kind,
            endpoint=endpoint,
            model=ident,
            model_file=None,
            placement=Placement(backends_used=(), evidence="LM Studio says its runtime with each completion"),
            store_reference=f"lm-studio:{publisher}/{ident}" if publisher and endpoint.is_local else None,
        )

    def request(self, prompt: Any, model: str, n_gen: int) -> tuple[str, dict[str, Any]]:
        return "/api/v0/completions", {"model": model, "prompt": prompt, "max_tokens": n_gen, "stream": False}

    def timings(self, event: dict[str, Any]) -> ServerTimings | None:
        """LM Studio's `stats`: tokens_per_second, time_to_first_token and generation_time (s)."""
        stats = event.get("stats")
        if not isinstance(stats, dict):
            return None
        usage: dict[str, Any] = event["usage"] if isinstance(event.get("usage"), dict) else {}
        gen_s, tps = _number(stats, "generation_time"), _number(stats, "tokens_per_second")
        ttft_s = _number(stats, "time_to_first_token")
        gen_n = _count(usage, "completion_tokens") or (round(gen_s * tps) if gen_s and tps else None)
        return ServerTimings(
            prompt_n=_count(usage, "prompt_tokens"),
            prompt_ms=ttft_s * 1e3 if ttft_s is not None else None,
            gen_n=gen_n,
            gen_ms=gen_s * 1e3 if gen_s is not None else None,
        )

    def placement(self, p: Placement, runtime: str | None) -> Placement:
        if not runtime:
            return p
        backend = runtime_backend(runtime)
        where = f"LM Studio's runtime {clean_name(runtime, 80)}"
        return replace(p, backends_used=(backend,) if backend else (), evidence=where)


# every API by kind, in the order an unknown server is asked (Ollama's /api/version first: its
# answer is the least ambiguous; the generic OpenAI API last)
APIS: dict[str, ServerApi] = {a.kind: a for a in (OllamaApi(), LlamaServerApi(), LMStudioApi(), ServerApi())}
KIND_TITLES = {kind: api.title for kind, api in APIS.items()}


def ollama_placement(model: dict[str, Any]) -> Placement:
    """Ollama's /api/ps: size_vram of size is the share on the GPU (0: CPU only)."""
    size, vram = model.get("size"), model.get("size_vram")
    if not isinstance(size, int) or not isinstance(vram, int) or size <= 0 or vram < 0:
        return Placement(backends_used=(), evidence="Ollama's /api/ps gave no size_vram")
    fraction = min(vram / size, 1.0)
    evidence = f"Ollama's /api/ps: size_vram {vram / 1e9:.2f} GB of {size / 1e9:.2f} GB ({fraction:.0%} on the GPU)"
    if fraction <= 0.001:
        return Placement(backends_used=("cpu",), gpu_fraction=0.0, evidence=evidence)
    # the GPU's backend is this host's GPU when the server is local (filled in by the engine)
    used: tuple[str, ...] = ("gpu",) if fraction >= 0.999 else ("gpu", "cpu")
    return Placement(backends_used=used, gpu_fraction=fraction, evidence=evidence)


def runtime_backend(runtime: str) -> str | None:
    """LM Studio's runtime name -> a backend (llama.cpp-win-x86_64-nvidia-cuda12-avx2 -> cuda)."""
    low = runtime.lower()
    return next((b for key, b in RUNTIME_BACKENDS if key in low), None)

"""One server's requests as the client makes and sees them: a completion streamed (or answered
whole), prompts no cache has seen, and the bench rows those requests give (the server's own
timings where it reports them, the client's clock beside them)."""

from __future__ import annotations

import random
import statistics
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ggprof.bench.results import BenchRow
from ggprof.engines.server.apis import Server, ServerTimings
from ggprof.engines.server.client import Client, ServerError, at_once
from ggprof.llamacpp import test_name

if TYPE_CHECKING:
    from ggprof.model.spec import ModelSpec

_WORD_TEXT = (
    "river stone amber violet copper meadow signal harbor lantern orbit velvet granite willow canyon ember "
    "falcon glacier marble quartz saffron thunder tundra walnut zephyr cobalt dune fern grove haze iris "
    "juniper kelp lotus maple nectar onyx pebble quill reef sable thistle umber vale wren yarrow"
)
WORDS = _WORD_TEXT.split()  # a prompt of these in random order is new to any cache


@dataclass
class Sample:
    """One streamed completion as the client saw it, and as the server reported it."""

    start_ns: int
    token_ns: list[int]  # arrival of each event carrying generated tokens
    n_tokens: int  # generated tokens seen by the client
    server: ServerTimings | None
    n_tokens_at_most: int = 0  # the most tokens the events seen could stand for (held-back bytes)

    @property
    def ttft_ns(self) -> int | None:
        return self.token_ns[0] - self.start_ns if self.token_ns else None

    @property
    def itl_ns(self) -> list[int]:
        return [b - a for a, b in zip(self.token_ns, self.token_ns[1:], strict=False)]


def prompt_tokens(samples: list[Sample]) -> int | None:
    """The prompt's tokens as the server counted them (the median over requests), if it said."""
    counts = [s.server.prompt_n for s in samples if s.server and s.server.prompt_n]
    return int(statistics.median(counts)) if counts else None


def client_note(samples: list[Sample]) -> str:
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


def single_rows(samples: list[Sample], n_prompt: int, n_gen: int) -> list[BenchRow]:
    """A pp row and a tg row from the same requests: the server's timings where it gave them,
    else the client's (TTFT for the prompt, first-to-last token for decode)."""
    pp_ns, tg_ns, client_ns = [], [], []
    for s in samples:
        if len(s.token_ns) > 1 and s.n_tokens > 1:  # first to last token: n_tokens - 1 intervals
            client_ns.append(max(1, int((s.token_ns[-1] - s.token_ns[0]) * n_gen / (s.n_tokens - 1))))
        t = s.server
        if t and (server_pp := t.prompt_ns(n_prompt)) is not None:
            pp_ns.append(server_pp)
        elif s.ttft_ns:
            pp_ns.append(s.ttft_ns)
        if t and (server_tg := t.gen_ns(n_gen)) is not None:
            tg_ns.append(server_tg)  # normalized to n_gen tokens
        elif len(s.token_ns) > 1 and s.n_tokens > 1:
            check_not_burst(s)  # the client's clock is all there is
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


def token_steps_ns(samples: list[Sample]) -> list[int]:
    """Per-token decode times as the client saw them, from the streams whose every event carried
    one token (where an event carries several, its gap is not one token's time)."""
    return [i for s in samples if s.n_tokens == len(s.token_ns) for i in s.itl_ns]


def drafted(samples: list[Sample]) -> tuple[int | None, int | None, int | None]:
    """Speculative decoding over the decode requests, as the server's timings count it: tokens
    drafted, those the target kept, and its verify steps (each kept its accepted drafts and one
    token of its own: steps = decoded - accepted, the first token coming from the prompt's
    logits). None where it reported no drafting."""
    said = [x.server for x in samples if x.server is not None and x.server.draft_n is not None]
    if not said:
        return None, None, None
    accepted = sum(t.draft_n_accepted or 0 for t in said)
    decoded = sum(t.gen_n or 0 for t in said)
    steps = decoded - accepted if decoded > accepted else None
    return sum(t.draft_n or 0 for t in said), accepted, steps


def decode_tok_s(s: Sample) -> float | None:
    """One request's decode rate: the server's timings, else first to last streamed token."""
    if s.server and s.server.gen_n and (ns := s.server.gen_ns(s.server.gen_n)) is not None:
        return s.server.gen_n / (ns / 1e9)
    if len(s.token_ns) > 1 and s.n_tokens > 1 and s.token_ns[-1] > s.token_ns[0]:
        check_not_burst(s)
        return (s.n_tokens - 1) / ((s.token_ns[-1] - s.token_ns[0]) / 1e9)
    return None


# Tokens that arrive closer together than this were not decoded one by one as they came: a
# proxy that buffers the stream and flushes it at once delivers a whole completion in
# microseconds (20,000 tok/s, beyond any decode at batch 1 on any device)
MIN_CLIENT_ITL_NS = 50_000
BURST_MIN_TOKENS = 8


def check_not_burst(s: Sample) -> None:
    """ServerError where a stream's tokens came in one burst: their arrival times time the
    proxy or the network, not the decode (only the server's own timings could)."""
    events = len(s.token_ns)
    if events < BURST_MIN_TOKENS:
        return
    per_token_ns = (s.token_ns[-1] - s.token_ns[0]) / (s.n_tokens - 1)
    if per_token_ns < MIN_CLIENT_ITL_NS:
        raise ServerError(
            f"{events} streamed events arrived within {(s.token_ns[-1] - s.token_ns[0]) / 1e6:.3g} ms "
            f"({per_token_ns / 1e3:.3g} us a token): a burst (a proxy that buffers the stream?), not a decode "
            "rate; the server reports no timings of its own, so nothing can be timed"
        )


def concurrent_row(rounds: list[list[Sample]], level: int, n_gen: int) -> BenchRow:
    """Each round: `level` requests at once, decoding together. The aggregate is the sum of the
    users' decode rates (as one user's row is its decode rate: prefill is the TTFT columns),
    kept as the time `level x n_gen` tokens take at that rate."""
    samples_ns, ttft, itl = [], [], []
    for samples in rounds:
        rates = [r for s in samples if (r := decode_tok_s(s)) is not None]
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


class Requester:
    """Streamed completions with prompts no cache has seen."""

    def __init__(self, server: Server, client: Client, spec: ModelSpec, timeout_s: float) -> None:
        self.server, self.client, self.spec, self.timeout_s = server, client, spec, timeout_s
        self.rng = random.Random(time.time_ns())
        self.lock = threading.Lock()
        self.runtime: str | None = None  # LM Studio names its runtime in each completion

    def _prompt(self, n_prompt: int) -> Any:
        with self.lock:
            if self.server.api.token_prompt:  # token ids: exactly n_prompt tokens, never cached
                low = min(1000, self.spec.vocab_size // 4)
                return [self.rng.randrange(low, max(self.spec.vocab_size, low + 1)) for _ in range(max(n_prompt, 1))]
            words = [self.rng.choice(WORDS) for _ in range(max(n_prompt, 1))]
            return f"{self.rng.getrandbits(64):016x} " + " ".join(words)

    def _request(self, n_prompt: int, n_gen: int) -> tuple[str, dict[str, Any]]:
        return self.server.api.request(self._prompt(n_prompt), self.server.model, n_gen)

    def one(self, n_prompt: int, n_gen: int) -> Sample:
        path, body = self._request(n_prompt, n_gen)
        api = self.server.api
        if not api.streamed:
            return self._whole(path, body)
        start = time.perf_counter_ns()
        sample = Sample(start_ns=start, token_ns=[], n_tokens=0, server=None)
        done = False
        for at, event in self.client.stream(path, body, time.monotonic() + self.timeout_s):
            n = api.tokens_in_event(event)
            if n:
                sample.token_ns.append(at)
                sample.n_tokens += n
            sample.n_tokens_at_most += api.tokens_at_most(event)
            if (t := api.timings(event)) is not None:
                sample.server = t
            done = done or api.finished(event)
        self._check_counts(sample)
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
        timings = self.server.api.timings(answer)
        runtime = answer.get("runtime")
        if isinstance(runtime, dict) and isinstance(runtime.get("name"), str):
            self.runtime = runtime["name"][:200]
        made = timings.gen_n if timings and timings.gen_n else 0
        if not made:
            raise ServerError(f"{self.server.title()}: a completion came back without tokens or stats")
        return Sample(start_ns=start, token_ns=[end], n_tokens=made, server=timings)

    def _check_counts(self, sample: Sample) -> None:
        """A streamed completion whose timings count more tokens than the stream could carry (and
        the first, sampled from the prompt's logits) contradicts itself: refused, one line. A
        real llama-server streams fewer events than tokens when it holds back bytes of a UTF-8
        character, so the bound is the text's bytes, not the events."""
        said = sample.server.gen_n if sample.server else None
        if said is not None and said > max(sample.n_tokens, sample.n_tokens_at_most) + 1:
            raise ServerError(
                f"{self.server.title()}: its timings count {said:,} generated tokens, its stream carried "
                f"{sample.n_tokens:,} (text for {sample.n_tokens_at_most:,} at the most): an answer that "
                "contradicts itself; not timed"
            )

    def together(self, level: int, n_prompt: int, n_gen: int) -> list[Sample]:
        """`level` requests sent at once, each on its own connection."""
        return at_once(lambda _: self.one(n_prompt, n_gen), level)

"""A conversation's turn on a llama-server, as `profile --server --vs-bench` measures it: the
conversation so far (its depth, random token ids) sent first and cached in the turn's slot,
then the turn (the conversation and its new prompt tokens) decoding `gen` tokens, with the
sampler chain as the server is configured or greedy, streamed or answered whole, its prompt
cached or as the server caches by default; what the server timed and what the client saw.

Every request names its slot (`id_slot`): a turn's conversation is cached where the turn runs,
and the turns that run at once each have one of their own.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from ggprof.engines.server.apis import Server, ServerTimings
from ggprof.engines.server.client import Client, ServerError, at_once

# The sampler chain emptied to one argmax: what llama-bench's decode does not do at all
GREEDY = {"samplers": ["top_k"], "top_k": 1}


@dataclass(frozen=True)
class TurnKind:
    """How a turn is asked for."""

    greedy: bool  # the chain emptied to top-k 1 (else as the server is configured)
    stream: bool  # streamed (else answered whole)
    cached: bool  # the conversation cached, as llama-bench's -d holds it (else as the server caches)

    def describe(self) -> str:
        chain = "greedy (samplers [top_k], top_k 1)" if self.greedy else "its sampler chain"
        how = "streamed" if self.stream else "answered whole"
        cache = "cache_prompt on" if self.cached else "cache_prompt as the server's default"
        return f"{chain}, {how}, {cache}"

    def body(self) -> dict[str, Any]:
        return {
            **(GREEDY if self.greedy else {}),
            "stream": self.stream,
            **({"cache_prompt": True} if self.cached else {}),
        }


@dataclass(frozen=True, kw_only=True)
class TurnResult:
    """One turn's rates (None: not measured that way)."""

    prompt_tok_s: float | None  # the turn's new tokens over the server's prompt time
    decode_tok_s: float | None  # the server's decode steps over its decode time
    client_prompt_tok_s: float | None = None  # new tokens over the time to the first streamed token
    client_decode_tok_s: float | None = None  # first to last streamed token
    prompt_n: int | None = None  # the prompt tokens the server processed


class Turns:
    """Turns of random token ids (no cache has seen them) on one llama-server."""

    def __init__(self, server: Server, client: Client, vocab_size: int, timeout_s: float) -> None:
        self.server, self.client, self.timeout_s = server, client, timeout_s
        self.rng = random.Random(time.time_ns())
        self.low, self.high = min(1000, vocab_size // 4), max(vocab_size, 2)
        self.lock = threading.Lock()

    def tokens(self, n: int) -> list[int]:
        with self.lock:
            return [self.rng.randrange(self.low, self.high) for _ in range(n)]

    def run(self, kind: TurnKind, depth: int, prompt: int, gen: int, slot: int = 0) -> TurnResult:
        """The conversation (`depth` tokens) cached in `slot`, then the turn."""
        return self._turn(kind, self._conversation(depth, slot), prompt, gen, slot)

    def together(self, kind: TurnKind, depth: int, prompt: int, gen: int, slots: int) -> list[TurnResult]:
        """`slots` turns at once, one in each slot, each after its own conversation."""
        conversations = [self._conversation(depth, s) for s in range(slots)]
        return at_once(lambda s: self._turn(kind, conversations[s], prompt, gen, s), slots)

    def _conversation(self, depth: int, slot: int) -> list[int]:
        tokens = self.tokens(depth)
        if depth:  # one token decoded after it, greedy: the slot holds the conversation
            body = {"prompt": tokens, "n_predict": 1, "cache_prompt": True, "id_slot": slot, **GREEDY}
            self.client.get_json("/completion", body, timeout_s=self.timeout_s)
        return tokens

    def _turn(self, kind: TurnKind, conversation: list[int], prompt: int, gen: int, slot: int) -> TurnResult:
        body = {
            "prompt": conversation + self.tokens(prompt),
            "n_predict": gen,
            "ignore_eos": True,
            "id_slot": slot,
            **kind.body(),
        }
        api = self.server.api
        start = time.perf_counter_ns()
        if not kind.stream:
            answer = self.client.get_json("/completion", body, timeout_s=self.timeout_s)
            timings = api.timings(answer) if isinstance(answer, dict) else None
            return _result(timings, prompt)
        arrivals: list[int] = []
        timings, tokens, done = None, 0, False
        for at, event in self.client.stream("/completion", body, time.monotonic() + self.timeout_s):
            if n := api.tokens_in_event(event):
                arrivals.append(at)
                tokens += n
            timings = api.timings(event) or timings
            done = done or api.finished(event)
        if not done:
            raise ServerError(f"{self.server.title()}: the stream ended before the completion did ({tokens} tokens)")
        result = _result(timings, prompt)
        client_prompt = prompt / ((arrivals[0] - start) / 1e9) if arrivals and arrivals[0] > start else None
        span = (arrivals[-1] - arrivals[0]) / 1e9 if len(arrivals) > 1 else 0.0
        client_decode = (tokens - 1) / span if tokens > 1 and span > 0 else None
        return TurnResult(
            prompt_tok_s=result.prompt_tok_s,
            decode_tok_s=result.decode_tok_s,
            client_prompt_tok_s=client_prompt,
            client_decode_tok_s=client_decode,
            prompt_n=result.prompt_n,
        )


def _result(t: ServerTimings | None, prompt: int) -> TurnResult:
    if t is None:
        raise ServerError("llama-server answered a completion without its timings")
    prompt_tok_s = prompt / (t.prompt_ms / 1e3) if t.prompt_ms and prompt else None
    decode_tok_s = t.gen_n / (t.gen_ms / 1e3) if t.gen_n and t.gen_ms else None
    return TurnResult(prompt_tok_s=prompt_tok_s, decode_tok_s=decode_tok_s, prompt_n=t.prompt_n)

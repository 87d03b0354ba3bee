"""Benchmark parameters and results: llama-bench's fields where the meaning is the same."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ggprof.bench.context import RunContext
from ggprof.bench.stopping import StopRule, rates
from ggprof.llamacpp import (
    ALL_LAYERS,
    CACHE_TYPE,
    N_BATCH,
    N_GEN,
    N_PROMPT,
    N_UBATCH,
    REPETITIONS,
    physical_batch,
    test_name,
)
from ggprof.runfacts import BY_NAME as RUN_FACTS
from ggprof.stats import percentile

# An adaptive run on the CPU alone warms a prompt test up with this many tokens, not the whole
# prompt (llama-bench's full-size warm-up): every weight is read and the threads woken alike,
# and the first repetition after it was no slower than after a full one (first over the later
# ones, median 1.01 vs 1.04 over 8 runs each, benchmarks/data/warmup-2026-12-01.txt). GPU
# backends keep the full size: they compile or capture work per batch shape. 32 is
# llama-bench's own earlier warm-up (the commented-out line in tools/llama-bench/llama-bench.cpp).
WARMUP_PROMPT_CPU = 32


@dataclass(frozen=True, kw_only=True)
class BenchParams:
    """What to run; defaults are llama-bench's (ggprof.llamacpp; -ngl -1: every layer)."""

    model: Path
    n_prompt: tuple[int, ...] = (N_PROMPT,)
    n_gen: tuple[int, ...] = (N_GEN,)
    n_depth: tuple[int, ...] = (0,)
    reps: int = REPETITIONS
    n_threads: int = 1
    n_gpu_layers: int = ALL_LAYERS
    flash_attn: str = "auto"
    type_k: str = CACHE_TYPE
    type_v: str = CACHE_TYPE
    n_batch: int = N_BATCH
    n_ubatch: int = N_UBATCH
    repack: str = "auto"
    timeout_s: float | None = None
    rng_seed: int = 1
    probe_threads: int | None = None  # also decode with this many threads (thread-scaling evidence)
    n_parallel: tuple[int, ...] = ()  # a batch sweep: decode this many sequences together, each
    stop: StopRule | None = None  # repeat until the answer is known (else `reps` exactly)
    rpc: tuple[str, ...] = ()  # llama.cpp rpc-servers (host:port) holding part of the model
    warmup_prompt: int | None = None  # tokens of a prompt test's warm-up (None: the whole prompt)
    tensor_split: tuple[float, ...] = ()  # share of layers per device (-ts), in llama.cpp's device order

    @property
    def flash_attn_used(self) -> bool | None:
        """Whether the run asked for flash attention (None for `auto`: llama.cpp decides)."""
        return {"on": True, "off": False}.get(self.flash_attn)

    @property
    def physical_batch(self) -> int:
        """The tokens a prompt goes through the model at once: -ub, at most -b (llama.cpp caps
        the physical batch at the logical one)."""
        return physical_batch(self.n_ubatch, self.n_batch) or self.n_ubatch

    def facts(self) -> dict[str, object]:
        """The run's facts (ggprof.runfacts) as this run sets them; repacking as llama.cpp's
        switch (None for ggprof's `auto`: the engine decides)."""
        facts = {name: getattr(self, name) for name in RUN_FACTS if hasattr(self, name)}
        return facts | {"repack": {"on": True, "off": False}.get(self.repack)}

    @property
    def max_reps(self) -> int:
        """The most repetitions a test may take (for progress bars)."""
        return self.stop.max_reps if self.stop else self.reps

    def tests(self) -> list[dict[str, object]]:
        """llama-bench's order: for each depth, the prompt tests, then the generation tests.
        A batch sweep (n_parallel) runs generation only: B sequences decoded together."""
        if self.n_parallel:
            n = self.n_gen[0]
            return [
                {"name": test_name(0, n, 0, b), "n_prompt": 0, "n_gen": n, "n_depth": 0, "n_parallel": b}
                for b in self.n_parallel
            ]
        out: list[dict[str, object]] = []
        for d in self.n_depth:
            out += [{"name": test_name(p, 0, d), "n_prompt": p, "n_gen": 0, "n_depth": d} for p in self.n_prompt if p]
            out += [{"name": test_name(0, n, d), "n_prompt": 0, "n_gen": n, "n_depth": d} for n in self.n_gen if n]
        return out

    def request(self) -> dict[str, object]:
        return {
            "model": str(self.model),
            "n_gpu_layers": self.n_gpu_layers,
            "n_threads": self.n_threads,
            "n_batch": self.n_batch,
            "n_ubatch": self.n_ubatch,
            "type_k": self.type_k,
            "type_v": self.type_v,
            "flash_attn": self.flash_attn,
            "reps": self.reps,
            "repack": self.repack,
            "rng_seed": self.rng_seed,
            "tests": self.tests(),
            "probe_threads": self.probe_threads,
            "parallel": list(self.n_parallel),
            "stop": self.stop.request() if self.stop else None,
            "rpc": list(self.rpc),
            "tensor_split": list(self.tensor_split),
            "warmup_prompt": self.warmup_prompt,
        }


@dataclass(frozen=True, kw_only=True)
class ThreadProbe:
    """The same decode with fewer threads (after the main repetitions, same context and depth)."""

    n_threads: int
    n_gen: int
    samples_ns: tuple[int, ...]

    @property
    def tok_s(self) -> float:
        return statistics.fmean(rates(self.n_gen, self.samples_ns))


@dataclass(frozen=True, kw_only=True)
class BenchRow:
    """One test (pp or tg at a depth): its repetitions and, for tg, every step's time."""

    name: str
    n_prompt: int
    n_gen: int
    n_depth: int
    samples_ns: tuple[int, ...]
    ttft_ns: tuple[int, ...] = ()
    itl_ns: tuple[int, ...] = ()
    probe: ThreadProbe | None = None
    n_parallel: int = 1  # sequences decoded together (a batch-sweep row); tok/s counts them all
    n_threads: int | None = None  # when the run swept threads
    # a server's row: the same tokens timed by the client (first to last token, n_gen tokens)
    client_samples_ns: tuple[int, ...] = ()
    stop_reason: str | None = None  # with a stop rule: how many repetitions it took and why

    @property
    def client_avg_ts(self) -> float | None:
        return statistics.fmean(rates(self.n_tokens, self.client_samples_ns)) if self.client_samples_ns else None

    @property
    def kind(self) -> str:
        return "pp" if self.n_prompt else "tg"

    @property
    def n_tokens(self) -> int:
        return (self.n_prompt + self.n_gen) * self.n_parallel

    @property
    def samples_ts(self) -> list[float]:
        return rates(self.n_tokens, self.samples_ns)

    @property
    def avg_ts(self) -> float:
        return statistics.fmean(self.samples_ts)

    @property
    def stddev_ts(self) -> float:
        return statistics.stdev(self.samples_ts) if len(self.samples_ns) > 1 else 0.0

    @property
    def avg_ns(self) -> int:
        return int(statistics.fmean(self.samples_ns))

    @property
    def stddev_ns(self) -> int:
        return int(statistics.stdev(self.samples_ns)) if len(self.samples_ns) > 1 else 0

    @property
    def cv(self) -> float:
        """Coefficient of variation of tok/s across repetitions."""
        return self.stddev_ts / self.avg_ts if self.avg_ts else 0.0

    def itl_percentile_ms(self, percent: float) -> float | None:
        """The inter-token latency at this percentile (50: the median), ms."""
        return percentile(self.itl_ns, percent / 100) / 1e6 if self.itl_ns else None

    @property
    def ttft_ms(self) -> float | None:
        return statistics.fmean(self.ttft_ns) / 1e6 if self.ttft_ns else None

    def ttft_percentile_ms(self, percent: float) -> float | None:
        return percentile(self.ttft_ns, percent / 100) / 1e6 if self.ttft_ns else None


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    model_filename: str
    model_type: str
    model_size: int
    model_n_params: int
    n_layer: int
    n_vocab: int


@dataclass(frozen=True, kw_only=True)
class BenchResult:
    params: BenchParams
    model: ModelInfo
    rows: tuple[BenchRow, ...]
    context: RunContext
    test_time: str
    elapsed_s: float
    notes: tuple[str, ...] = field(default=())

    def row(self, kind: str, depth: int = 0) -> BenchRow | None:
        """The single-sequence test of this kind at this depth (not a row of several users)."""
        return next((r for r in self.rows if r.kind == kind and r.n_depth == depth and r.n_parallel == 1), None)

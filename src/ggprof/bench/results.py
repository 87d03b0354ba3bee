"""Benchmark parameters and results: llama-bench's fields where the meaning is the same."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ggprof.bench.context import RunContext
from ggprof.llamacpp import ALL_LAYERS, CACHE_TYPE, N_BATCH, N_GEN, N_PROMPT, N_UBATCH, REPETITIONS, test_name
from ggprof.stats import mean_ci95, percentile
from ggprof.units import sig3

# llama.cpp's llama_flash_attn_type (and llama-bench's -fa values): the one map of the names.
FLASH_ATTN_TYPES = {"auto": -1, "off": 0, "on": 1}


# repetitions after which a test's spread is known well enough to tell it will not converge
NOISE_PROBE_REPS = 4
# per-token times a decode test needs before they count as samples of its speed (two
# repetitions of a 16-token probe; tg128 gives 256 after two)
MIN_STEP_SAMPLES = 32
# One repetition settles a test whose result lies this many times inside the range where its
# verdict is plausible, on both sides: no repetition is that far from the next. The widest
# ratio between two repetitions of one test in the runs kept here is 1.42x (pp512 on a busy
# 2-core VM, benchmarks/data/warmup-2026-12-01.txt); honest calibration runs varied by at most
# 11% (CV, docs/calibration-threads-2026-11-29-epyc.jsonl). Nearer its edges a verdict takes
# the interval of several repetitions.
SINGLE_REP_MARGIN = 2.0
# A decode whose interval lies wholly in the range where its verdict is plausible before any
# thread probe has its verdict without one (the probe only lowers the range's low end): the
# probe is not run, and its stop reason ends with this
PROBE_NOT_NEEDED = "no thread probe: the decode lies wholly in the range"
# An adaptive run on the CPU alone warms a prompt test up with this many tokens, not the whole
# prompt (llama-bench's full-size warm-up): every weight is read and the threads woken alike,
# and the first repetition after it was no slower than after a full one (first over the later
# ones, median 1.01 vs 1.04 over 8 runs each, benchmarks/data/warmup-2026-12-01.txt). GPU
# backends keep the full size: they compile or capture work per batch shape. 32 is
# llama-bench's own earlier warm-up (the commented-out line in tools/llama-bench/llama-bench.cpp).
WARMUP_PROMPT_CPU = 32


def range_key(kind: str, n_depth: int) -> str:
    """The name a test's plausible range goes by in StopRule.clear: "pp@0", "tg@4096"."""
    return f"{kind}@{n_depth}"


def stop_key(n_prompt: int, n_gen: int, n_depth: int) -> str | None:
    """The range_key of a prompt or a generation test; None for a test of both (llama-bench's
    pg), which has no range."""
    return range_key("pp" if n_prompt else "tg", n_depth) if bool(n_prompt) != bool(n_gen) else None


@dataclass(frozen=True, kw_only=True)
class StopRule:
    """Repeat a test until the 95% confidence interval of its mean tok/s is within `target` of
    the mean (at least `min_reps`, at most `max_reps` repetitions). None in BenchParams: a
    fixed `reps`, as llama-bench's -r."""

    min_reps: int = 2
    max_reps: int = 10
    target: float = 0.03
    # where each test's verdict is plausible whatever its noise ("tg@0", low, high tok/s, roof),
    # from the prediction made before the run: a test whose interval lies wholly inside stops,
    # as its verdict cannot change within it, if its repetitions vary by at most `clear_cv`.
    # `roof` (0: none): a decode test's thread probe, where it runs, lowers the low end to the
    # probe's tok/s x roof where that is lower (the compute roof its verdict will use)
    clear: tuple[tuple[str, float, float, float], ...] = ()
    clear_cv: float = 0.10
    # the backend the ranges were predicted for: a run that turns out to use another (a GPU
    # build that found no GPU) drops them and stops on its interval alone (`for_backends`)
    clear_backend: str = "cpu"
    single_margin: float = SINGLE_REP_MARGIN  # one repetition settles a result this far inside (0: never)

    def for_backends(self, used: Sequence[str]) -> StopRule:
        """This rule for a run on `used`: without its ranges where they were predicted for a
        backend the run does not use."""
        return self if not self.clear or self.clear_backend in used else replace(self, clear=())

    def plausible(self, key: str | None, probe_tok_s: float | None = None) -> tuple[float, float] | None:
        """Where the verdict of test `key` is plausible, after its thread probe where it had one."""
        for k, lo, hi, roof in self.clear:
            if k == key:
                return (min(lo, probe_tok_s * roof) if roof and probe_tok_s else lo), hi
        return None

    def reason(
        self,
        tok_s: list[float],
        step_ns: Sequence[float] = (),
        key: str | None = None,
        probe_tok_s: float | None = None,
    ) -> str | None:
        """Why to stop after these repetitions (None: go on). `step_ns`: a decode test's
        per-token times over all its repetitions, samples too where they are honest: when the
        repetitions agree within the target (a burst of noise between them would part them),
        the interval of the mean token time stands for the interval of tok/s. `probe_tok_s`:
        the test's thread probe, where it has run."""
        n = len(tok_s)
        plausible = self.plausible(key, probe_tok_s)
        if n == 1 and plausible is not None and self.settled(tok_s, key, probe_tok_s):
            return (
                f"stopped after 1: {sig3(tok_s[0])} tok/s lies over {self.single_margin:g}x inside the range "
                f"where its verdict is plausible ({sig3(plausible[0])}-{sig3(plausible[1])} tok/s); "
                "repetitions differ far less"
            )
        if n < self.min_reps:
            return None
        mean, half = mean_ci95(tok_s)
        if mean > 0 and half / mean <= self.target:
            return f"stopped after {n}: {interval(tok_s)}"
        if mean > 0 and len(step_ns) >= MIN_STEP_SAMPLES:
            apart = (max(tok_s) - min(tok_s)) / mean
            step, step_half = mean_ci95(step_ns)
            if apart <= self.target and step > 0 and step_half / step <= self.target:
                share = step_half / step
                return (
                    f"stopped after {n}: {sig3(mean)} +- {sig3(mean * share)} tok/s (95% CI of {len(step_ns)} "
                    f"token times, {share:.1%}; repetitions {apart:.1%} apart)"
                )
        if plausible is not None and self.wholly_plausible(tok_s, key, probe_tok_s):
            where = f"wholly where the verdict is plausible ({sig3(plausible[0])}-{sig3(plausible[1])} tok/s)"
            return f"stopped after {n}: {interval(tok_s)}, {where}"
        if n >= self.max_reps:
            return f"the cap of {n} reached: {interval(tok_s)}"
        needed = self.needed(tok_s)
        if n >= NOISE_PROBE_REPS and needed > self.max_reps:  # the cap would not get there either
            would = f"{self.target:.0%} would take about {needed} repetitions"
            return f"too noisy to pin down: {interval(tok_s)} after {n}; {would}"
        return None

    def settled(self, tok_s: Sequence[float], key: str | None, probe_tok_s: float | None = None) -> bool:
        """Whether the verdict of test `key` cannot change: one repetition over `single_margin`
        x inside the range where it is plausible, or the interval of more wholly inside it."""
        plausible = self.plausible(key, probe_tok_s)
        if plausible is None or not tok_s:
            return False
        if len(tok_s) == 1:
            lo, hi = plausible
            return bool(self.single_margin) and lo * self.single_margin < tok_s[0] < hi / self.single_margin
        return self.wholly_plausible(tok_s, key, probe_tok_s)

    def wholly_plausible(self, tok_s: Sequence[float], key: str | None, probe_tok_s: float | None = None) -> bool:
        """Whether the 95% interval of these repetitions lies wholly where the verdict of test
        `key` is plausible, the repetitions varying by at most `clear_cv`."""
        plausible = self.plausible(key, probe_tok_s)
        if plausible is None or len(tok_s) < 2:
            return False
        mean, half = mean_ci95(tok_s)
        lo, hi = plausible
        return mean > 0 and lo < mean - half and mean + half < hi and statistics.stdev(tok_s) / mean <= self.clear_cv

    def upper(self, tok_s: Sequence[float], step_ns: Sequence[float] = ()) -> float:
        """The upper end of the 95% interval of the mean tok/s (inf from one repetition): from
        the repetitions, or from the token times where they are honest (as in `reason`)."""
        mean, half = mean_ci95(tok_s)
        if mean > 0 and len(step_ns) >= MIN_STEP_SAMPLES and (max(tok_s) - min(tok_s)) / mean <= self.target:
            step, step_half = mean_ci95(step_ns)
            if step > 0:
                half = min(half, mean * step_half / step)
        return mean + half

    def needed(self, tok_s: list[float]) -> int:
        """Repetitions the target would take at this spread: n = (1.96 x CV / target)^2."""
        mean = statistics.fmean(tok_s)
        cv = statistics.stdev(tok_s) / mean if len(tok_s) > 1 and mean > 0 else 0.0
        return max(math.ceil((1.96 * cv / self.target) ** 2), 1)

    def request(self) -> dict[str, Any]:
        return {
            "min_reps": self.min_reps,
            "max_reps": self.max_reps,
            "target": self.target,
            "clear": [list(c) for c in self.clear],
            "clear_cv": self.clear_cv,
            "clear_backend": self.clear_backend,
            "single_margin": self.single_margin,
        }


def interval(tok_s: Sequence[float]) -> str:
    """`33.2 +- 4.13 tok/s (95% CI, 12.4%)`: the mean of the repetitions and its interval."""
    mean, half = mean_ci95(tok_s)
    width = f"{half / mean:.1%}" if mean > 0 else "unknown"
    return f"{sig3(mean)} +- {sig3(half)} tok/s (95% CI, {width})"


def stop_rule(request: dict[str, Any] | None) -> StopRule | None:
    """The rule a child was sent (StopRule.request), or None: a fixed count."""
    if not request:
        return None
    clear = tuple(
        (str(c[0]), float(c[1]), float(c[2]), float(c[3]) if len(c) > 3 else 0.0) for c in request.get("clear", ())
    )
    return StopRule(
        min_reps=int(request["min_reps"]),
        max_reps=int(request["max_reps"]),
        target=float(request["target"]),
        clear=clear,
        clear_cv=float(request.get("clear_cv", 0.10)),
        clear_backend=str(request.get("clear_backend", "cpu")),
        single_margin=float(request.get("single_margin", SINGLE_REP_MARGIN)),
    )


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
        return statistics.fmean(self.n_gen / (ns / 1e9) for ns in self.samples_ns)


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
        return (
            statistics.fmean(self.n_tokens / (ns / 1e9) for ns in self.client_samples_ns)
            if self.client_samples_ns
            else None
        )

    @property
    def kind(self) -> str:
        return "pp" if self.n_prompt else "tg"

    @property
    def n_tokens(self) -> int:
        return (self.n_prompt + self.n_gen) * self.n_parallel

    @property
    def samples_ts(self) -> list[float]:
        return [self.n_tokens / (ns / 1e9) for ns in self.samples_ns]

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

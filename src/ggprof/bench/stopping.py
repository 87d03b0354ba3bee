"""The stopping-and-probe policy every engine shares (the python engine's child, the llama-bench
engine, the server engine): when a test has been repeated enough, where its verdict is
plausible (PlausibleRange), and the thread probe's size and threads. One room, one home for each
of its numbers; tested once on a virtual clock (tests/test_adaptive_reps.py)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

from ggprof.stats import mean_ci95
from ggprof.units import sig3

# The thread probe: the same decode at half the threads (one doubling, the step the CPU's
# parallel efficiency was calibrated on, docs/calibration.md), PROBE_TOKENS generated tokens
# (at most the test's own), PROBE_REPS repetitions first.
PROBE_TOKENS = 16
PROBE_REPS = 2


def probe_threads(n_threads: int) -> int | None:
    """Half the threads (None below 2: nothing to halve)."""
    return max(n_threads // 2, 1) if n_threads >= 2 else None


def rates(n_tokens: int, samples_ns: Iterable[float]) -> list[float]:
    """tok/s of each repetition: `n_tokens` over its time in ns (the one home of this sum)."""
    return [n_tokens / (ns / 1e9) for ns in samples_ns]


class PlausibleRange(NamedTuple):
    """Where the verdict of one test is plausible, predicted before the run: `key` names the test
    (range_key), low to high tok/s; `roof_per_probe_tok_s` (0: none) lowers the low end to the
    thread probe's tok/s times it, once the probe has run (the compute roof its verdict will use)."""

    key: str
    low_tok_s: float
    high_tok_s: float
    roof_per_probe_tok_s: float = 0.0


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


def range_key(kind: str, n_depth: int) -> str:
    """The name a test's plausible range goes by (PlausibleRange.key): "pp@0", "tg@4096"."""
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
    # where each test's verdict is plausible whatever its noise, from the prediction made before
    # the run: a test whose interval lies wholly inside stops, as its verdict cannot change
    # within it, if its repetitions vary by at most `ranges_cv`
    ranges: tuple[PlausibleRange, ...] = ()
    ranges_cv: float = 0.10
    # the backend the ranges were predicted for: a run that turns out to use another (a GPU
    # build that found no GPU) drops them and stops on its interval alone (`for_backends`)
    ranges_backend: str = "cpu"
    single_margin: float = SINGLE_REP_MARGIN  # one repetition settles a result this far inside (0: never)

    def for_backends(self, used: Sequence[str]) -> StopRule:
        """This rule for a run on `used`: without its ranges where they were predicted for a
        backend the run does not use."""
        return self if not self.ranges or self.ranges_backend in used else replace(self, ranges=())

    def plausible(self, key: str | None, probe_tok_s: float | None = None) -> tuple[float, float] | None:
        """Where the verdict of test `key` is plausible, after its thread probe where it had one."""
        for k, lo, hi, roof in self.ranges:
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
                    f"stopped after {n}: {sig3(mean)} tok/s, 95% CI {_ci(mean, mean * share)} of {len(step_ns)} "
                    f"token times ({share:.1%}); repetitions {apart:.1%} apart"
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
        `key` is plausible, the repetitions varying by at most `ranges_cv`."""
        plausible = self.plausible(key, probe_tok_s)
        if plausible is None or len(tok_s) < 2:
            return False
        mean, half = mean_ci95(tok_s)
        lo, hi = plausible
        return mean > 0 and lo < mean - half and mean + half < hi and statistics.stdev(tok_s) / mean <= self.ranges_cv

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
        """The rule as the child's request carries it (JSON); `stop_rule` reads it back."""
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"ranges": [list(r) for r in self.ranges]}


def interval(tok_s: Sequence[float]) -> str:
    """`33.2 tok/s, 95% CI 29.1-37.3 (12.4%)`: the mean of the repetitions and its interval (as a
    range: a verdict's one +- figure is its tolerance)."""
    mean, half = mean_ci95(tok_s)
    width = f"{half / mean:.1%}" if mean > 0 else "unknown"
    return f"{sig3(mean)} tok/s, 95% CI {_ci(mean, half)} ({width})"


def _ci(mean: float, half: float) -> str:
    return f"{sig3(max(mean - half, 0.0))}-{sig3(mean + half)}"


def stop_rule(request: dict[str, Any] | None) -> StopRule | None:
    """The rule a child was sent (StopRule.request), or None: a fixed count. A field the request
    leaves out takes the dataclass's default (their one home)."""
    if not request:
        return None
    ranges = tuple(
        PlausibleRange(str(r[0]), float(r[1]), float(r[2]), *(float(x) for x in r[3:4]))
        for r in request.get("ranges", ())
    )
    default = StopRule()
    return StopRule(
        min_reps=int(request.get("min_reps", default.min_reps)),
        max_reps=int(request.get("max_reps", default.max_reps)),
        target=float(request.get("target", default.target)),
        ranges=ranges,
        ranges_cv=float(request.get("ranges_cv", default.ranges_cv)),
        ranges_backend=str(request.get("ranges_backend", default.ranges_backend)),
        single_margin=float(request.get("single_margin", default.single_margin)),
    )


@dataclass(frozen=True)
class ProbeSchedule:
    """When the thread probe of one decode test runs, for every engine alike. Its compute roof
    can only lower the low end of the range where the decode's verdict is plausible, so:
    without a range known before the run (or without a stop rule) it runs before the test;
    with one, as soon as a repetition falls below the range's low end (`during`), or after the
    test where the decode does not lie wholly inside the range without it (`after`); a decode
    wholly inside never runs it, and its stop reason says so (PROBE_NOT_NEEDED)."""

    rule: StopRule | None
    key: str | None
    wanted: bool  # the run has a probe to make (a CPU decode at more than one thread)

    @property
    def plausible(self) -> tuple[float, float] | None:
        return self.rule.plausible(self.key) if self.rule and self.wanted else None

    def before(self) -> bool:
        """Run it before the test: wanted, and no range to wait on."""
        return self.wanted and self.plausible is None

    def during(self, tok_s: Sequence[float], probed: bool) -> bool:
        """Run it now, after a repetition: not yet run, and a repetition below the range's low end."""
        plausible = self.plausible
        return plausible is not None and not probed and bool(tok_s) and min(tok_s) < plausible[0]

    def after(self, tok_s: Sequence[float], probed: bool) -> bool | None:
        """After the test, a probe not yet run: True to run it, False where the decode's verdict
        is settled without it (not needed), None where nothing is asked (no rule, no range)."""
        if self.rule is None or self.plausible is None or probed:
            return None
        return not self.rule.settled(tok_s, self.key)

"""`ggprof profile` without -r repeats each test until its tok/s is known (the 95% confidence
interval of the mean within 3%, 2 to 10 repetitions) and says how many it took and why;
`-r N` keeps llama-bench's fixed count."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from support import RunCli

from ggprof.bench.stopping import PlausibleRange, StopRule
from ggprof.engines.python import PythonEngine
from ggprof.machine.device import Detection
from ggprof.machine.host import HostReport
from ggprof.pipelines.extensions import Extensions
from ggprof.stats import mean_ci95


def test_the_confidence_interval_by_hand() -> None:
    # 1..5: mean 3, sample sd sqrt(2.5) = 1.5811, t(0.975, 4) = 2.776: half-width 2.776 x 1.5811 / sqrt(5) = 1.963
    mean, half = mean_ci95([1.0, 2.0, 3.0, 4.0, 5.0])
    assert mean == pytest.approx(3.0) and half == pytest.approx(1.963, abs=1e-3)
    assert mean_ci95([7.0])[1] == math.inf


def test_the_stop_rule() -> None:
    rule = StopRule(min_reps=2, max_reps=4, target=0.03)
    assert rule.reason([100.0]) is None  # one repetition says nothing about the spread
    # 100, 100.5: sd 0.354, t(1) = 12.706: half 3.18 = 3.2% of 100.25 -> not yet
    assert rule.reason([100.0, 100.5]) is None
    # 100, 100.2, 100.1: sd 0.1, t(2) = 4.303: half 0.248 = 0.25% -> known
    assert rule.reason([100.0, 100.2, 100.1]) == "stopped after 3: 100 tok/s, 95% CI 99.9-100 (0.2%)"
    noisy = rule.reason([100.0, 60.0, 130.0, 90.0])
    assert noisy is not None and noisy.startswith("the cap of 4 reached: 95.0 tok/s, 95% CI ")
    # a spread the cap of 10 cannot pin down to 3%: stop after 4 and say so
    wide = StopRule(min_reps=2, max_reps=10, target=0.03)
    spread = [90.0, 110.0, 100.0, 100.0]  # sd 8.16, mean 100: CV 8.2%
    reason = wide.reason(spread)
    assert reason is not None and reason.startswith("too noisy to pin down: 100 tok/s, 95% CI ")
    assert reason.endswith("3% would take about 29 repetitions")  # (1.96 x 0.0816 / 0.03)^2 = 28.4 -> 29
    # CV 1.6% after 4: (1.96 x 0.0163 / 0.03)^2 = 1.1: the target is within reach, keep going
    assert wide.needed([98.0, 102.0, 100.0, 100.0]) == 2


def test_token_times_pin_down_a_decode_test_whose_repetitions_agree() -> None:
    """Two repetitions of 128 tokens 1% apart: alone they say +-6.4% (t(1) = 12.706), but their
    256 token times (9.5 and 10.5 ms alternating: mean 10 ms, sd 0.50098 ms; t for 255 degrees
    of freedom taken at the table's 120, 1.980, the conservative side) put the mean within
    1.980 x 0.50098 / sqrt(256) = 0.0620 ms = 0.62%: 100.5 +- 0.623 tok/s, known."""
    rule = StopRule(min_reps=2, max_reps=10, target=0.03)
    steps = [9.5e6, 10.5e6] * 128
    reason = rule.reason([100.0, 101.0], steps)
    assert reason == ("stopped after 2: 100 tok/s, 95% CI 99.9-101 of 256 token times (0.6%); repetitions 1.0% apart")
    # the same token times, but the repetitions 5% apart: a burst between them, not within one
    assert rule.reason([100.0, 105.0], steps) is None
    # repetitions that agree, but 32 token times with a CV of 40%: 1.96 x 0.4 / sqrt(32) = 14%
    noisy = [6e6, 14e6] * 16
    assert rule.reason([100.0, 100.5], noisy) is None


def test_a_test_whose_interval_lies_where_the_verdict_is_plausible_stops() -> None:
    """100 and 104 tok/s: sd 2.83, t(1) = 12.706: 102 +- 25.4 (76.6-127.4), far from the 3%
    target; inside a plausible range of 10-1,000 tok/s the verdict cannot change: stop. With
    the range's low end at 90 the interval reaches across it: go on."""
    steady = StopRule(target=0.03, ranges=(PlausibleRange("pp@0", 10.0, 1000.0, 0.0),))
    reason = steady.reason([100.0, 104.0], key="pp@0")
    assert reason == (
        "stopped after 2: 102 tok/s, 95% CI 76.6-127 (24.9%), wholly where the verdict is plausible (10.0-1,000 tok/s)"
    )
    assert steady.reason([100.0, 104.0], key="tg@0") is None  # no range for that test
    edge = StopRule(target=0.03, ranges=(PlausibleRange("pp@0", 90.0, 1000.0, 0.0),))
    assert edge.reason([100.0, 104.0], key="pp@0") is None
    # repetitions 30 apart (CV 25%): RUN_TOO_NOISY territory, not a settled verdict
    assert steady.reason([100.0, 140.0], key="pp@0") is None


def host_pinned_at(ext: Extensions, bandwidth_bytes_per_s: float) -> HostReport:
    """This host as detected, its CPU's bandwidth pinned (as if measured) at the figure given."""
    from dataclasses import replace

    from ggprof.figures import Figure
    from ggprof.machine.host import describe_host

    found = describe_host(ext.backends.values(), ext.profiles, measure=False)
    pinned = Figure(bandwidth_bytes_per_s, "measured", "this test's figure")
    detections = [
        replace(d, devices=[replace(x, bandwidth=pinned) if x.backend == "cpu" else x for x in d.devices])
        for d in found.detections
    ]
    return replace(found, detections=detections)


def test_the_plausible_ranges_come_from_the_prediction_before_the_run(gemma_path: Path, ext: Extensions) -> None:
    """On this host's CPU at 90 GB/s (given): decode is plausible below the ceiling (bytes a
    token reads over 90 GB/s) plus the smallest tolerance, 5%, and above the band's low end
    less 5%; a CPU prefill has a ceiling but no band, so only the ceiling bounds it."""
    from dataclasses import replace

    from ggprof.bench.results import BenchParams
    from ggprof.engines.python import PythonEngine
    from ggprof.figures import Figure
    from ggprof.machine.target import DeviceChoice
    from ggprof.model.spec import load_model
    from ggprof.pipelines.profile import plausible_ranges

    spec = load_model(gemma_path)
    host = host_pinned_at(ext, 90e9)
    params = BenchParams(model=gemma_path, n_gpu_layers=0, n_depth=(0,))
    given = DeviceChoice(bandwidth=Figure(90e9, "user", "--bandwidth 90"))
    assert plausible_ranges(spec, params, host, given, PythonEngine(), ext) == ()  # only this host's own device
    ranges = {
        k: (lo, hi, roof)
        for k, lo, hi, roof in plausible_ranges(spec, params, host, DeviceChoice(), PythonEngine(), ext)
    }
    ceiling = 90e9 / spec.decode_bytes_per_token
    low, high, roof = ranges["tg@0"]
    assert high == pytest.approx(ceiling * 1.05, rel=1e-9) and 0 < low < ceiling
    assert roof == 0.0  # no thread probe asked for: nothing lowers the low end
    assert ranges["pp@0"][0] == 0.0 and ranges["pp@0"][1] > high and ranges["pp@0"][2] == 0.0
    # 2 threads, probed at 1: the cpu plugin's compute roof is the probe x 2 threads x its
    # calibrated parallel efficiency, 50% at the low end (docs/calibration.md), less 5%
    probed = replace(params, n_threads=2, probe_threads=1)
    (tg,) = [c for c in plausible_ranges(spec, probed, host, DeviceChoice(), PythonEngine(), ext) if c[0] == "tg@0"]
    assert tg[3] == pytest.approx(2 * 0.50 * 0.95, rel=1e-9)


def test_a_local_cpu_server_gets_the_ranges_at_its_own_threads(gemma_path: Path, ext: Extensions) -> None:
    """A llama-server on this machine whose process mapped no GPU library runs on this host's
    CPU, whatever -ngl the command line says: its decode range carries the compute roof of a
    probe at half the server's threads (4 -> 2: one doubling, 50% at the low end, less 5%).
    A server on a GPU, or on another machine, gets none: its device is not known before."""

    from ggprof.bench.results import BenchParams
    from ggprof.engines.server import Placement, Server, ServerEngine
    from ggprof.engines.server.client import Endpoint
    from ggprof.machine.target import DeviceChoice
    from ggprof.model.spec import load_model
    from ggprof.pipelines.profile import plausible_ranges

    spec = load_model(gemma_path)
    host = host_pinned_at(ext, 20e9)
    params = BenchParams(model=gemma_path, n_gpu_layers=-1, n_threads=1, n_depth=(0,))

    def engine(url: str, *backends: str) -> ServerEngine:
        e = ServerEngine(url)
        placement = Placement(backends_used=backends, n_threads=4, evidence="this test's")
        e._server = Server(
            kind="llama-server", endpoint=Endpoint.parse(url), model="m", model_file=None, placement=placement
        )
        return e

    local = engine("http://127.0.0.1:8080", "cpu")
    assert local.host_cpu_threads(host.facts) == 4
    (tg,) = [c for c in plausible_ranges(spec, params, host, DeviceChoice(), local, ext) if c[0] == "tg@0"]
    assert 0 < tg[1] < tg[2] and tg[3] == pytest.approx(2 * 0.50 * 0.95, rel=1e-9)
    assert plausible_ranges(spec, params, host, DeviceChoice(), engine("http://127.0.0.1:8080", "gpu"), ext) == ()
    assert plausible_ranges(spec, params, host, DeviceChoice(), engine("http://192.0.2.7:8080", "cpu"), ext) == ()


def test_a_server_stream_gives_token_times_only_one_token_an_event() -> None:
    """Per-token times from a stream count as samples where each event carried one token."""
    from ggprof.engines.server.requests import Sample, token_steps_ns

    one_each = Sample(start_ns=0, token_ns=[10, 30, 50], n_tokens=3, server=None)
    bunched = Sample(start_ns=0, token_ns=[10, 90], n_tokens=8, server=None)
    assert token_steps_ns([one_each, bunched]) == [20, 20]


def test_one_repetition_settles_a_result_far_inside_its_verdict() -> None:
    """Plausible from 10 to 1,000 tok/s: 100 lies 10x above the low end and 10x below the high
    one, more than the 2x margin: one repetition settles it. 600 is within 2x of 1,000 and 15
    within 2x of 10: they need the interval of several. Without a range, one never does."""
    rule = StopRule(target=0.03, ranges=(PlausibleRange("pp@0", 10.0, 1000.0, 0.0),))
    assert rule.reason([100.0], key="pp@0") == (
        "stopped after 1: 100 tok/s lies over 2x inside the range where its verdict is plausible "
        "(10.0-1,000 tok/s); repetitions differ far less"
    )
    assert rule.reason([600.0], key="pp@0") is None
    assert rule.reason([15.0], key="pp@0") is None
    assert rule.reason([100.0], key="tg@0") is None
    assert StopRule(target=0.03).reason([100.0], key="pp@0") is None


def test_the_margin_reaches_the_child() -> None:
    from ggprof.bench.stopping import stop_rule

    sent = StopRule(target=0.03, ranges=(PlausibleRange("pp@0", 10.0, 1000.0, 0.0),), single_margin=3.0)
    assert stop_rule(sent.request()) == sent
    got = stop_rule(sent.request())
    assert got is not None
    assert got.reason([200.0], key="pp@0") is not None  # 1,000 / 200 = 5x and 200 / 10 = 20x: over 3x
    assert got.reason([400.0], key="pp@0") is None  # 1,000 / 400 = 2.5x: under 3x (2x would have stopped)


def test_a_decode_probe_lowers_the_low_end_to_its_compute_roof() -> None:
    """Plausible from 30 tok/s before the run; the probe, at 20 tok/s with a roof of 1.14 per
    probe tok/s, puts the compute roof's low end at 22.8. Repetitions 34.5 and 35.5: sd
    0.707, t(1) = 12.706: 35 +- 6.35 (28.65-41.35), across 30 but inside 22.8-90."""
    rule = StopRule(target=0.03, ranges=(PlausibleRange("tg@0", 30.0, 90.0, 1.14),))
    assert rule.reason([34.5, 35.5], key="tg@0") is None
    assert rule.reason([34.5, 35.5], key="tg@0", probe_tok_s=20.0) == (
        "stopped after 2: 35.0 tok/s, 95% CI 28.6-41.4 (18.2%), wholly where the verdict is plausible (22.8-90.0 tok/s)"
    )
    # a probe whose roof lies above the band's low end changes nothing: the lower of the two
    assert rule.plausible("tg@0", probe_tok_s=40.0) == (30.0, 90.0)


@pytest.mark.slow
def test_profile_repeats_until_the_answer_is_known(gemma_path: Path, run_cli: RunCli) -> None:
    model = gemma_path
    r = run_cli("profile", str(model), "-p", "32", "-n", "16", "-t", "1", "--json", "--no-save")
    d = json.loads(r.stdout)
    for row in d["bench"]:
        assert 1 <= len(row["samples_ns"]) <= 10
        reason = row["stop_reason"]
        n = len(row["samples_ns"])
        assert reason.startswith((f"stopped after {n}: ", f"the cap of {n} reached: ", "too noisy to pin down: "))
        assert reason.startswith("too noisy") == reason.endswith("repetitions")
        # one repetition only where the result lies far inside its verdict's range
        assert (n == 1) == ("lies over 2x inside the range where its verdict is plausible" in reason)
    # --ignore-load: the rule in full whatever else runs here (a busy machine gets a shorter one)
    text = run_cli("profile", str(model), "-p", "32", "-n", "16", "-t", "1", "--no-save", "--ignore-load").stdout
    said = " ".join(text.split())  # the report wraps its lines
    assert "repetitions until tok/s is known within 3% (95% CI; 2-10) or its verdict cannot change (from 1)" in said


@pytest.mark.slow
def test_a_fixed_count_is_kept(gemma_path: Path, run_cli: RunCli) -> None:
    model = gemma_path
    d = json.loads(
        run_cli("profile", str(model), "-p", "32", "-n", "16", "-t", "1", "-r", "3", "--json", "--no-save").stdout
    )
    assert [len(row["samples_ns"]) for row in d["bench"]] == [3, 3]
    assert [row["stop_reason"] for row in d["bench"]] == [None, None]


class BuiltWith(PythonEngine):
    """The python engine as if its llama-cpp-python had been built with these backends."""

    def __init__(self, *backends: str) -> None:
        super().__init__()
        self.backends = backends

    def compiled_backends(self) -> tuple[str, ...]:
        return self.backends


def h200_host(ext: Extensions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: int = 1) -> HostReport:
    """This host's CPU with the H200 nvidia-smi recorded (tests/data/h200), `gpus` of them:
    NVML (on a machine with a GPU) and other GPU backends left out, whatever this machine has."""
    from dataclasses import replace

    from support import with_h200

    from ggprof.machine.host import describe_host

    monkeypatch.setenv("PATH", with_h200(tmp_path)["PATH"])
    monkeypatch.setattr("ggprof_backends.cuda._load_nvml", lambda: None)
    found = describe_host(ext.backends.values(), ext.profiles, measure=False)

    def copies(d: Detection) -> Detection:
        kept = [x for x in d.devices if x.backend in ("cpu", "cuda")]
        return replace(d, devices=[x for x in kept for _ in range(gpus if x.backend == "cuda" else 1)])

    detections = [copies(d) for d in found.detections]
    return replace(found, detections=detections)


def test_a_gpu_holding_every_layer_gets_its_ranges_before_the_run(
    gemma_path: Path, ext: Extensions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CUDA build on a host with one GPU (the recorded H200) and every layer offloaded: the
    device is known before the run, so decode stops where its verdict cannot change, up to
    the ceiling (bytes a token reads over the H200's bandwidth) plus 5%; no thread probe (a
    GPU's decode does not scale with the host's threads). A partial offload, a second GPU or
    a model that may not fit in the GPU's memory leave the device to the run: no ranges."""
    from dataclasses import replace

    from ggprof.bench.results import BenchParams
    from ggprof.machine.device import with_memory
    from ggprof.machine.target import DeviceChoice
    from ggprof.model.spec import load_model
    from ggprof.pipelines.profile import planned_backend, plausible_ranges

    spec = load_model(gemma_path)
    host = h200_host(ext, tmp_path, monkeypatch)
    gpu = host.device_of("cuda")
    assert gpu is not None and gpu.name == "NVIDIA H200" and gpu.bandwidth is not None
    cuda, choice = BuiltWith("cpu", "cuda"), DeviceChoice()
    params = BenchParams(model=gemma_path, n_gpu_layers=-1, n_threads=2, n_depth=(0,))
    assert planned_backend(spec, params, host, choice, cuda) == "cuda"
    ranges = {k: (lo, hi, roof) for k, lo, hi, roof in plausible_ranges(spec, params, host, choice, cuda, ext)}
    low, high, roof = ranges["tg@0"]
    ceiling = gpu.bandwidth.value / spec.decode_bytes_per_token
    assert high == pytest.approx(ceiling * 1.05, rel=1e-9) and 0 < low < ceiling and roof == 0.0
    assert 0 < ranges["pp@0"][0] < ranges["pp@0"][1]  # the GPU's prefill has a fitted band
    # the same host, a CPU-only build: the run is on the CPU whatever -ngl says
    assert planned_backend(spec, params, host, choice, BuiltWith("cpu")) == "cpu"
    assert planned_backend(spec, replace(params, n_gpu_layers=5), host, choice, cuda) is None
    assert planned_backend(spec, params, h200_host(ext, tmp_path, monkeypatch, gpus=2), choice, cuda) is None
    assert planned_backend(spec, params, host, choice, BuiltWith("cpu", "vulkan")) is None  # no Vulkan device here
    small = with_memory(gpu, spec.file_size_bytes // 2, "this test's: half the model")
    detections = [replace(d, devices=[small if x is gpu else x for x in d.devices]) for d in host.detections]
    tight = replace(host, detections=detections)
    assert planned_backend(spec, params, tight, choice, cuda) == "cuda"
    assert plausible_ranges(spec, params, tight, choice, cuda, ext) == ()


def test_ranges_for_a_gpu_are_dropped_by_a_run_on_the_cpu() -> None:
    """The rule carries the backend its ranges were predicted for, to the engine's child and
    back: a run that turns out to use another (a GPU build that found no GPU) keeps its
    interval rule and loses only the ranges."""
    from ggprof.bench.stopping import StopRule, stop_rule

    rule = StopRule(ranges=(PlausibleRange("tg@0", 100.0, 2000.0, 0.0),), ranges_backend="cuda")
    sent = stop_rule(rule.request())
    assert sent == rule
    assert rule.for_backends(("cuda", "cpu")) is rule
    assert rule.for_backends(("cpu",)) == StopRule(ranges_backend="cuda")
    # 500 tok/s, one repetition: over 2x inside 100-2000 on the GPU; on the CPU nothing settles it yet
    assert rule.reason([500.0], (), "tg@0") is not None
    assert rule.for_backends(("cpu",)).reason([500.0], (), "tg@0") is None


class VirtualLlama:
    """llama.cpp as the child calls it, on a virtual clock: a decode step on all threads takes
    `step_ms`; on the probe's one thread, the i-th probe repetition's steps take
    `probe_ms[i % len(probe_ms)]` (16 steps a repetition)."""

    def __init__(self, step_ms: float, probe_ms: list[float]) -> None:
        self.now_ns, self.threads, self.probe_steps = 0, 2, 0
        self.step_ms, self.probe_ms = step_ms, probe_ms

    def perf_counter_ns(self) -> int:
        return self.now_ns

    def llama_decode(self, ctx: object, batch: object) -> int:
        if self.threads == 1:
            self.now_ns += int(self.probe_ms[(self.probe_steps // 16) % len(self.probe_ms)] * 1e6)
            self.probe_steps += 1
        else:
            self.now_ns += int(self.step_ms * 1e6)
        return 0

    def llama_set_n_threads(self, ctx: object, n: int, n_batch: int) -> None:
        self.threads = n

    def llama_batch_get_one(self, tokens: object, n: int) -> int:
        return n

    def llama_memory_clear(self, *args: object) -> None:
        pass

    llama_synchronize = llama_free = llama_memory_clear


def virtual_row(
    monkeypatch: pytest.MonkeyPatch, step_ms: float, probe_ms: list[float], low_tok_s: float
) -> dict[str, Any]:
    """The child's tg128 at 2 threads with its probe at 1 (16 tokens a repetition), stopping
    on a range plausible from `low_tok_s` (before the probe), roof 1.14 per probe tok/s: the
    row it emits."""
    import io

    from ggprof.engines.python import child

    fake = VirtualLlama(step_ms, probe_ms)
    monkeypatch.setattr(child, "time", fake)
    monkeypatch.setattr(child.Child, "open_context", lambda self, *a, **k: setattr(self, "ctx", "ctx"))
    rule = StopRule(ranges=(PlausibleRange("tg@0", low_tok_s, 1000.0, 1.14),))
    out = io.StringIO()
    c = child.Child(out, {"n_threads": 2, "probe_threads": 1, "n_batch": 512, "n_ubatch": 512, "stop": rule.request()})
    c.ll = fake  # type: ignore[assignment]  # llama_cpp's module, as the virtual clock answers it
    c.mem, c.gpu_offload, c.n_vocab, c.bos = None, False, 100, None
    c.run_test(None, {"name": "tg128", "n_prompt": 0, "n_gen": 128, "n_depth": 0})
    rows: list[dict[str, Any]] = [json.loads(line) for line in out.getvalue().splitlines() if '"row"' in line]
    (row,) = rows
    return row


def probe_repetitions(
    monkeypatch: pytest.MonkeyPatch, step_ms: float, probe_ms: list[float], low_tok_s: float
) -> tuple[int, int]:
    """(decode repetitions, probe repetitions) of `virtual_row`."""
    row = virtual_row(monkeypatch, step_ms, probe_ms, low_tok_s)
    return len(row["samples_ns"]), len(row["probe"]["samples_ns"]) if row["probe"] else 0


def test_the_probe_repeats_only_where_the_decode_verdict_turns_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe whose two repetitions part by 15% (68 and 78 ms a token: 14.7 and 12.8 tok/s)
    is far from known within 3% (alone it would run on to 'too noisy' after 4). Its
    interval's upper end, mean 13.8 + t(1) 12.7 x sd 1.33 / sqrt 2 = 25.7 tok/s, x the roof
    1.14 puts the decode's plausible range at 29.3 tok/s and up: the decode is judged there,
    whatever the probe's noise. A third probe repetition (68 ms: mean 14.1 + 4.30 x 1.09 /
    sqrt 3 = 16.8, x 1.14 = 19.1) is run only where it can settle the decode."""
    # 60 tok/s: over 2x inside from 29.3 after one repetition: two probe repetitions do
    assert probe_repetitions(monkeypatch, 1000 / 60, [68.0, 78.0], low_tok_s=100.0) == (1, 2)
    # 40 tok/s: 2x inside only from the probe's mean (15.7 x 2 = 31.4): a third probe
    # repetition (19.1 x 2 = 38.3) settles it after one decode repetition instead of two
    assert probe_repetitions(monkeypatch, 25.0, [68.0, 78.0], low_tok_s=100.0) == (1, 3)
    # 27 tok/s: two equal decode repetitions (95% CI of 0) below 29.3: a third probe repetition
    assert probe_repetitions(monkeypatch, 1000 / 27, [68.0, 78.0], low_tok_s=100.0) == (2, 3)
    # a steady probe is known within 3% after its two repetitions: no third
    assert probe_repetitions(monkeypatch, 1000 / 27, [68.0], low_tok_s=100.0) == (2, 2)


def test_a_decode_wholly_inside_its_range_runs_no_thread_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe only lowers the low end of the range where the decode is plausible (to the
    compute roof): a decode that never falls below the range's own low end (100 tok/s here)
    has its verdict without it. The virtual clock's repetitions are equal (95% CI of 0)."""
    # 250 tok/s: over 2x inside 100-1000 after one repetition
    assert probe_repetitions(monkeypatch, 4.0, [68.0], low_tok_s=100.0) == (1, 0)
    # 150 tok/s: known after two, its interval wholly inside 100-1000
    assert probe_repetitions(monkeypatch, 1000 / 150, [68.0], low_tok_s=100.0) == (2, 0)
    # 90 tok/s, below 100 after the first repetition: the probe runs (14.7 x 1.14 = 16.8 moves
    # the low end), and the decode is settled at once from there (90 is over 2x inside 16.8)
    assert probe_repetitions(monkeypatch, 1000 / 90, [68.0], low_tok_s=100.0) == (1, 2)


def test_a_skipped_probe_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    row = virtual_row(monkeypatch, 1000 / 150, [68.0], low_tok_s=100.0)
    assert row["probe"] is None
    assert row["stop_reason"].startswith("stopped after 2: 150 tok/s, 95% CI 150-150 (0.0%)")
    assert row["stop_reason"].endswith("; no thread probe: the decode lies wholly in the range")


def test_one_probe_schedule_for_every_engine() -> None:
    """The policy the three engines share (ggprof.bench.stopping.ProbeSchedule): without a range
    the probe runs first; with one it waits for a repetition below the range's low end, and
    after the test runs only where the decode is not wholly inside the range."""
    from ggprof.bench.stopping import PlausibleRange, ProbeSchedule

    rule = StopRule(target=0.03, ranges=(PlausibleRange("tg@0", 30.0, 90.0, 1.14),))
    assert ProbeSchedule(None, "tg@0", wanted=True).before()
    assert ProbeSchedule(rule, "tg@4096", wanted=True).before()  # no range for this test
    assert not ProbeSchedule(rule, "tg@0", wanted=False).before()
    waits = ProbeSchedule(rule, "tg@0", wanted=True)
    assert not waits.before()
    assert waits.during([50.0], probed=False) is False and waits.during([29.0], probed=False) is True
    assert waits.during([29.0], probed=True) is False  # once is enough
    assert waits.after([60.0, 60.5, 60.2], probed=False) is False  # wholly inside: not needed
    assert waits.after([31.0, 45.0, 80.0], probed=False) is True  # its interval reaches below 30
    assert (
        waits.after([60.0, 60.5], probed=True) is None and ProbeSchedule(None, "tg@0", True).after([1.0], False) is None
    )

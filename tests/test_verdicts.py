"""Verdicts: `ggprof check` on reported numbers (docs/physics.md's example among them), the rules of
the backend plugins, and `ggprof profile` end to end on real llama.cpp runs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import pytest
from ggufs import LLAMA_70B_F16, Q4_8B_TIED, Shape, write_model
from support import RunCli

from ggprof.bench.context import RunContext
from ggprof.bench.results import ThreadProbe
from ggprof.figures import Figure
from ggprof.machine.device import Device, EfficiencyBand
from ggprof.machine.load import Contention
from ggprof.machine.profiles import ProfileDB
from ggprof.machine.target import device_from_profile
from ggprof.model.spec import load_model
from ggprof.physics.roofline import PredictInputs, predict
from ggprof.plugins import extensions
from ggprof.verdict.finding import JudgeCase, Verdict
from ggprof.verdict.judge import judge as judge_with

if TYPE_CHECKING:
    from typing_extensions import Unpack


def judge(case: JudgeCase) -> Verdict:
    """Judge as the CLI does: the installed backends and every plugin's extra findings."""
    ext = extensions()
    return judge_with(case, ext.backends, ext.extra_findings)


def efficiency_band(spec: object, device: Device) -> EfficiencyBand:
    return extensions().backends[device.backend].efficiency_band(None, device)


DATA = Path(__file__).parent / "data"
CHECK_KEYS = {"verdict", "findings", "decode_ceiling_tok_s", "expected_tok_s_low", "expected_tok_s_high"}


@pytest.fixture(scope="module")
def q4_8b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("m") / "8b-q4.gguf", Q4_8B_TIED)[0]


def check(run_cli: RunCli, *args: str) -> tuple[int, dict[str, Any]]:
    r = run_cli("check", *args, "--json")
    d: dict[str, Any] = json.loads(r.stdout)
    assert r.exit_code == d["exit_status"], r.stderr  # the status the verdict maps to
    return r.exit_code, d


def codes(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["code"]: f for f in d["findings"]}


@pytest.mark.parametrize("device", [["--bandwidth", "90", "--backend", "cpu"], ["--device", "ddr5-5600-dual"]])
def test_worked_example_50_impossible_13_plausible(q4_8b: Path, device: list[str], run_cli: RunCli) -> None:
    code, d = check(run_cli, str(q4_8b), "--tg", "50", *device)
    assert (code, d["verdict"]) == (4, "impossible")
    assert set(d) >= CHECK_KEYS
    f = codes(d)["DECODE_ABOVE_CEILING"]
    assert "needs 23" in f["title"] and "GB/s" in f["title"]  # 50 tok/s x 4.7 GB = ~235 GB/s
    assert f["causes"][:3] == [
        "the GPU did the work: layers were offloaded to a GPU the claim does not mention",
        "another model or quant than the one named: a smaller or more quantized file (check its size and quantization)",
        "it ran remotely (an API or another machine), not on this device",
    ]
    assert d["decode_ceiling_tok_s"] == pytest.approx(19, abs=0.6)
    code, d = check(run_cli, str(q4_8b), "--tg", "13", *device)
    assert (code, d["verdict"]) == (0, "plausible")
    assert d["expected_tok_s_low"] <= 13 <= d["expected_tok_s_high"]
    assert "DECODE_PLAUSIBLE" in codes(d)


def test_check_text_output(q4_8b: Path, run_cli: RunCli) -> None:
    r = run_cli("check", str(q4_8b), "--tg", "50", "--bandwidth", "90")
    assert r.exit_code == 4
    assert "[IMPOSSIBLE] DECODE_ABOVE_CEILING" in r.stdout and "verdict: IMPOSSIBLE (exit status 4)" in r.stdout
    assert all(len(line) <= 80 for line in r.stdout.splitlines())


def test_prefill_above_compute_ceiling(q4_8b: Path, run_cli: RunCli) -> None:
    code, d = check(run_cli, str(q4_8b), "--pp", "100000", "--device", "rtx-4090")
    assert (code, d["verdict"]) == (4, "impossible") and "PREFILL_ABOVE_CEILING" in codes(d)
    # llama.cpp on a 4090 prefills an 8B Q4 model at ~10-12k tok/s (llama.cpp discussion 15013)
    code, d = check(run_cli, str(q4_8b), "--pp", "11000", "--device", "rtx-4090")
    assert code == 0 and "PREFILL_PLAUSIBLE" in codes(d)
    code, d = check(run_cli, str(q4_8b), "--pp", "2750", "--device", "rtx-4090")  # 4x slower
    assert code == 3 and "PREFILL_BELOW_BAND" in codes(d)
    finding = codes(d)["PREFILL_BELOW_BAND"]
    assert "fitted on" in finding["expected"] and "public cuda prefill results" in finding["expected"]
    code, d = check(run_cli, str(q4_8b), "--pp", "300", "--device", "ddr5-5600-dual")
    assert (code, d["verdict"]) == (0, "unknown") and "PREFILL_NO_PEAK" in codes(d)


def test_full_offload_that_cannot_fit_is_judged_as_spill(tmp_path: Path, run_cli: RunCli) -> None:
    """141 GB on a 24 GiB card: the rest read over PCIe a token explains well under 1 tok/s; 5 tok/s
    no placement of a dense model on it explains."""
    model = write_model(tmp_path / "70b.gguf", LLAMA_70B_F16)[0]
    code, d = check(run_cli, str(model), "--tg", "5", "--device", "rtx-4090")
    assert code == 4 and "WEIGHTS_BEYOND_VRAM" in codes(d) and "DECODE_ABOVE_CEILING" in codes(d)
    code, d = check(run_cli, str(model), "--tg", "0.2", "--device", "rtx-4090")
    assert d["verdict"] != "impossible" and codes(d)["WEIGHTS_BEYOND_VRAM"]["causes"][0].startswith("spill:")
    code, d = check(run_cli, str(model), "--tg", "5", "--device", "mi300x")
    assert "MODEL_DOES_NOT_FIT" not in codes(d)


def test_missing_figures_are_unknown_never_guessed(
    q4_8b: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no vendor tools: no GPU on this host
    code, d = check(run_cli, str(q4_8b), "--tg", "10", "--backend", "cuda")
    assert (code, d["verdict"]) == (0, "unknown") and "NO_BANDWIDTH" in codes(d)
    code, d = check(run_cli, str(q4_8b), "--tg", "10", "--backend", "musa", "--bandwidth", "100")
    assert (code, d["verdict"]) == (0, "unknown") and "UNKNOWN_BACKEND" in codes(d)
    # in words too: no band is said as none, never as a band of 0-0 tok/s
    text = run_cli("check", str(q4_8b), "--tg", "10", "--backend", "musa", "--bandwidth", "100").stdout
    assert "expected not known (no band)" in text and "0-0" not in text, text
    # what no backend can do is impossible on one no plugin knows: above the bandwidth ceiling
    # (100 GB/s over the model's bytes) and above a given peak
    code, d = check(run_cli, str(q4_8b), "--tg", "500", "--backend", "musa", "--bandwidth", "100")
    assert (code, d["verdict"]) == (4, "impossible") and {"DECODE_ABOVE_CEILING", "UNKNOWN_BACKEND"} <= set(codes(d))
    code, d = check(run_cli, str(q4_8b), "--pp", "1e6", "--backend", "musa", "--bandwidth", "100", "--flops", "10")
    assert (code, d["verdict"]) == (4, "impossible") and "PREFILL_ABOVE_CEILING" in codes(d)


def cpu_device(gbs: float, llc: int | None = None) -> Device:
    return Device(
        id="cpu",
        name="test cpu",
        backend="cpu",
        memory_bytes=64 * 10**9,
        memory_source="os",
        bandwidth=Figure(gbs * 1e9, "measured"),
        llc_bytes=llc,
        memory_available_bytes=32 * 10**9,
    )


class ContextChanges(TypedDict, total=False):
    """The RunContext fields a CPU case changes."""

    n_threads: int
    physical_cores: int
    efficiency_cores: int
    simd_compiled: tuple[str, ...]
    cpu_load_during_percent: float
    ram_available_before_bytes: int
    swap_used_after_bytes: int
    page_cache_fraction_before: float
    governor: str
    cpu_freq_max_mhz: float
    cpu_freq_after_mhz: float


def cpu_case(tmp_path: Path, tg: float, device: Device, **ctx: Unpack[ContextChanges]) -> JudgeCase:
    spec = load_model(write_model(tmp_path / "m.gguf", Shape(n_layers=4, n_embd=512, n_ff=1024, vocab=2000))[0])
    p = predict(spec, device, PredictInputs(), efficiency_band(spec, device))
    context = replace(
        RunContext(
            backends_used=("cpu",),
            n_threads=8,
            physical_cores=8,
            simd_compiled=("AVX2",),
            cpu_load_during_percent=2.0,
            swap_used_before_bytes=0,
            swap_used_after_bytes=0,
            ram_available_before_bytes=32 * 10**9,
        ),
        **ctx,
    )
    return JudgeCase(
        model=spec, backend="cpu", prediction=p, measured_tg_tok_s=tg, n_prompt=512, tg_cv=0.01, context=context
    )


def test_model_in_llc_is_not_called_impossible(tmp_path: Path) -> None:
    case = cpu_case(tmp_path, 1e6, cpu_device(30, llc=256 * 2**20))
    v = judge(case)
    assert v.severity == "unknown" and v.findings[0].code == "DECODE_CEILING_NOT_APPLICABLE"
    assert case.prediction is not None
    reported = replace(
        case, prediction=replace(case.prediction, device=cpu_device(30)), context=None, source="reported"
    )
    assert judge(reported).severity == "impossible"


def test_a_run_this_machine_made_is_never_impossible_on_the_host_figure_alone(tmp_path: Path) -> None:
    """A measured run that moves more bytes per second than the host's measured bandwidth: the
    figure is what is wrong; the same number reported (`check`), or against a profile's
    bandwidth, is impossible."""
    case = cpu_case(tmp_path, 1e6, cpu_device(30))
    (f,) = [f for f in judge(case).findings if f.code == "BANDWIDTH_BELOW_RUN"]
    assert f.severity == "unknown" and judge(case).severity != "impossible"
    assert "more than the 30.0 GB/s measured on this host" in f.title and "ggprof host --refresh" in (f.next_step or "")
    assert judge(replace(case, source="reported", context=None)).severity == "impossible"
    profiled = replace(cpu_device(30), bandwidth=Figure(30e9, "profile", "ddr5-5600-dual"))
    assert case.prediction is not None
    assert judge(replace(case, prediction=replace(case.prediction, device=profiled))).severity == "impossible"


@pytest.mark.parametrize(
    ("ctx", "cause"),
    [
        ({"n_threads": 16}, "more threads (16) than physical cores (8)"),
        ({"efficiency_cores": 4}, "threads on efficiency cores: 8 threads, 4 performance cores"),
        ({"n_threads": 2}, "only 2 thread(s) of 8 performance cores"),
        ({"swap_used_after_bytes": 2 * 10**9}, "swapping: swap use grew"),
        ({"ram_available_before_bytes": 1000}, "larger than free RAM"),
        ({"simd_compiled": ("SSE3",)}, "built without AVX2/NEON"),
        ({"cpu_load_during_percent": 60.0}, "the machine was busy: other processes used 60% of the run's 8 cores"),
        ({"governor": "powersave"}, "powersave governor"),
    ],
)
def test_slow_cpu_causes_from_the_run_context(tmp_path: Path, ctx: ContextChanges, cause: str) -> None:
    v = judge(cpu_case(tmp_path, 1.0, cpu_device(50), **ctx))
    assert v.severity == "suspicious"
    f = v.findings[0]
    assert f.code == "DECODE_BELOW_BAND" and any(cause in c for c in f.causes), f.causes
    assert f.expected and f.observed == "1.00 tok/s"


def test_noisy_repetitions_are_a_cause(tmp_path: Path) -> None:
    case = replace(cpu_case(tmp_path, 1.0, cpu_device(50)), tg_cv=0.25)
    v = judge(case)
    below = next(f for f in v.findings if f.code == "DECODE_BELOW_BAND")
    assert any("noisy repetitions" in c for c in below.causes)
    noisy = next(f for f in v.findings if f.code == "RUN_TOO_NOISY")
    assert noisy.severity == "suspicious" and noisy.observed is not None and noisy.observed.startswith("25%")


def test_compute_bound_is_named_with_evidence(tmp_path: Path) -> None:
    case = cpu_case(tmp_path, 40.0, cpu_device(50), n_threads=2, physical_cores=2)
    case = replace(case, probe=ThreadProbe(n_threads=1, n_gen=16, samples_ns=(int(16 / 22.0 * 1e9),)))
    v = judge(case)
    assert v.severity == "plausible", v.findings
    note = next(f for f in v.findings if f.code == "CPU_COMPUTE_BOUND")
    assert "still rises with threads: 22.0 on 1, 40.0 on 2" in note.evidence[0]
    assert v.expected is not None and v.expected.low_tok_s <= 40 <= v.expected.high_tok_s
    assert "compute roof" in v.expected.basis


def test_gpu_partial_offload_is_the_named_cause(tmp_path: Path) -> None:
    spec = load_model(write_model(tmp_path / "8b.gguf", Q4_8B_TIED)[0])
    gpu, cpu = device_from_profile(ProfileDB.default().get("rtx-4090")), cpu_device(50)
    p = predict(spec, gpu, PredictInputs(), efficiency_band(spec, gpu), cpu)  # judged as if fully offloaded
    ctx = RunContext(backends_used=("cuda", "cpu"), n_gpu_layers_requested=20, n_gpu_layers_offloaded=20, n_layers=36)
    v = judge(
        JudgeCase(
            model=spec, backend="cuda", prediction=p, measured_tg_tok_s=20.0, n_prompt=512, tg_cv=0.02, context=ctx
        )
    )
    assert v.severity == "suspicious"
    assert v.findings[0].causes[0].startswith("partial offload: 17 of 37 layers ran on the CPU")


def test_llama_bench_results(gemma_path: Path, tmp_path: Path, run_cli: RunCli) -> None:
    """Real llama-bench output (recorded on this machine, CPU, 2 threads)."""
    src = DATA / "llama-bench-gemma3-270m.json"
    code, d = check(run_cli, str(gemma_path), "--llama-bench", str(src), "--bandwidth", "30")
    assert [row["label"] for row in d["rows"]] == ["pp64", "tg16"]
    pp, tg = d["rows"]
    assert pp["measured_pp_tok_s"] == pytest.approx(602.930606) and "PREFILL_NO_PEAK" in codes(pp)
    assert tg["measured_tg_tok_s"] == pytest.approx(48.287829)
    # 48.3 tok/s is 40% of the 121 tok/s ceiling at 30 GB/s: inside the band fitted on public CPU
    # results (a 12-channel EPYC lands at 33-45% of its published bandwidth), so plausible ...
    assert tg["verdict"] == "plausible" and list(codes(tg)) == ["DECODE_PLAUSIBLE"]
    assert "public cpu" in json.dumps(tg)
    rows = json.loads(src.read_text())
    rows[1]["avg_ts"] = 48.287829 / 2.5  # ... and the same run 2.5x slower is not
    slow = tmp_path / "slow.jsonl"
    slow.write_text("\n".join(json.dumps(r) for r in rows))
    code, d = check(run_cli, str(gemma_path), "--llama-bench", str(slow), "--bandwidth", "30")
    assert d["rows"][1]["verdict"] == "suspicious" and list(codes(d["rows"][1])) == ["DECODE_BELOW_BAND"]
    rows[1]["avg_ts"] = 500.0  # a claim 4x over the ceiling
    fake = tmp_path / "fake.jsonl"
    fake.write_text("\n".join(json.dumps(r) for r in rows))
    code, d = check(run_cli, str(gemma_path), "--llama-bench", str(fake), "--bandwidth", "30")
    assert (code, d["verdict"]) == (4, "impossible")


def test_llama_bench_bad_input(tmp_path: Path, gemma_path: Path, run_cli: RunCli) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"nope": 1}')
    r = run_cli("check", str(gemma_path), "--llama-bench", str(bad))
    assert r.exit_code == 2 and "no llama-bench rows" in r.stderr and r.stderr.count("\n") == 1
    r = run_cli("check", str(gemma_path))
    assert r.exit_code == 2 and "give --tg and/or --pp" in r.stderr


PROFILE_KEYS = {
    "verdict",
    "findings",
    "decode_ceiling_tok_s",
    "expected_tok_s_low",
    "expected_tok_s_high",
    "measured_tg_tok_s",
    "measured_pp_tok_s",
    "efficiency",
}


@pytest.mark.slow
def test_profile_gemma_end_to_end(gemma_path: Path, run_cli: RunCli) -> None:
    """An honest run of the real Gemma model on 2 threads, with the thread probe (1 thread)
    giving the compute roof the band is capped by. What holds whatever else this machine is
    running: it is never impossible, and a verdict that is not plausible names why, from what
    it measured, first among its causes: the noise of its repetitions, the other processes that shared its CPUs
    (measured while it ran), or 2 threads no faster than the probe's 1
    (contention the load counters miss: on a 2-core VM a run of 2 threads was seen at 52.9 tok/s
    against its 1-thread probe's 80.3, with 3% load measured). On a quiet machine that leaves
    plausible only."""
    r = run_cli("profile", str(gemma_path), "-p", "32", "-n", "16", "-r", "2", "-t", "2", "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == d["exit_status"] and d["verdict"] != "impossible"
    load = d["context"]["cpu_load_during_percent"]
    for f in (f for f in d["findings"] if f["severity"] not in ("plausible", "unknown")):
        named = f["code"] == "RUN_TOO_NOISY" or f["causes"][0].startswith(
            ("the machine was busy: other processes used", "noisy repetitions", "more threads did not help")
        )
        assert named, (f, load)
    ctx = d["context"]
    busy = Contention(load, ctx["usable_cores"] or ctx["physical_cores"], 2)
    assert ("CPU_OTHER_LOAD" in codes(d)) == busy.material
    assert set(d) >= PROFILE_KEYS
    assert d["efficiency"] == pytest.approx(d["measured_tg_tok_s"] / d["decode_ceiling_tok_s"])
    assert d["device"]["bandwidth_source"] == "measured"
    assert d["model"]["architecture"] == "gemma3" and d["context"]["n_threads"] == 2
    assert d["depths"][0]["probe_threads"] == 1
    text = run_cli("profile", str(gemma_path), "-p", "32", "-n", "8", "-r", "1").stdout
    assert "verdict:" in text and "pp32" in text and "tg8" in text


@pytest.mark.slow
def test_profile_oversubscribed_threads_is_named(tmp_path: Path, run_cli: RunCli) -> None:
    """A real run with 4x the cores this process may use: the run context records it and the CPU
    plugin names it with the fix, whether or not it slowed this tiny model below the band."""
    from ggprof.machine.facts import gather_facts
    from ggprof.model.synth import SHAPES
    from ggprof.model.synth import write_model as synth

    model = synth(SHAPES["tiny"], "q4_0", tmp_path / "tiny.gguf")
    facts = gather_facts()
    threads = 4 * facts.usable_cores
    r = run_cli("profile", str(model), "-p", "16", "-n", "32", "-r", "3", "-t", str(threads), "--json")
    d = json.loads(r.stdout)
    assert d["context"]["n_threads"] == threads and d["context"]["physical_cores"] == facts.physical_cores
    assert d["context"]["usable_cores"] == facts.usable_cores
    note = next(f for f in d["findings"] if f["code"] == "CPU_THREADS_OVERSUBSCRIBED")
    assert (note["observed"], note["next_step"]) == (f"-t {threads}", f"run with -t {facts.default_threads}")
    assert r.exit_code == d["exit_status"]


def test_first_touch_and_throttling_causes(tmp_path: Path) -> None:
    case = cpu_case(
        tmp_path,
        1.0,
        cpu_device(50),
        page_cache_fraction_before=0.0,
        cpu_freq_max_mhz=4000.0,
        cpu_freq_after_mhz=1200.0,
    )
    case = replace(case, tg_samples_tok_s=(0.4, 1.1, 1.2))
    causes = judge(case).findings[0].causes
    assert any(c.startswith("first-touch mmap") for c in causes)
    assert any(c.startswith("throttling: the clock ran at 1200 of 4000 MHz") for c in causes)


def test_backend_of_a_run_asks_the_plugins() -> None:
    from ggprof.pipelines.profile import backend_of

    ext = extensions()
    assert backend_of(RunContext(backends_used=("cpu",)), ext) == "cpu"
    assert backend_of(RunContext(backends_used=("cuda", "cpu")), ext) == "cuda"
    assert backend_of(RunContext(backends_used=("musa",)), ext) == "musa"  # no plugin knows it: judged unknown later

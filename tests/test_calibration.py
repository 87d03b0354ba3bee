"""The expected-speed fits on published llama.cpp results (benchmarks/data/llama-cpp-results.jsonl).

The dataset is loaded and validated row by row; the committed fits must be what a refit of
the dataset gives; a few published rows per backend are judged plausible as published and
suspicious made 2.5x (decode) or 4x (prefill) slower. The shares over the whole dataset are
printed by benchmarks/calibrate.py (docs/calibration.md)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest
from ggprof_backends.cuda import nvml_bandwidth, parse_nvidia_smi
from support import RunCli

from ggprof.calibration import committed_fits
from ggprof.errors import BadInputError
from ggprof.machine.device import BuildFacts
from ggprof.machine.profiles import ProfileDB, builtin_dir
from ggprof.physics.expected import build_codes
from ggprof.pipelines.calibrate import References, ResultRow, ceiling_unknown, judge_row, load_dataset, regress_all
from ggprof.pipelines.extensions import Extensions

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "benchmarks" / "data" / "llama-cpp-results.jsonl"
H200 = Path(__file__).parent / "data" / "h200"


@pytest.fixture(scope="module")
def refs(tmp_path_factory: pytest.TempPathFactory) -> References:
    return References(tmp_path_factory.mktemp("refs"))


@pytest.fixture(scope="module")
def profiles() -> ProfileDB:
    return ProfileDB([builtin_dir()])


@pytest.fixture(scope="module")
def rows(profiles: ProfileDB) -> list[ResultRow]:
    return load_dataset(DATASET, profiles)


def test_every_row_is_sourced_and_its_device_profiled(rows: list[ResultRow], profiles: ProfileDB) -> None:
    assert len(rows) >= 300
    assert {r.backend for r in rows} >= {"cuda", "metal", "rocm", "vulkan"}
    for r in rows:
        assert r.source.startswith(("https://", "docs/")), r.label
        assert r.profile.source, r.label  # the bandwidth, sourced
        assert r.profile.peak_flops or (r.backend, r.kind) == ("cpu", "tg"), r.label  # FLOP/s for accelerators
    for r in rows:
        if r.source.startswith("docs/"):
            assert (ROOT / r.source).is_file(), r.label  # our own measurements are kept
    assert len(profiles.all()) >= 100
    assert profiles.get("gtx-1080-ti").memory_bandwidth_gbs == 484
    assert profiles.get("apple-m2-ultra-60c").gpu_cores == 60
    assert profiles.get("apple-m2-ultra-76c").id == "apple-m2-ultra"  # an alias


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"source": None}, "dataset line 2: no 'source'"),
        ({"source": "a forum post"}, "dataset line 2: source 'a forum post' is neither"),
        ({"device": "gtx-9090"}, "dataset line 2: unknown device 'gtx-9090'"),
        ({"model_ref": "llama9-1t-q4_0"}, "dataset line 2: unknown reference model"),
        ({"test": "tg-5"}, "dataset line 2: test 'tg-5'"),
        ({"tok_s": -3}, "dataset line 2: tok_s -3"),
        ({"bandwidth_gbs": 999}, "dataset line 2: bandwidth 999 GB/s disagrees with profile"),
        ({"backend": "metal"}, "dataset line 2: backend 'metal' is not one of"),
    ],
)
def test_a_bad_row_is_rejected_naming_it(
    tmp_path: Path, profiles: ProfileDB, change: dict[str, object], message: str
) -> None:
    good = json.loads(next(line for line in DATASET.read_text().splitlines() if '"cuda"' in line))
    bad = {k: v for k, v in {**good, **change}.items() if v is not None}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(BadInputError) as e:
        load_dataset(path, profiles)
    assert str(e.value).startswith(message)


def test_committed_fits_are_a_refit_of_the_dataset(rows: list[ResultRow], refs: References) -> None:
    """Equal to the digits stored: a least-squares refit differs in the 13th-15th digit from
    one CPU, BLAS or numpy to another, which must not fail this test."""
    fresh = regress_all(rows, refs, dataset="benchmarks/data/llama-cpp-results.jsonl")
    assert fresh.differences(committed_fits()) == [], "run benchmarks/calibrate.py --write"
    decode = fresh.decode["cuda"]
    assert decode.per_unit_s > 0  # the cost per layer that a flat band misses
    assert 0.5 < 1 / decode.read_factor["q4_0"] <= 1.0


def test_one_changed_row_makes_the_committed_fits_stale(rows: list[ResultRow], refs: References) -> None:
    """The tolerance still catches a stale file: one CUDA decode row 10% faster moves the fit."""
    committed = committed_fits()
    i = next(i for i, r in enumerate(rows) if (r.backend, r.kind, r.depth) == ("cuda", "tg", 0))
    changed = [*rows[:i], replace(rows[i], tok_s=rows[i].tok_s * 1.1), *rows[i + 1 :]]
    stale = regress_all(changed, refs, dataset="benchmarks/data/llama-cpp-results.jsonl").differences(committed)
    assert any(d.startswith("/decode/cuda/") for d in stale), stale


def test_the_stored_fits_carry_meaningful_digits_only(rows: list[ResultRow], refs: References) -> None:
    """Stored with six significant digits; noise in the last bits of a float is not stored."""
    noisy = regress_all(rows, refs, dataset="x")
    cuda = noisy.decode["cuda"]
    jittered = replace(noisy, decode={**noisy.decode, "cuda": replace(cuda, per_unit_s=cuda.per_unit_s * (1 + 3e-13))})
    assert jittered.to_json() == noisy.to_json()
    assert jittered.differences(noisy) == []
    for value in json.loads(noisy.to_json())["decode"]["cuda"]["read_factor"].values():
        assert len(repr(value).replace(".", "").lstrip("0")) <= 6


# (backend, dataset rows by hardware and test): published results, judged as published and slowed
CASES = [
    ("metal", "Apple M2 Ultra 60-core GPU", "llama2-7b-q4_0"),
    ("metal", "Apple M2 Max 38-core GPU", "llama2-7b-f16"),
    ("metal", "Apple M1 7-core GPU", "llama2-7b-q8_0"),
    ("cuda", "H100 80 GB", "llama2-7b-q4_0"),
    ("cuda", "A100 80 GB", "llama2-7b-q4_0"),
    ("cuda", "GTX 1080 Ti", "llama2-7b-q4_0"),
    ("cuda", "RTX 4090", "llama2-7b-q4_0"),
    ("rocm", "AMD Radeon RX 7900 XTX", "llama3-8b-q4_k_m"),
    ("rocm", "AMD Radeon PRO W7900", "llama2-7b-q4_0"),
    # The scoreboard's current build; its March 2024 PR build reached half of that (44% of the
    # ceiling vs 82%) and is now below the band: the band follows today's llama.cpp.
    ("vulkan", "AMD Radeon RX 6700 XT", "llama2-7b-q4_0"),
    ("vulkan", "NVIDIA GeForce RTX 3090", "llama3-8b-q4_0"),  # its banner known: coopmat2 and coopmat1
    ("vulkan", "Intel Arc A770", "llama3-8b-q4_k_m"),
    ("cpu", "Intel Core i9-13900K, DDR5-6400", "llama2-7b-q4_0"),  # the band fitted on public CPU results
    ("cpu", "AMD EPYC 9274F (12 x DDR5-4800)", "llama2-7b-q4_0"),  # 33% of 460.8 GB/s: the flat band said suspicious
    ("cpu", "Intel Core Ultra 7 258V (32 GB LPDDR5X-8533)", "llama2-7b-q4_0"),
]


@pytest.mark.parametrize(("backend", "hardware", "ref"), CASES)
def test_published_rows_plausible_and_slowed_rows_suspicious(
    rows: list[ResultRow], refs: References, ext: Extensions, backend: str, hardware: str, ref: str
) -> None:
    picked = [r for r in rows if (r.backend, r.hardware, r.model_ref) == (backend, hardware, ref)]
    assert picked
    for row in picked:
        honest = judge_row(row, refs, ext)
        assert honest.severity == "plausible", (row.label, honest)
        slowed = judge_row(row, refs, ext, slowdown=2.5 if row.kind == "tg" else 4.0)
        assert slowed.severity == "suspicious", (row.label, slowed)
        assert set(slowed.codes) & {"DECODE_BELOW_BAND", "PREFILL_BELOW_BAND"}


def test_check_with_a_published_bandwidth_says_what_the_band_rests_on(
    rows: list[ResultRow], refs: References, run_cli: RunCli
) -> None:
    row = next(r for r in rows if r.hardware == "Apple M2 Ultra 60-core GPU" and r.kind == "tg")
    model = refs.spec(row.model_ref).path
    r = run_cli("check", str(model), "--tg", str(row.tok_s), "--bandwidth", "800", "--backend", "metal", "--json")
    d = json.loads(r.stdout)
    assert (r.exit_code, d["verdict"]) == (0, "plausible")
    expected = {f["code"]: f for f in d["findings"]}["DECODE_PLAUSIBLE"]["expected"]
    assert "public metal decode results (28 devices)" in expected and "residual spread" in expected
    r = run_cli("check", str(model), "--tg", str(row.tok_s / 2.5), "--bandwidth", "800", "--backend", "metal")
    assert r.exit_code == 3 and "DECODE_BELOW_BAND" in r.stdout


def test_cuda_detection_from_a_recorded_h200(profiles: ProfileDB) -> None:
    """nvidia-smi and NVML as recorded on an H200 (benchmarks/device_cuda.sh, 2026-11-29)."""
    (device,) = parse_nvidia_smi((H200 / "nvidia-smi-query.csv").read_text(), profiles)
    assert (device.name, device.profile_id, device.architecture) == ("NVIDIA H200", "h200", "hopper")
    assert device.memory_bytes == 143771 * (1 << 20)
    nvml = json.loads((H200 / "nvml.json").read_text())["devices"][0]
    bw = nvml_bandwidth(nvml["max_clock_mem_mhz"], nvml["memory_bus_width_bits"])
    assert bw.value == pytest.approx(4.814e12, rel=1e-3)  # the H200's published 4.8 TB/s
    assert "NVIDIA H200" in (H200 / "nvidia-smi-q.txt").read_text()


def test_the_fit_recovers_known_parameters() -> None:
    """Points made from TPOT = bytes x 1.25 / BW + n_layers x 40 us (+-2% noise) give back that
    law (a point it was not fitted on is predicted within 3%) and a band as wide as the noise."""
    import random

    from ggprof.calibration.regression import Point, regress

    def tpot(nbytes: float, bw: float, layers: int) -> float:
        return nbytes * 1.25 / bw + layers * 40e-6

    rng = random.Random(7)
    points = [
        Point(
            group="q4_0",
            ideal_s=nbytes / bw,
            units=layers,
            gb=nbytes / 1e9,
            device=str(bw),
            measured_s=tpot(nbytes, bw, layers) * rng.uniform(0.98, 1.02),
        )
        for bw in (100e9, 200e9, 400e9, 800e9, 1000e9, 2000e9, 3000e9)
        for nbytes, layers in ((0.7e9, 16), (3.8e9, 32), (7.2e9, 28), (13.5e9, 40))
    ]
    fit = regress("cuda", "decode", points)
    assert fit.read_factor["q4_0"] == pytest.approx(1.25, rel=0.1)
    fast, slow = fit.predicted_s("q4_0", 5e9 / 600e9, 36, 5.0)
    assert fast == slow == pytest.approx(tpot(5e9, 600e9, 36), rel=0.03)
    assert -0.04 < fit.residual_low < 0 < fit.residual_high < 0.04


def test_a_result_far_off_the_fit_is_left_out_and_named() -> None:
    """Eleven coherent results and one 6x slower (an old build, a misconfigured run): the fit and
    its band rest on the eleven, and the twelfth is named, not averaged in."""
    from ggprof.calibration.regression import Point, regress_backends
    from ggprof.physics.expected import OUTLIER_FACTOR

    def point(i: int, slow: float = 1.0) -> Point:
        ideal = 1 / (1000 + 150 * i)
        return Point(
            group="all", ideal_s=ideal, units=1.0, measured_s=ideal / 0.4 * slow * (1 + 0.01 * (i % 3)),
            device=f"gpu{i % 4}", label=f"row {i}",
        )  # fmt: skip

    coherent = [point(i) for i in range(11)]
    (fit,) = regress_backends("prefill", {"vulkan": [*coherent, point(11, slow=6.0)]})[0].values()
    assert fit.left_out == ("row 11",) and fit.n == 11 and OUTLIER_FACTOR < 6
    assert 1 / fit.read_factor["all"] == pytest.approx(0.4, rel=0.05)
    assert fit.residual_low > -0.05  # the band is as wide as the eleven, not the twelfth
    assert "1 result(s) over 4x off left out" in fit.describe()
    (clean,) = regress_backends("prefill", {"vulkan": coherent})[0].values()
    assert clean.left_out == ()


def test_an_h100_result_is_plausible_with_its_architecture_and_without(refs: References, run_cli: RunCli) -> None:
    """Llama 3 8B Q4_K_M at 144 tok/s on an H100 PCIe (XiongjieDai's published result): 31% of
    the bandwidth ceiling, which the flat band called suspicious."""
    model = str(refs.spec("llama3-8b-q4_k_m").path)
    for where in (["--device", "h100-pcie"], ["--bandwidth", "2000", "--backend", "cuda"]):
        r = run_cli("check", model, "--tg", "144.49", *where, "--json")
        assert (r.exit_code, json.loads(r.stdout)["verdict"]) == (0, "plausible"), where
        r = run_cli("check", model, "--tg", str(144.49 / 2.5), *where, "--json")
        assert (r.exit_code, json.loads(r.stdout)["verdict"]) == (3, "suspicious"), where


def test_levels_recover_known_effects_and_pull_thin_ones_toward_the_level_above() -> None:
    """Results made from known effects (+-1% noise): one class 20% faster than the other, an
    architecture of two devices 30% slower than its class, old builds at 0.6x. The fit gives
    them back, an architecture's effect pulled toward its class by how few devices show it
    (one device 2x slower moves a new device of it less than two 0.7x devices do); a term only one device has
    is not fitted; two devices are too few for levels at all."""
    import math
    import random

    from ggprof.calibration.levels import Observed, fit_levels

    rng = random.Random(3)
    obs = []
    for d in range(13):
        cls, arch = ("vendor-a discrete", "a1") if d < 6 else ("vendor-b discrete", f"b{d % 3}")
        arch = "c1" if d == 12 else arch
        effect = {"a1": math.log(1.2), "b0": math.log(0.7), "c1": math.log(0.5)}.get(arch, 0.0)
        for old in (0.0, 1.0) if d % 2 else (0.0,):
            obs.append(
                Observed(
                    residual=effect + old * math.log(0.6) + rng.uniform(-0.01, 0.01),
                    device=f"gpu{d}",
                    keys={"device": f"gpu{d}", "architecture": arch, "class": cls},
                    codes={"old build": old} if old else {},
                )
            )
    levels = fit_levels("vulkan", "decode", obs)
    assert levels is not None and levels.n_devices == 13
    assert levels.devices["architecture"] == {"a1": 6, "b0": 2, "b1": 2, "b2": 2, "c1": 1}
    assert levels.terms["old build"] == pytest.approx(math.log(0.6), abs=0.03)
    e = levels.effects
    b1 = e["class"]["vendor-b discrete"] + e["architecture"]["b1"]  # as fast as the fit

    def at(cls: str, arch: str) -> float:
        return math.exp(e["class"][cls] + e["architecture"][arch] - b1)

    assert at("vendor-a discrete", "a1") == pytest.approx(1.2, rel=0.05)
    # a new device of an architecture seen on n devices moves about n/(n+1) of the way
    assert 0.7 < at("vendor-b discrete", "b0") < 0.85  # two devices at 0.7
    assert 0.5 * 1.05 < at("vendor-b discrete", "c1") < 0.9  # one device at 0.5: pulled harder

    lone = [replace(o, codes={"old build": 1.0}) if o.device == "gpu1" else replace(o, codes={}) for o in obs]
    relevel = fit_levels("vulkan", "decode", lone)
    assert relevel is not None and "old build" not in relevel.terms  # one device: not a term
    assert fit_levels("vulkan", "decode", [o for o in obs if o.device in {"gpu0", "gpu1"}]) is None


def test_a_band_says_which_level_it_rests_on(refs: References, run_cli: RunCli) -> None:
    """The same reported speed on devices the data knows less and less of: one it holds (judged
    by its own results), one whose architecture it holds (RDNA 2 on Vulkan), one known by its
    class (no CDNA 1 card has a ROCm result, two AMD datacenter GPUs have), one known only by its
    vendor (no AMD datacenter GPU has a Vulkan result): each verdict names its level and how
    many it rests on."""
    model = str(refs.spec("llama2-7b-q4_0").path)
    said = {}
    judged = (("rx-6700-xt", "vulkan"), ("rx-6800", "vulkan"), ("mi100", "rocm"), ("mi50-32gb", "vulkan"))
    for device, backend in judged:
        r = run_cli("check", model, "--tg", "60", "--device", device, "--backend", backend, "--json")
        finding = next(f for f in json.loads(r.stdout)["findings"] if f["code"].startswith("DECODE"))
        said[device] = finding["expected"]
    assert "vulkan on rx-6700-xt itself (2 results)" in said["rx-6700-xt"]
    assert "a result of a device the fit holds" in said["rx-6700-xt"]
    assert "vulkan on the rdna2 architecture (2 devices)" in said["rx-6800"]
    assert "rocm on amd datacenter GPUs (2 devices)" in said["mi100"]
    assert "vulkan on amd GPUs of any kind (9 devices)" in said["mi50-32gb"]
    for device in ("rx-6800", "mi100", "mi50-32gb"):
        assert "a device new to the fit" in said[device]
    for text in said.values():
        assert "the build not given: taken as b4200 or later" in text


def test_an_old_build_is_judged_by_its_era(rows: list[ResultRow], refs: References, run_cli: RunCli) -> None:
    """The RX 5700 XT on the March 2024 Vulkan pull request (37.8 tok/s, PR #5835) is slow for
    today's llama.cpp (suspicious without its build) and ordinary for its own (--build, as
    llama-bench's build_number or a log's build line would give it); the same card on a 2025
    build (65.2 tok/s, PR #13324) is plausible as a current build and suspicious as an old one."""
    model = str(refs.spec("llama2-7b-q4_0").path)
    base = ["check", model, "--device", "rx-5700-xt", "--backend", "vulkan", "--json"]
    card = [r for r in rows if (r.profile.id, r.backend, r.kind) == ("rx-5700-xt", "vulkan", "tg")]
    old, new = (next(r for r in card if str(r.build.date).startswith(d)) for d in ("2024-03", "2025-05"))

    def verdict(*extra: str) -> str:
        said: str = json.loads(run_cli(*base, *extra).stdout)["verdict"]
        return said

    assert verdict("--tg", str(old.tok_s)) == "suspicious"
    assert verdict("--tg", str(old.tok_s), "--build", "b2400") == "plausible"
    assert verdict("--tg", str(new.tok_s)) == "plausible"
    assert verdict("--tg", str(new.tok_s), "--build", "5315") == "plausible"
    assert verdict("--tg", str(new.tok_s / 2.5), "--build", "5315") == "suspicious"
    r = run_cli(*base, "--tg", str(old.tok_s), "--build", "2400")
    expected = next(f for f in json.loads(r.stdout)["findings"] if f["code"].startswith("DECODE"))["expected"]
    assert "old build x0." in expected
    # build 1 is what a llama.cpp built without its git history says (the copy in llama-cpp-python): no era
    r = run_cli(*base, "--tg", str(old.tok_s), "--build", "1")
    expected = next(f for f in json.loads(r.stdout)["findings"] if f["code"].startswith("DECODE"))["expected"]
    assert json.loads(r.stdout)["verdict"] == "suspicious" and "build 1 has no git history" in expected
    for bad in ("latest", "b-1", "0", "99999999"):
        r = run_cli(*base, "--tg", "40", "--build", bad)
        assert r.exit_code == 2 and "is not a llama.cpp build number" in r.stderr and "Traceback" not in r.stderr


def test_a_build_is_dated_by_its_number() -> None:
    """A build's age, in years before b9174 (2026-06-10, the newest build a public report
    dates): by its number between two dated builds, by its date where only that is known,
    from December 2024 for a build older than the rework, 0 for a newer one, and not known
    for a build without its git history or a date that is not one."""
    newest = date(2026, 6, 10)
    assert BuildFacts(number=5315).age_years == pytest.approx((newest - date(2025, 5, 8)).days / 365.25, abs=1e-9)
    halfway = date(2025, 9, 30) + (date(2025, 12, 18) - date(2025, 9, 30)) / 2  # b6645 .. b7474
    assert BuildFacts(number=(6645 + 7474) // 2).age_years == pytest.approx((newest - halfway).days / 365.25, abs=0.003)
    assert BuildFacts(date="2025-05").age_years == pytest.approx((newest - date(2025, 5, 15)).days / 365.25)
    since_rework = (newest - date(2024, 12, 1)).days / 365.25
    assert BuildFacts(number=2145).age_years == pytest.approx(since_rework)
    assert BuildFacts(date="2024-03").age_years == pytest.approx(since_rework)
    for current in (BuildFacts(number=9174), BuildFacts(number=11065), BuildFacts(date="2026-11-30")):
        assert current.age_years == 0.0 and "build age" not in build_codes(current)
    for unknown in (BuildFacts(number=1), BuildFacts(date="last week"), BuildFacts()):
        assert unknown.age_years is None and build_codes(unknown) == {}


def test_a_prefill_is_judged_by_its_build_age(refs: References, run_cli: RunCli) -> None:
    """The Radeon Pro W7900 on Vulkan, b4327 (December 2024, KHR_coopmat): 1,813 tok/s of
    prompt is ordinary for a build that old and slow for a current one; the verdict says
    which build it assumed and what the build's age is worth."""
    model = str(refs.spec("llama2-7b-q4_0").path)
    base = ["check", model, "--device", "radeon-pro-w7900", "--backend", "vulkan", "--matrix-cores", "KHR_coopmat"]

    def judged(*extra: str) -> tuple[str, str]:
        out = json.loads(run_cli(*base, "--json", *extra).stdout)
        (finding,) = [f for f in out["findings"] if f["code"].startswith("PREFILL")]
        return out["verdict"], finding["expected"]

    verdict, expected = judged("--pp", "1813.49", "--build", "4327")
    assert verdict == "plausible" and "build age 1.5 years x0." in expected
    assert judged("--pp", str(1813.49 / 4), "--build", "4327")[0] == "suspicious"
    verdict, expected = judged("--pp", "1813.49")
    assert verdict == "suspicious" and "the build not given: taken as b9174 or later" in expected
    assert judged("--pp", "1813.49", "--build", "9174")[0] == "suspicious"


def test_an_nv_coopmat2_prefill_is_not_aged(refs: References, run_cli: RunCli) -> None:
    """The RTX 3090 on Vulkan's NV_coopmat2 path in May 2025 (PR #13506: Llama 3 8B Q4_0 at
    4,279 tok/s, a build of about b5380) ran at the share of its ceiling the same card reaches
    on 2026 builds: its band is a current build's, while the same build on KHR_coopmat is
    expected slower by the build's age (x0.52), so a third of that speed passes there and not
    on NV_coopmat2."""
    model = str(refs.spec("llama3-8b-q4_0").path)
    base = ["check", model, "--device", "rtx-3090", "--backend", "vulkan", "--json"]

    def prefill(pp: float, build: str, matrix_cores: str) -> tuple[str, str]:
        out = json.loads(run_cli(*base, "--pp", str(pp), "--build", build, "--matrix-cores", matrix_cores).stdout)
        (finding,) = [f for f in out["findings"] if f["code"].startswith("PREFILL")]
        return out["verdict"], finding["expected"]

    verdict, expected = prefill(4278.92, "5380", "NV_coopmat2")
    assert verdict == "plausible" and "no build age on NV_coopmat2" in expected
    assert prefill(4278.92 / 4, "5380", "NV_coopmat2")[0] == "suspicious"
    assert [prefill(4278.92 / 3, build, "NV_coopmat2")[0] for build in ("5380", "9174")] == ["suspicious"] * 2
    verdict, expected = prefill(4278.92 / 3, "5380", "KHR_coopmat")
    assert verdict == "plausible" and "build age 1.1 years x0." in expected


def test_llama_bench_rows_carry_their_build() -> None:
    """llama-bench's JSON names each row's build_number: its era reaches the band."""
    from ggprof.bench.llamabench import LlamaBenchRow
    from ggprof.pipelines.check import reported_from_row

    row = LlamaBenchRow(
        index=1,
        model_filename="llama-2-7b.Q4_0.gguf",
        backends="Vulkan",
        n_prompt=0,
        n_gen=128,
        n_depth=0,
        n_gpu_layers=99,
        avg_ts=37.8,
        stddev_ts=0.1,
        build_commit="abc1234",
        build_number=2400,
    )
    made = reported_from_row(row, None)
    assert made.build is not None and made.build.number == 2400
    assert reported_from_row(replace(row, build_number=None), None).build is None


def test_a_pasted_log_gives_its_build_and_vulkan_banner() -> None:
    """Two real pasted logs (tests/data/logs/SOURCES.md): a February 2024 build whose Vulkan
    banner predates the matrix-cores field (and the driver's name), and a 2025 one that names
    KHR_coopmat, int8 dot products and AMD's Windows driver."""
    from ggprof.logs.parse import parse_lines
    from ggprof.logs.text import read_log
    from ggprof.pipelines.logcheck import _context, build_facts

    logs = Path(__file__).parent / "data" / "logs"
    found = {}
    for name in ("llamacpp-5486-vulkan-rx6600m-fp16.txt", "llamacpp-13217-vulkan-780m-server.txt"):
        (run,) = parse_lines(read_log(str(logs / name)).lines).runs
        found[name] = build_facts(run, "vulkan", _context(run, "vulkan", None))
    assert found["llamacpp-5486-vulkan-rx6600m-fp16.txt"] == BuildFacts(number=2145)
    assert found["llamacpp-13217-vulkan-780m-server.txt"] == BuildFacts(
        number=5233, matrix_cores="KHR_coopmat", int_dot=True, vulkan_driver="AMD proprietary driver"
    )
    # b2145 predates the December 2024 rework: its age counts from then to b9174 (2026-06-10);
    # b5233 lies between b4696 (2025-02-12) and b5315 (2025-05-08), 537 of their 619 builds on
    old_age = (date(2026, 6, 10) - date(2024, 12, 1)).days / 365.25
    built = date(2025, 2, 12) + (date(2025, 5, 8) - date(2025, 2, 12)) * (537 / 619)
    assert build_codes(found["llamacpp-5486-vulkan-rx6600m-fp16.txt"]) == {
        "old build": 1.0,
        "build age": pytest.approx(old_age, abs=0.002),
    }
    assert build_codes(found["llamacpp-13217-vulkan-780m-server.txt"]) == {
        "build age": pytest.approx((date(2026, 6, 10) - built).days / 365.25, abs=0.005)
    }
    assert found["llamacpp-5486-vulkan-rx6600m-fp16.txt"].uses_matrix_cores("vulkan") is False  # before the kernels
    assert found["llamacpp-13217-vulkan-780m-server.txt"].uses_matrix_cores("vulkan") is True
    # `int dot: 1` on b5233: after b4696 (no kernels), before b5315 (known to have them): not known
    assert found["llamacpp-13217-vulkan-780m-server.txt"].vulkan_int_dot("q4_0") is None
    assert replace(found["llamacpp-13217-vulkan-780m-server.txt"], number=5315).vulkan_int_dot("q4_0") is True
    assert found["llamacpp-5486-vulkan-rx6600m-fp16.txt"].vulkan_int_dot("q4_0") is False  # b2145


def test_a_build_without_matrix_cores_has_the_vector_units_ceiling(
    rows: list[ResultRow], refs: References, run_cli: RunCli
) -> None:
    """The same Arc B580 on the same week's builds (PR #14001, Windows): 490.89 tok/s pp512
    before the PR (matrix cores: none) and 1631.44 after (KHR_coopmat). Each is judged on the
    ceiling of the units it used: the XMX peak with matrix cores, twice the FP32 rate without
    (b5583: k-quants had no int8 dot kernels yet); without the banner the band reaches down to
    the vector units' ceiling and says why."""
    model = str(refs.spec("gemma2-2b-q4_k_m").path)
    card = {r.build.matrix_cores: r for r in rows if (r.profile.id, r.kind) == ("arc-b580", "pp")}
    base = ["check", model, "--device", "arc-b580", "--backend", "vulkan", "--json"]

    def judged(tok_s: float, *extra: str) -> tuple[str, float, str]:
        out = json.loads(run_cli(*base, "--pp", str(tok_s), *extra).stdout)
        finding = next(f for f in out["findings"] if f["code"].startswith("PREFILL"))
        return out["verdict"], out["predictions"][0]["peak_flops_per_s"], finding["expected"]

    profile = card["none"].profile
    assert profile.peak_fp32_tflops is not None and profile.peak_fp16_tflops is not None
    verdict, peak, _ = judged(card["none"].tok_s, "--matrix-cores", "none", "--build", str(card["none"].build.number))
    assert verdict == "plausible"
    assert peak == pytest.approx(2 * profile.peak_fp32_tflops * 1e12, rel=1e-6)
    coopmat_build = ("--build", str(card["KHR_coopmat"].build.number))
    verdict, peak, _ = judged(card["KHR_coopmat"].tok_s, "--matrix-cores", "KHR_coopmat", *coopmat_build)
    assert verdict == "plausible"
    assert peak == pytest.approx(profile.peak_fp16_tflops * 1e12, rel=1e-6)
    assert judged(card["KHR_coopmat"].tok_s / 4, "--matrix-cores", "KHR_coopmat", *coopmat_build)[0] == "suspicious"
    # Without the banner the slower run may be a build without matrix cores: not flagged, and said
    verdict, peak, expected = judged(card["KHR_coopmat"].tok_s / 4, *coopmat_build)
    assert verdict == "plausible" and peak == pytest.approx(profile.peak_fp16_tflops * 1e12, rel=1e-6)
    assert "matrix cores not known" in expected and "--matrix-cores" in expected
    # the banner is Vulkan's: given for another backend it is a usage error, not silently ignored
    r = run_cli("check", model, "--device", "arc-b580", "--backend", "cuda", "--pp", "400", "--matrix-cores", "none")
    assert r.exit_code == 2 and "give it with --backend vulkan" in r.stderr and "Traceback" not in r.stderr


def test_rocm_quantized_prompts_are_judged_on_the_int8_dot_units(refs: References, run_cli: RunCli) -> None:
    """llama.cpp's HIP backend multiplies quantized weights with its MMQ kernels, in int8 dot
    products (v_dot4 on RDNA 2 and Vega 20, four times the FP32 rate): on ROCm an RX 6700 XT's
    and an MI50's Q4_0 prompt is judged on that rate, an F16 prompt (rocBLAS) on the packed-FP16
    vector units, and an RDNA 1 card (no dot4) on its vector units whatever the weights."""
    profiles = ProfileDB([builtin_dir()])

    def peak(device: str, ref: str) -> tuple[float, str]:
        out = json.loads(
            run_cli(
                "check", str(refs.spec(ref).path), "--device", device, "--backend", "rocm", "--pp", "500", "--json"
            ).stdout
        )
        return out["predictions"][0]["peak_flops_per_s"], out["predictions"][0]["peak_flops_source"]

    for device in ("rx-6700-xt", "mi50-32gb"):
        fp32 = profiles.get(device).peak_fp32_tflops
        assert fp32 is not None
        flops, source = peak(device, "llama2-7b-q4_0")
        assert flops == pytest.approx(4 * fp32 * 1e12, rel=1e-6) and "HIP kernels run q4_0 weights" in source
        assert peak(device, "llama2-7b-f16")[0] == pytest.approx(profiles.get(device).peak_flops or 0.0, rel=1e-6)
    rdna1 = profiles.get("rx-5700-xt")
    assert peak("rx-5700-xt", "llama2-7b-q4_0")[0] == pytest.approx(rdna1.peak_flops or 0.0, rel=1e-6)
    # the same 6700 XT on Vulkan with a build known to be without the int8 kernels: the vector ceiling
    vulkan = json.loads(
        run_cli(
            "check",
            str(refs.spec("llama2-7b-q4_0").path),
            "--device",
            "rx-6700-xt",
            "--backend",
            "vulkan",
            "--pp",
            "500",
            "--build",
            "4000",
            "--json",
        ).stdout
    )
    assert vulkan["predictions"][0]["peak_flops_per_s"] == pytest.approx(
        2 * (profiles.get("rx-6700-xt").peak_fp32_tflops or 0) * 1e12, rel=1e-6
    )


def test_vulkan_int8_dot_kernels_are_known_by_banner_build_and_weights() -> None:
    """llama.cpp's Vulkan int8 dot-product matrix kernels: the legacy quants' since PR #12135
    (none in b4696, in b5315), the k-quants' since PR #16536 (none in b6645, in b7189), none for
    f16; the banner's `int dot: 0` rules them out, `int dot: 1` on a build known to have them
    rules them in, anything less (a build between) is not known."""
    assert BuildFacts(number=5500, int_dot=True).vulkan_int_dot("q4_0") is True
    assert BuildFacts(number=5500, int_dot=True).vulkan_int_dot("q8_0") is True
    assert BuildFacts(number=5500, int_dot=True).vulkan_int_dot("k") is False  # before the k-quants' kernels
    assert BuildFacts(number=7000, int_dot=True).vulkan_int_dot("k") is None  # between: the merge not dated
    assert BuildFacts(number=7189, int_dot=True).vulkan_int_dot("k") is True
    assert BuildFacts(number=5000, int_dot=True).vulkan_int_dot("q4_0") is None
    assert BuildFacts(number=4696, int_dot=True).vulkan_int_dot("q4_0") is False  # the last build without
    assert BuildFacts(number=9000, int_dot=True).vulkan_int_dot("f16") is False
    assert BuildFacts(number=9000, int_dot=False).vulkan_int_dot("q4_0") is False
    assert BuildFacts(date="2024-03").vulkan_int_dot("q4_0") is False  # an old build by its date
    assert BuildFacts(number=9000).vulkan_int_dot("q4_0") is None  # no banner
    assert BuildFacts(int_dot=True).vulkan_int_dot("q4_0") is None  # no build number
    assert BuildFacts(date="2024-12").vulkan_int_dot("q4_0") is None  # a month whose builds may be later


def test_int8_dot_products_set_the_vulkan_ceiling_of_a_chip_without_matrix_cores(
    rows: list[ResultRow], refs: References, run_cli: RunCli
) -> None:
    """The RX 6700 XT (RDNA 2: no matrix cores; V_DOT4_I32_I8 at four times its FP32 rate, twice
    its packed FP16) on Vulkan, Llama 2 7B Q4_0: a build that ran the int8 dot kernels is judged
    on their ceiling, one that did not on the vector units', and where the banner or the build
    is missing the band reaches down from the first to the second and says why. A speed above
    the vector ceiling is impossible only for a build known to be without the kernels. The
    scoreboard's 1051 tok/s (a build of December 2024 or later, no banner) is such a row."""
    model = str(refs.spec("llama2-7b-q4_0").path)
    profile = ProfileDB([builtin_dir()]).get("rx-6700-xt")
    assert profile.peak_fp32_tflops is not None
    vector, dot = 2 * profile.peak_fp32_tflops * 1e12, 4 * profile.peak_fp32_tflops * 1e12
    base = ["check", model, "--device", "rx-6700-xt", "--backend", "vulkan", "--json"]

    def judged(tok_s: float, *extra: str) -> tuple[str, float, str, str]:
        out = json.loads(run_cli(*base, "--pp", str(tok_s), *extra).stdout)
        finding = next(f for f in out["findings"] if f["code"].startswith("PREFILL"))
        source = out["predictions"][0]["peak_flops_source"]
        return out["verdict"], out["predictions"][0]["peak_flops_per_s"], finding["expected"], source

    verdict, peak, expected, source = judged(1051.2, "--build", "5500", "--int-dot", "1")
    assert verdict == "plausible" and peak == pytest.approx(dot, rel=1e-6)
    assert "int8 dot-product units (the build ran them on q4_0 weights)" in source
    assert "not known" not in expected
    assert judged(1051.2, "--build", "5500", "--int-dot", "0")[1] == pytest.approx(vector, rel=1e-6)
    assert judged(1051.2, "--build", "4000")[1] == pytest.approx(vector, rel=1e-6)  # before the kernels
    verdict, peak, expected, _ = judged(1051.2)
    assert verdict == "plausible" and peak == pytest.approx(dot, rel=1e-6)
    assert "int8 dot products not known" in expected and "--int-dot" in expected

    # the unknown band reaches the vector ceiling's share of it: lower than the known one's
    def low(expected: str) -> float:
        return float(expected.split(" tok/s to ")[0].replace(",", ""))

    low_known = low(judged(1051.2, "--build", "9174", "--int-dot", "1")[2])  # a current build, as the unknown
    assert low(expected) == pytest.approx(low_known * vector / dot, rel=0.02)
    # above the vector ceiling (1958 tok/s on this model): impossible only without the kernels
    ceiling_tok_s = vector / (2 * refs.spec("llama2-7b-q4_0").active_params)
    fast = str(round(1.2 * ceiling_tok_s))
    assert judged(float(fast), "--build", "5500", "--int-dot", "0")[0] == "impossible"
    assert judged(float(fast), "--build", "5500", "--int-dot", "1")[0] != "impossible"
    # k-quants had no int8 dot kernels on b5500; an RDNA 3 card's dot rate is no faster than its peak
    k_model = str(refs.spec("llama2-7b-q4_k_m").path)
    out = json.loads(run_cli("check", k_model, *base[2:], "--pp", "900", "--build", "5500", "--int-dot", "1").stdout)
    assert out["predictions"][0]["peak_flops_per_s"] == pytest.approx(vector, rel=1e-6)
    xtx = ProfileDB([builtin_dir()]).get("rx-7900-xtx")
    out = json.loads(
        run_cli("check", model, "--device", "rx-7900-xtx", "--backend", "vulkan", "--pp", "3000", "--json").stdout
    )
    assert out["predictions"][0]["peak_flops_per_s"] == pytest.approx(xtx.peak_flops, rel=1e-6)
    # a peak given by hand is the ceiling, whatever the build ran
    out = json.loads(run_cli(*base, "--pp", "1051.2", "--flops", "30", "--matrix-cores", "none").stdout)
    assert out["predictions"][0]["peak_flops_per_s"] == pytest.approx(30e12, rel=1e-6)
    r = run_cli("check", model, "--device", "rx-6700-xt", "--backend", "rocm", "--pp", "900", "--int-dot", "1")
    assert r.exit_code == 2 and "give it with --backend vulkan" in r.stderr and "Traceback" not in r.stderr
    # the dataset: the scoreboard row's ceiling is not known, the 2024-03 PR row's (an old build) is
    card = [r for r in rows if (r.profile.id, r.backend, r.kind) == ("rx-6700-xt", "vulkan", "pp")]
    why = {r.tok_s: ceiling_unknown(r, refs.spec(r.model_ref)) for r in card}
    assert why == {1051.2: "int8 dot products unknown", 425.07: None}


def test_a_vendor_level_judges_a_class_the_data_lacks() -> None:
    """A device whose vendor has results but whose class (integrated or discrete) and
    architecture have none rests on the vendor level, and says so; a device of a class the
    data holds adds its class's effect to its vendor's."""
    from ggprof.machine.target import device_from_profile
    from ggprof.physics.expected import Levels

    profiles = ProfileDB([builtin_dir()])
    levels = Levels(
        backend="vulkan",
        kind="prefill",
        effects={"device": {}, "architecture": {}, "class": {"nvidia discrete": 0.5}, "vendor": {"nvidia": -0.25}},
        devices={"device": {}, "architecture": {}, "class": {"nvidia discrete": 6}, "vendor": {"nvidia": 6}},
        terms={},
        spread_low=-0.5,
        spread_high=0.5,
        device_spread_low=-0.2,
        device_spread_high=0.2,
        shrink_devices=1.0,
        n=12,
        n_devices=6,
    )
    orin = device_from_profile(profiles.get("jetson-agx-orin"))
    total, low, high, why = levels.offset(orin)
    assert levels.level_of(orin) == "vendor"
    assert total == pytest.approx(-0.25)
    assert (low, high) == pytest.approx((-0.5, 0.5))
    assert "vulkan on nvidia GPUs of any kind (6 devices)" in why
    discrete = device_from_profile(profiles.get("rtx-3090"))
    assert levels.level_of(discrete) == "class"
    assert levels.offset(discrete)[0] == pytest.approx(0.25)  # its class on top of its vendor


def test_a_generation_level_carries_an_architecture_to_its_other_class() -> None:
    """Results made from known effects (+-1% noise): an Intel generation 2x slower than the
    vendor's other generation, shown only on its discrete cards (xe2-hpg), a second Intel
    generation (xe-hpg) at the vendor's pace, NVIDIA cards between. A new device of the slow
    generation's integrated architecture (the Arc 140V: xe2-lpg, no result of its architecture
    or its class) rests on the generation and is predicted slower than the same fit without the
    generation level predicts it (the vendor's share alone); with one architecture behind the
    generation, the fit cannot tell the generation's part of the effect from the architecture's
    and gives the sibling part of it, so it stays above its siblings' pace."""
    import math
    import random

    from ggprof.calibration.levels import Observed, fit_levels
    from ggprof.machine.target import device_from_profile

    rng = random.Random(5)
    made = [("xe2-hpg", "xe2", "intel discrete", math.log(0.5))] * 3
    made += [("xe-hpg", "xe", "intel discrete", 0.0)] * 3 + [("ada", "ada", "nvidia discrete", math.log(0.8))] * 3
    obs = [
        Observed(
            residual=effect + rng.uniform(-0.01, 0.01),
            device=f"gpu{d}",
            keys={"device": f"gpu{d}", "architecture": arch, "generation": gen, "class": cls, "vendor": cls.split()[0]},
            codes={},
        )
        for d, (arch, gen, cls, effect) in enumerate(made)
    ]
    levels = fit_levels("vulkan", "prefill", obs)
    without = fit_levels(
        "vulkan", "prefill", [replace(o, keys={k: v for k, v in o.keys.items() if k != "generation"}) for o in obs]
    )
    assert levels is not None and without is not None
    assert levels.devices["generation"] == {"ada": 3, "xe": 3, "xe2": 3}
    lunar_lake = device_from_profile(ProfileDB([builtin_dir()]).get("arc-140v"))
    assert (levels.level_of(lunar_lake), without.level_of(lunar_lake)) == ("generation", "vendor")
    total, _, _, why = levels.offset(lunar_lake)
    assert 0.5 < math.exp(total) < math.exp(without.offset(lunar_lake)[0]) - 0.05
    assert "vulkan on the xe2 generation (3 devices)" in why


def test_a_band_rests_on_a_generation_the_data_holds(rows: list[ResultRow], refs: References, run_cli: RunCli) -> None:
    """An A100 on Vulkan: no Vulkan result of a datacenter Ampere part, but the generation's
    GeForce cards have them, so its decode band rests on the Ampere generation and says on
    how many devices."""
    ampere = {
        r.profile.id for r in rows if (r.backend, r.kind) == ("vulkan", "tg") and r.profile.architecture == "ampere"
    }
    assert not {r for r in rows if (r.backend, r.profile.architecture) == ("vulkan", "ampere-datacenter")}
    model = str(refs.spec("llama2-7b-q4_0").path)
    r = run_cli("check", model, "--tg", "60", "--device", "a100-80gb", "--backend", "vulkan", "--json")
    finding = next(f for f in json.loads(r.stdout)["findings"] if f["code"].startswith("DECODE"))
    assert ampere and f"vulkan on the ampere generation ({len(ampere)} device" in finding["expected"]
    assert "a device new to the fit" in finding["expected"]

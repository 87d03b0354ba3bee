"""What a build does on one device (benchmarks/data/build-effects.jsonl: a Radeon 8060S's
llama-bench results from two public repositories, builds, drivers and rocBLAS settings side by
side) and the causes a slow prompt names from those facts: rocBLAS without hipBLASLt on ROCm,
flash attention on a ROCm build without rocWMMA's kernels, the AMDVLK driver on Vulkan, and
Asahi's Honeykrisp driver (its figures from the scoreboard rows
of benchmarks/data/llama-cpp-results.jsonl). The figures the causes quote are the files'; the
verdicts are those of the real pasted logs and of `ggprof check`."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from ggprof_backends import _diagnosis
from ggprof_backends.rocm import FLASH_ATTN_NO_ROCWMMA, HIPBLASLT_OFF, HIPBLASLT_UNKNOWN, HIPBLASLT_UNSET
from ggprof_backends.vulkan import AMDVLK, AMDVLK_SLOW, HONEYKRISP, HONEYKRISP_SLOW
from support import RunCli

from ggprof.machine.profiles import ProfileDB, builtin_dir
from ggprof.pipelines.calibrate import References, ResultRow, load_dataset

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "build-effects.jsonl"
RESULTS = ROOT / "benchmarks" / "data" / "llama-cpp-results.jsonl"
LOGS = Path(__file__).parent / "data" / "logs"


@pytest.fixture(scope="module")
def rows() -> list[ResultRow]:
    return load_dataset(DATA, ProfileDB([builtin_dir()]))


@pytest.fixture(scope="module")
def refs(tmp_path_factory: pytest.TempPathFactory) -> References:
    return References(tmp_path_factory.mktemp("refs"))


def facts(r: ResultRow) -> dict[str, object]:
    """The row's build facts, as the file gives them."""
    given = r.raw["build_facts"]
    assert isinstance(given, dict), r.label
    return given


def number(r: ResultRow) -> int:
    """The row's build number (every row of the file has one)."""
    assert r.build.number is not None, r.label
    return r.build.number


def pairs(rows: list[ResultRow], fact: str, base: str) -> list[tuple[ResultRow, ResultRow]]:
    """(row, its pair with `fact` set to `base`): prefill results of one source, build and flash
    attention whose other build facts are the same."""

    def key(r: ResultRow) -> tuple[object, ...]:
        others = dict(facts(r))
        others.pop(fact)
        return (r.source.split("/blob/")[0], r.raw["build_number"], r.raw["flash_attn"], tuple(sorted(others.items())))

    pp = [r for r in rows if r.kind == "pp" and fact in facts(r)]
    on = {key(r): r for r in pp if facts(r)[fact] == base}
    return [(r, on[key(r)]) for r in pp if facts(r)[fact] != base and key(r) in on]


def test_every_row_is_sourced_at_a_commit_and_records_its_build(rows: list[ResultRow]) -> None:
    assert len(rows) >= 100 and {r.profile.id for r in rows} == {"ryzen-ai-max-395"}
    for r in rows:
        assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/\S+", r.source), r.label
        assert r.build.known_number is not None and r.raw.get("build_facts"), r.label
        if r.backend == "rocm":
            assert r.build.rocblas_use_hipblaslt in ("0", "1", "unset"), r.label
        else:
            assert r.build.vulkan_driver in (AMDVLK, "radv"), r.label


def test_the_figures_the_causes_quote_are_the_files_pairs(rows: list[ResultRow]) -> None:
    """hipBLASLt off against on, one run's other facts the same: about a third with ROCm 6.4.3
    (and unset on the builds of 2025-08, which meant the same), nearly even from 6.4.4; AMDVLK
    against RADV: ahead up to the last build the diagnosis names, far behind at b9187."""
    ratios: dict[str, list[float]] = {"old": [], "new": []}
    for off, on in pairs(rows, "rocblas_use_hipblaslt", "1"):
        rocm = facts(off).get("rocm", "")
        ratios["old" if rocm in ("", "6.4.3") else "new"].append(off.tok_s / on.tok_s)
    assert len(ratios["old"]) >= 8 and len(ratios["new"]) >= 8
    assert statistics.median(ratios["old"]) == pytest.approx(_diagnosis.HIPBLASLT_OFF_PREFILL_OLD_ROCM, abs=0.01)
    assert statistics.median(ratios["new"]) == pytest.approx(_diagnosis.HIPBLASLT_OFF_PREFILL_NEW_ROCM, abs=0.01)
    by_build = {(number(amdvlk), amdvlk.raw["flash_attn"]): amdvlk.tok_s / radv.tok_s
                for amdvlk, radv in pairs(rows, "vulkan_driver", "radv")}  # fmt: skip
    assert by_build[(9187, 1)] == pytest.approx(_diagnosis.AMDVLK_PREFILL_VS_RADV, abs=0.01)
    ahead = [number for (number, _), ratio in by_build.items() if ratio > 1]
    assert max(ahead) == _diagnosis.AMDVLK_AHEAD_UNTIL_BUILD
    assert all(ratio < 1 for (number, _), ratio in by_build.items() if number > max(ahead))


def checked_log(name: str) -> dict[str, Any]:
    from support import in_process

    r = in_process("check", "--log", str(LOGS / name), "--json")
    assert "Traceback" not in r.stderr
    d: dict[str, Any] = json.loads(r.stdout)
    return d


def prefill(d: dict[str, Any]) -> dict[str, Any]:
    m = next(m for m in d["measurements"] if m["kind"] == "prefill")
    f: dict[str, Any] = next(f for f in m["findings"] if f["code"].startswith("PREFILL"))
    return f


def test_a_pasted_amdvlk_log_names_the_driver_and_radv_is_plausible() -> None:
    """kyuz0's llama-bench logs of one build (b9187) on the two drivers (tests/data/logs/SOURCES.md):
    the banner's driver is read; AMDVLK's 347 tok/s prompt is below the band with the driver as
    its cause, RADV's 1,338 plausible."""
    d = checked_log("kyuz0-strix-halo-vulkan-amdvlk-b9187.txt")
    assert d["runs"][0]["devices"][0]["driver"] == AMDVLK
    f = prefill(d)
    assert f["severity"] == "suspicious" and f["causes"][0] == AMDVLK_SLOW
    assert f"Vulkan driver: {AMDVLK}" in f["evidence"]
    d = checked_log("kyuz0-strix-halo-vulkan-radv-b9187.txt")
    assert d["runs"][0]["devices"][0]["driver"] == "radv"
    assert d["runs"][0]["devices"][0]["name"] == "AMD Radeon 8060S Graphics (RADV GFX1151)"
    assert prefill(d)["severity"] == "plausible"


def test_amdvlk_is_no_cause_on_a_build_it_led(rows: list[ResultRow], refs: References, run_cli: RunCli) -> None:
    """At b6735 AMDVLK ran prompts faster than RADV: its run made 4x slower is suspicious, but
    the driver is not named; the generic causes are."""
    from ggprof.pipelines.calibrate import judge_row
    from ggprof.plugins import extensions

    row = next(r for r in rows if r.build.vulkan_driver == AMDVLK and r.build.number == 6735 and r.kind == "pp")
    v = judge_row(row, refs, extensions(), slowdown=4.0)
    assert v.severity == "suspicious" and AMDVLK_SLOW not in v.causes and v.causes


@pytest.mark.parametrize(
    ("setting", "named", "check"),
    [
        ("0", HIPBLASLT_OFF, "ROCBLAS_USE_HIPBLASLT=0"),
        ("unset", HIPBLASLT_UNSET, "ROCBLAS_USE_HIPBLASLT not set"),
        ("1", None, "ROCBLAS_USE_HIPBLASLT=1"),
        (None, HIPBLASLT_UNKNOWN, None),
    ],
)
def test_a_slow_rocm_prompt_names_rocblas_without_hipblaslt_by_the_setting(
    rows: list[ResultRow], refs: References, run_cli: RunCli, setting: str | None, named: str | None, check: str | None
) -> None:
    """kyuz0's ROCm 6.4.3 run with ROCBLAS_USE_HIPBLASLT=0 (348 tok/s, 0.36x of the same with 1),
    as a report gives it: with the setting 0 the cause is rocBLAS without hipBLASLt alone; unset
    (rocBLAS's default decides) it is the first cause to check; with 1 it is ruled out and the
    generic causes remain; not given, it is one of them."""
    row = next(
        r
        for r in rows
        if r.build.rocblas_use_hipblaslt == "0"
        and r.build.number == 6182
        and r.kind == "pp"
        and not r.raw["flash_attn"]
    )
    model = str(refs.spec(row.model_ref).path)
    args = ["check", model, "--pp", str(row.tok_s), "--device", row.profile.id, "--backend", "rocm", "--json"]
    r = run_cli(*args, *(["--rocblas-use-hipblaslt", setting] if setting else []))
    f = next(f for f in json.loads(r.stdout)["findings"] if f["code"].startswith("PREFILL"))
    assert f["severity"] == "suspicious", f
    if named == HIPBLASLT_OFF:
        assert f["causes"] == [HIPBLASLT_OFF]
    elif named is None:
        assert not any("hipBLASLt" in c for c in f["causes"]) and len(f["causes"]) >= 3
    elif named == HIPBLASLT_UNSET:
        assert f["causes"][0] == HIPBLASLT_UNSET and len(f["causes"]) >= 3 and HIPBLASLT_UNKNOWN not in f["causes"]
    else:
        assert f["causes"][-1] == named and len(f["causes"]) >= 3
    assert (check in f["evidence"]) if check else not any("ROCBLAS_USE_HIPBLASLT" in e for e in f["evidence"])


def test_the_setting_is_rocms_and_a_log_or_json_carries_its_own(refs: References, run_cli: RunCli) -> None:
    model = str(refs.spec("llama2-7b-q4_0").path)
    r = run_cli("check", model, "--pp", "300", "--device", "ryzen-ai-max-395", "--backend", "vulkan",
                "--rocblas-use-hipblaslt", "0")  # fmt: skip
    assert r.exit_code == 2 and "give it with --backend rocm" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("check", "--log", str(LOGS / "kyuz0-strix-halo-vulkan-radv-b9187.txt"), "--rocblas-use-hipblaslt", "1")
    assert r.exit_code == 2 and "no build options" in r.stderr
    r = run_cli("check", model, "--pp", "300", "--backend", "rocm", "--rocblas-use-hipblaslt", "2")
    assert r.exit_code == 2 and "Traceback" not in r.stderr


def test_the_honeykrisp_figures_are_the_scoreboards_same_chip_ratios() -> None:
    """Each Apple chip the scoreboard ran under Honeykrisp, its prompt against its top bin's Metal
    result: the lowest and highest ratio are the cause's; the M3 Ultra (MoltenVK, no Asahi for
    M3) is not among them."""
    rows = load_dataset(RESULTS, ProfileDB([builtin_dir()]))
    pp = [r for r in rows if r.kind == "pp" and r.model_ref == "llama2-7b-q4_0"]
    asahi = [r for r in pp if r.backend == "vulkan" and r.build.vulkan_driver == HONEYKRISP]
    assert {r.profile.id for r in asahi} == {"apple-m1", "apple-m2", "apple-m2-pro"}
    ratios = []
    for r in asahi:
        metal = [m.tok_s for m in pp if m.backend == "metal" and m.profile.id == r.profile.id]
        assert metal, r.label
        ratios.append(r.tok_s / max(metal))
    assert min(ratios) == pytest.approx(_diagnosis.HONEYKRISP_PREFILL_VS_METAL[0], abs=0.01)
    assert max(ratios) == pytest.approx(_diagnosis.HONEYKRISP_PREFILL_VS_METAL[1], abs=0.01)


@pytest.mark.parametrize(
    ("device", "row_driver", "given", "named"),
    [
        ("apple-m1", HONEYKRISP, "Honeykrisp", HONEYKRISP_SLOW),
        ("apple-m1", HONEYKRISP, "honeykrisp", HONEYKRISP_SLOW),
        ("ryzen-ai-max-395", AMDVLK, "AMD open-source driver", AMDVLK_SLOW),
        ("ryzen-ai-max-395", AMDVLK, "AMDVLK", AMDVLK_SLOW),
        ("ryzen-ai-max-395", AMDVLK, "radv", None),
    ],
)
def test_check_takes_the_banners_driver(refs: References, run_cli: RunCli, device: str, row_driver: str, given: str,
                                        named: str | None) -> None:  # fmt: skip
    """A report's prompt, made 4x slower, judged with the driver its banner named (--vulkan-driver,
    the banner's spelling or AMDVLK's common name, any case): a driver known to be slow is the
    cause and the evidence names it; RADV is not named as a cause."""
    rows = [*load_dataset(RESULTS, ProfileDB([builtin_dir()])), *load_dataset(DATA, ProfileDB([builtin_dir()]))]
    row = next(
        r
        for r in rows
        if r.profile.id == device and r.backend == "vulkan" and r.kind == "pp" and r.build.vulkan_driver == row_driver
        and (row_driver != AMDVLK or (r.build.known_number or 0) > _diagnosis.AMDVLK_AHEAD_UNTIL_BUILD)
    )  # fmt: skip
    model = str(refs.spec(row.model_ref).path)
    build = ["--build", str(row.build.known_number)] if row.build.known_number else []
    r = run_cli("check", model, "--pp", f"{row.tok_s / 4:.2f}", "--device", device, "--backend", "vulkan",
                *build, "--vulkan-driver", given, "--json")  # fmt: skip
    f = next(f for f in json.loads(r.stdout)["findings"] if f["code"].startswith("PREFILL"))
    assert f["severity"] == "suspicious", f
    assert f"Vulkan driver: {given}" in f["evidence"]
    if named is None:
        assert AMDVLK_SLOW not in f["causes"] and HONEYKRISP_SLOW not in f["causes"] and len(f["causes"]) >= 3
    else:
        assert f["causes"] == [named]


def test_the_driver_is_vulkans_and_one_short_printable_name(refs: References, run_cli: RunCli) -> None:
    model = str(refs.spec("llama2-7b-q4_0").path)
    r = run_cli("check", model, "--pp", "30", "--device", "apple-m1", "--backend", "metal", "--vulkan-driver", "x")
    assert r.exit_code == 2 and "give it with --backend vulkan" in r.stderr
    for bad in ("", "a\x1b[2Jb", "x" * 61):
        r = run_cli("check", model, "--pp", "30", "--backend", "vulkan", "--vulkan-driver", bad)
        assert r.exit_code == 2 and "not a Vulkan driver's name" in r.stderr and "\x1b" not in r.stderr, bad
        assert "Traceback" not in r.stderr
    r = run_cli("check", "--log", str(LOGS / "kyuz0-strix-halo-vulkan-radv-b9187.txt"), "--vulkan-driver", "radv")
    assert r.exit_code == 2 and "no build options" in r.stderr


def test_the_flash_attention_figures_are_the_files_pairs(rows: list[ResultRow]) -> None:
    """ROCm runs without rocWMMA's kernels, hipBLASLt on, flash attention on against off (one
    source, build and ROCm each): about 0.7x up to the last build the cause names, a gain after."""
    pp = [r for r in rows if r.backend == "rocm" and r.kind == "pp" and not facts(r)["rocwmma_fattn"]]
    pp = [r for r in pp if r.build.rocblas_use_hipblaslt == "1"]

    def key(r: ResultRow) -> tuple[str, int, object]:
        return (r.source.split("/blob/")[0], number(r), facts(r).get("rocm"))

    off = {key(r): r.tok_s for r in pp if not r.raw["flash_attn"]}
    ratios = {key(r): r.tok_s / off[key(r)] for r in pp if r.raw["flash_attn"] and key(r) in off}
    until = _diagnosis.FLASH_ATTN_NO_ROCWMMA_UNTIL_BUILD
    slowed = [ratio for (_, number, _), ratio in ratios.items() if number <= until]
    assert len(slowed) >= 3
    assert statistics.median(slowed) == pytest.approx(_diagnosis.FLASH_ATTN_NO_ROCWMMA_PREFILL, abs=0.01)
    assert max(number for (_, number, _), ratio in ratios.items() if ratio < 1) == until
    later = [ratio for (_, number, _), ratio in ratios.items() if number > until]
    assert later and min(later) > 1


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (("--build", "6182", "--flash-attn", "on"), "first"),
        (("--flash-attn", "on"), "last"),  # the build not known
        (("--build", "9187", "--flash-attn", "on"), None),  # a build that gains from it
        (("--build", "6182", "--flash-attn", "off"), None),
    ],
)
def test_a_slow_rocm_prompt_with_flash_attention_names_rocwmma(
    rows: list[ResultRow], refs: References, run_cli: RunCli, args: tuple[str, ...], where: str | None
) -> None:
    """kyuz0's b6182 run with flash attention on and no rocWMMA kernels (687 tok/s), made 4x
    slower as a report gives it: a build of August 2025 names those kernels first among the causes
    to check; a build not given, last; a newer build or flash attention off, not at all."""
    row = next(
        r for r in rows
        if r.backend == "rocm" and r.kind == "pp" and r.build.number == 6182 and r.raw["flash_attn"]
        and not facts(r)["rocwmma_fattn"] and r.build.rocblas_use_hipblaslt == "1"
    )  # fmt: skip
    model = str(refs.spec(row.model_ref).path)
    r = run_cli("check", model, "--pp", f"{row.tok_s / 4:.2f}", "--device", row.profile.id, "--backend", "rocm",
                *args, "--json")  # fmt: skip
    f = next(f for f in json.loads(r.stdout)["findings"] if f["code"].startswith("PREFILL"))
    assert f["severity"] == "suspicious", f
    if where is None:
        assert FLASH_ATTN_NO_ROCWMMA not in f["causes"] and len(f["causes"]) >= 3
    else:
        assert f["causes"][0 if where == "first" else -1] == FLASH_ATTN_NO_ROCWMMA
    assert f"flash attention {args[-1]}" in f["evidence"]


def test_llama_bench_json_says_its_flash_attention(refs: References, run_cli: RunCli, tmp_path: Path) -> None:
    """lhl/strix-halo-testing's llama-bench JSON of b6077 without rocWMMA's kernels
    (tests/data/SOURCES.md): each row's `flash_attn` is read (true/false; 1/0 on newer builds, -1
    for auto, which says nothing), and its rows made 4x slower name the kernels only with it on."""
    from ggprof.bench.llamabench import read_rows, rows_from_text

    src = Path(__file__).parent / "data" / "llama-bench-lhl-strix-halo-rocm-b6077-fa.json"
    assert [r.flash_attn for r in read_rows(str(src))] == [False, True]
    rows = json.loads(src.read_text())
    for value, read in ((1, True), (0, False), (-1, None), ("on", None)):
        text = json.dumps([{**rows[0], "flash_attn": value}])
        assert rows_from_text(text, "x")[0].flash_attn is read
    for row in rows:
        row["avg_ts"] /= 4
    slowed = tmp_path / "slowed.json"
    slowed.write_text(json.dumps(rows))
    model = str(refs.spec("llama2-7b-q4_0").path)
    r = run_cli("check", model, "--llama-bench", str(slowed), "--device", "ryzen-ai-max-395", "--json")
    out = json.loads(r.stdout)["rows"]
    judged = [next(f for f in row["findings"] if f["code"].startswith("PREFILL")) for row in out]
    assert [f["severity"] for f in judged] == ["suspicious", "suspicious"]
    assert FLASH_ATTN_NO_ROCWMMA not in judged[0]["causes"] and judged[1]["causes"][0] == FLASH_ATTN_NO_ROCWMMA


def test_a_pasted_llama_bench_table_says_each_rows_flash_attention() -> None:
    """kyuz0's b6182 ROCm log without rocWMMA's kernels, `fa` 1 in its table (tests/data/logs): on
    the 8060S it ran on, its 687 tok/s prompt is plausible; the same log judged as an RX 7900
    XTX's (`--device`, as a triager holding someone else's paste would) is slow, and the table's
    flash attention names rocWMMA's kernels first, the build being one of those they slowed."""
    from support import in_process

    log = "kyuz0-strix-halo-rocm-fa1-b6182.txt"
    assert prefill(checked_log(log))["severity"] == "plausible"
    r = in_process("check", "--log", str(LOGS / log), "--device", "rx-7900-xtx", "--json")
    f = prefill(json.loads(r.stdout))
    assert f["severity"] == "suspicious" and f["causes"][0] == FLASH_ATTN_NO_ROCWMMA
    assert "flash attention on" in f["evidence"]


def test_an_apple_banner_names_its_driver_and_moltenvk_is_no_cause(refs: References, run_cli: RunCli) -> None:
    """The banners of llama.cpp#11256 (an M1 Pro on macOS, MoltenVK) and of an Asahi M2 Pro
    (Honeykrisp, with the chip's codename in its own parentheses): the driver is the last
    parenthesis either way; a slow prompt on MoltenVK names no driver, on Honeykrisp it does."""
    from ggprof.logs.patterns import vulkan_banner

    mac = vulkan_banner(
        "ggml_vulkan: 0 = Apple M1 Pro (MoltenVK) | uma: 1 | fp16: 1 | warp size: 32 | matrix cores: none"
    )
    asahi = vulkan_banner(
        "ggml_vulkan: 0 = Apple M2 Pro (G14S B1) (Honeykrisp) | uma: 1 | fp16: 1 | bf16: 0 | warp size: 32 | "
        "shared memory: 32768 | int dot: 0 | matrix cores: none"
    )
    assert mac is not None and (mac.name, mac.driver) == ("Apple M1 Pro", "MoltenVK")
    assert asahi is not None and (asahi.name, asahi.driver) == ("Apple M2 Pro (G14S B1)", HONEYKRISP)
    model = str(refs.spec("llama2-7b-q4_0").path)
    for driver, named in (("MoltenVK", False), (HONEYKRISP, True)):
        r = run_cli("check", model, "--pp", "9", "--device", "apple-m2-pro", "--backend", "vulkan",
                    "--vulkan-driver", driver, "--json")  # fmt: skip
        f = next(f for f in json.loads(r.stdout)["findings"] if f["code"].startswith("PREFILL"))
        assert f["severity"] == "suspicious" and f"Vulkan driver: {driver}" in f["evidence"]
        assert (f["causes"] == [HONEYKRISP_SLOW]) is named and (HONEYKRISP_SLOW in f["causes"]) is named

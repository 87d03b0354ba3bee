"""A run whose placement llama.cpp's --fit chose, without printing it: `check --fit on` (and
--fit-target, --fit-ctx; a llama-bench row's fit_target) judges the number on the placement --fit
would choose, and names it as derived. The rule is held to a real --fit run recorded on an H200."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ggufs import GPT_OSS_120B, Shape, write_model
from support import in_process

from ggprof.machine.profiles import ProfileDB

H200_LOG = Path(__file__).parent / "data" / "cuda-h200" / "run1-2-completion-moe-fit-target-lv4.txt"
H200_ROWS = Path(__file__).parent / "data" / "cuda-h200" / "bench-run1.jsonl"
# tests/data/cuda-h200/record.sh's MoE, whose header is all check reads
RECORDED_MOE = Shape(
    n_layers=16, n_embd=2048, n_heads=16, n_kv_heads=4, n_ff=768, vocab=32000, context=32768,
    n_experts=32, n_experts_used=4, name="synthetic MoE 16x(32 experts of 768, top 4) Q8_0", tokens=False,
)  # fmt: skip
MIB = 1 << 20


def _derived(answer: dict[str, object]) -> list[str]:
    """The derived placement's lines in a check --json answer's findings."""
    found = {
        e
        for row in answer["rows"]  # type: ignore[attr-defined]
        for f in row["findings"]
        for e in f["evidence"]
        if e.startswith("placement: ") and "derived" in e
    }
    return sorted(found)


def _h200_margin_mib() -> tuple[int, int, int]:
    """From the recorded --fit run: the MiB it left usable (free less --fit-target), the context it
    cut -c to, and the layers whose experts overflowed to RAM; as --fit-target on the h200 profile."""
    text = H200_LOG.read_text()
    target = int(re.search(r"--fit-target (\d+)", text).group(1))  # type: ignore[union-attr]
    free = int(re.search(r"vs\. (\d+) MiB of free device memory", text).group(1))  # type: ignore[union-attr]
    ctx = int(re.search(r"context size reduced from \d+ to (\d+)", text).group(1))  # type: ignore[union-attr]
    overflow = int(re.findall(r"CUDA0 \(NVIDIA H200\): +\d+ layers \((\d+) overflowing\)", text)[-1])
    profile, _ = ProfileDB.default().match("h200")
    assert profile is not None and profile.memory_gb is not None
    total_mib = int(profile.memory_gb * 2**30) // MIB  # the profile's memory, as ggprof's device holds it
    return total_mib - (free - target), ctx, overflow


def test_fit_is_derived_as_the_real_cuda_fit_chose(tmp_path: Path) -> None:
    """The recorded run: `--fit on --fit-target 141349` left 1,280 MiB of the H200 usable; --fit cut
    the model's 32,768 context to its --fit-ctx 4,096 and kept every layer with the experts of 12 in
    RAM (its last `17 layers (12 overflowing)` line). check, told the same margin on the h200
    profile and no -c, derives the same placement and judges the run's 200 tok/s on it."""
    model = write_model(tmp_path / "moe.gguf", RECORDED_MOE)[0]
    margin, ctx, overflow = _h200_margin_mib()
    args = ["check", str(model), "--device", "h200", "--backend", "cuda", "--tg", "200.02", "--fit", "on"]
    r = in_process(*args, "--fit-target", str(margin), "--ram-bandwidth", "100", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    (line,) = _derived(json.loads(r.stdout))
    assert line.startswith(f"placement: -ngl 99 -ncmoe {overflow} -c {ctx}, derived as llama.cpp's --fit")
    assert f"keeping {margin:,} MiB free" in line


def test_a_slowed_number_is_caught_on_the_placement_fit_chose(tmp_path: Path) -> None:
    """gpt-oss-120b on a 12 GB RTX 4070 under `--fit on --fit-target 512`, its RAM at 94 GB/s:
    given no placement, a slow decode is explained by spilling over the link; told --fit placed
    it, the decode is judged on --fit's experts in RAM, and a third of a typical speed is slow."""
    model = write_model(tmp_path / "gpt-oss-120b.gguf", GPT_OSS_120B)[0]
    base = ["check", str(model), "--device", "rtx-4070", "--backend", "cuda", "-c", "32768", "-fa", "on"]
    base += ["--ram-bandwidth", "94", "--tg", "9", "--json"]
    plain = in_process(*base)
    assert plain.exit_code == 0, plain.stdout + plain.stderr
    assert not _derived(json.loads(plain.stdout))
    fitted = in_process(*base, "--fit", "on", "--fit-target", "512")
    assert fitted.exit_code == 3, fitted.stdout + fitted.stderr
    (line,) = _derived(json.loads(fitted.stdout))
    assert line.startswith("placement: -ngl 99 -ncmoe 31 -c 32768, derived"), line  # the public run's (below)
    # --fit off says the placement was given some other way: no derivation
    off = in_process(*base, "--fit", "off")
    assert off.exit_code == 0 and not _derived(json.loads(off.stdout))
    # a margin larger than the GPU: no layer leaves it, and llama.cpp's --fit keeps every weight in RAM
    over = in_process(*base, "--fit-target", str(12 * 1024 + 1))
    (line,) = _derived(json.loads(over.stdout))
    assert line.startswith("placement: -ngl 0 -c 32768, derived"), line


def test_fit_is_derived_as_a_public_rtx_4070_fit_chose(tmp_path: Path) -> None:
    """carteakey.dev's RTX 4070 (12 GB; benchmarks/data/placement-results.jsonl rows 70 and 78):
    `--fit on --fit-ctx 32768 --fit-target 512 --flash-attn on` on gpt-oss-120b, whose fitted
    placement the author then wrote out as `-ngl 37 -ot blk.(5..35).ffn_(up|down|gate)_exps=CPU`:
    the experts of 31 of its 36 layers in RAM. ggprof derives 31 too, at --fit-ctx's context."""
    model = write_model(tmp_path / "gpt-oss-120b.gguf", GPT_OSS_120B)[0]
    args = ["check", str(model), "--device", "rtx-4070", "--backend", "cuda", "-fa", "on", "--tg", "28"]
    args += ["--fit", "on", "--fit-ctx", "32768", "--fit-target", "512", "--ram-bandwidth", "94", "--json"]
    r = in_process(*args)
    assert r.exit_code == 0, r.stdout + r.stderr
    (line,) = _derived(json.loads(r.stdout))
    assert line.startswith("placement: -ngl 99 -ncmoe 31 -c 32768, derived"), line


def test_a_build_that_fits_unasked_is_judged_on_fits_placement(tmp_path: Path) -> None:
    """llama-server fits by itself since December 2025 (b7474 ran --fit unasked, llama.cpp issue
    #18181): a report of such a build that gives no placement is judged on --fit's, the model's own
    context cut to --fit-ctx's 4,096 first; an earlier build is not known to, and is not."""
    model = write_model(tmp_path / "gpt-oss-120b.gguf", GPT_OSS_120B)[0]
    base = ["check", str(model), "--device", "rtx-4070", "--backend", "cuda", "--ram-bandwidth", "94"]
    r = in_process(*base, "--tg", "9", "--build", "7474", "--json")
    assert r.exit_code == 3, r.stdout + r.stderr
    (line,) = _derived(json.loads(r.stdout))
    assert " -c 4096, derived" in line and "keeping 1,024 MiB free" in line
    asked = in_process(*base, "--tg", "9", "--fit", "on", "--json")  # what --fit on says, at its defaults
    assert _derived(json.loads(asked.stdout)) == [line]
    r = in_process(*base, "--tg", "9", "--build", "7473", "--json")
    assert not _derived(json.loads(r.stdout))
    r = in_process(*base, "--tg", "9", "--build", "7474", "--fit", "off", "--json")
    assert not _derived(json.loads(r.stdout))


def test_a_llama_bench_row_that_fitted_is_judged_on_fits_placement(tmp_path: Path) -> None:
    """llama-bench fits only with -fitt or -fitc, and then keeps the -ngl it was given in its JSON:
    a recorded H200 row with its fit_target set as `-fitt` writes it is judged on the placement
    --fit chose, not on the 99 layers its n_gpu_layers says."""
    model = write_model(tmp_path / "moe.gguf", RECORDED_MOE)[0]
    margin, _, _ = _h200_margin_mib()
    row = json.loads(H200_ROWS.read_text().splitlines()[1])  # tg64, n_cpu_moe 0
    assert (row["n_gen"], row["n_cpu_moe"], row["fit_target"]) == (64, 0, 0)
    (tmp_path / "rows.json").write_text(json.dumps([row | {"fit_target": margin}]))
    # the RAM given: the row's cpu_info may name this host's CPU, whose measured RAM would stand in
    ram = ("--ram-bandwidth", "100")
    r = in_process(
        "check", str(model), "--llama-bench", str(tmp_path / "rows.json"), "--device", "h200", *ram, "--json"
    )
    answer = json.loads(r.stdout)
    (line,) = _derived(answer)
    # llama-bench fits its test's own context (64 tokens), never cut: as a command line of that -c
    said = ["check", str(model), "--device", "h200", "--tg", "1000", "--fit-target", str(margin), "-c", "64", *ram]
    assert _derived(json.loads(in_process(*said, "--json").stdout)) == [line]
    assert " -c 64, derived" in line
    # judged against that placement's ceiling, the experts in RAM: far below every weight on the GPU's
    (tmp_path / "plain.json").write_text(json.dumps([row]))
    plain = in_process(
        "check", str(model), "--llama-bench", str(tmp_path / "plain.json"), "--device", "h200", *ram, "--json"
    )
    assert answer["rows"][0]["decode_ceiling_tok_s"] < json.loads(plain.stdout)["rows"][0]["decode_ceiling_tok_s"] / 2
    # the recorded row really ran with every weight on the H200: its 1,022 tok/s is more than 11 layers'
    # experts read from 100 GB/s of RAM allow, so told --fit placed it so, check finds it impossible
    assert r.exit_code == 4 and answer["verdict"] == "impossible"
    assert json.loads(plain.stdout)["verdict"] == "plausible"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--fit", "off", "--fit-target", "512"], "--fit off: no --fit-target or --fit-ctx"),
        (["--fit", "maybe"], "'maybe' is not one of on, off"),
        (["--fit-target", "-3"], "is not a whole number from 0"),
    ],
)
def test_fit_options_refuse_what_llama_cpp_would(tmp_path: Path, args: list[str], said: str) -> None:
    model = write_model(tmp_path / "moe.gguf", RECORDED_MOE)[0]
    r = in_process("check", str(model), "--device", "h200", "--tg", "100", *args)
    assert r.exit_code == 2 and said in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_fit_beside_a_llama_bench_file_is_refused(tmp_path: Path) -> None:
    model = write_model(tmp_path / "moe.gguf", RECORDED_MOE)[0]
    r = in_process("check", str(model), "--llama-bench", str(H200_ROWS), "--device", "h200", "--fit", "on")
    assert r.exit_code == 2 and "--fit" in r.stderr and "a llama-bench row states its own" in r.stderr, r.stderr


def test_predict_takes_fit_as_llama_cpp_spells_it(tmp_path: Path) -> None:
    """`predict --fit on`: the placement --fit would choose, predicted and named as derived, the same
    check derives for the recorded H200 run; beside a placement given it is a usage error."""
    model = write_model(tmp_path / "moe.gguf", RECORDED_MOE)[0]
    margin, ctx, overflow = _h200_margin_mib()
    base = ["predict", str(model), "--device", "h200", "--ram-bandwidth", "100"]
    r = in_process(*base, "--fit", "on", "--fit-target", str(margin), "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    p = json.loads(r.stdout)
    assert p["rules"][0].startswith(f"placement: -ngl 99 -ncmoe {overflow} -c {ctx}, derived")
    assert p["decode_ceiling_tok_s"] < 1000  # 12 layers' experts at 100 GB/s, not every weight on the H200
    r = in_process(*base, "--fit", "on", "-ngl", "99", "-ncmoe", "2")
    assert r.exit_code == 2 and "--fit derives a placement none was given for" in r.stderr, r.stderr


def test_a_context_is_cut_as_llama_cpps_fit_cuts_it(tmp_path: Path) -> None:
    """Where every layer fits once the model's context is cut, --fit cuts it to the context the
    memory interpolated linearly between the model's and --fit-ctx's leaves free, down to a
    multiple of 256, and changes nothing else (common/fit.cpp). By hand on ggprof's memory."""
    from ggprof.machine.target import DeviceChoice, resolve_target
    from ggprof.model.spec import load_model
    from ggprof.physics.memory import memory_at
    from ggprof.physics.roofline import PredictInputs

    model = write_model(tmp_path / "moe.gguf", RECORDED_MOE)[0]
    spec = load_model(model)
    target = resolve_target(DeviceChoice(device_id="h200"), profiles=ProfileDB.default(), host=None, backend="cuda")
    assert target.device.memory_bytes is not None

    def used(ctx: int) -> int:
        inputs = PredictInputs(depth=0, prompt=512, gen=1, ctx=ctx, n_gpu_layers=spec.n_layers + 1)
        return memory_at(spec, target.device, target.cpu, inputs)[0].required_bytes

    usable = (used(4096) + used(32768)) // 2  # half way: a cut between --fit-ctx and the model's context
    margin_mib = (target.device.memory_bytes - usable) // MIB
    free = target.device.memory_bytes - margin_mib * MIB
    cut = 4096 + (32768 - 4096) * (free - used(4096)) // (used(32768) - used(4096))
    expected = cut - cut % 256
    assert 4096 < expected < 32768
    args = ["check", str(model), "--device", "h200", "--tg", "1000", "--fit-target", str(margin_mib), "--json"]
    (line,) = _derived(json.loads(in_process(*args).stdout))
    assert line.startswith(f"placement: -ngl 99 -c {expected}, derived"), line


def test_each_fitted_row_keeps_its_own_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows that share what --fit chose (a pp512 and a tg64 test of one llama-bench run) are each
    judged on their own speed and label, in this process and over worker processes alike."""
    from ggprof.pipelines import check

    model = write_model(tmp_path / "moe.gguf", RECORDED_MOE)[0]
    margin, _, _ = _h200_margin_mib()
    rows = [json.loads(line) | {"fit_target": margin} for line in H200_ROWS.read_text().splitlines()[:2]]
    assert [(r["n_prompt"], r["n_gen"]) for r in rows] == [(512, 0), (0, 64)]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    args = ["check", str(model), "--llama-bench", str(tmp_path / "rows.json"), "--device", "h200", "--json"]
    for parallel in (False, True):
        if parallel:  # two rows over worker processes, as 2,000 would be
            monkeypatch.setattr(check, "PARALLEL_MIN_ROWS", 2)
        answer = json.loads(in_process(*args).stdout)
        got = [(row["label"], row["measured_pp_tok_s"], row["measured_tg_tok_s"]) for row in answer["rows"]]
        assert got == [("pp512", rows[0]["avg_ts"], None), ("tg64", None, rows[1]["avg_ts"])]


def test_a_default_verbosity_log_of_a_fit_run_is_judged_on_fits_placement(tmp_path: Path) -> None:
    """The recorded H200 run's log at llama.cpp's default verbosity prints no --fit line, only its
    command line (`llama-completion ... --fit on --fit-target 141349`): check --log judges its
    speeds on the placement --fit would choose, as `check --fit-target 141349` does (on the h200
    profile's memory, which is not the run's free memory: the placement's source says so)."""
    model = write_model(tmp_path / "moe.gguf", RECORDED_MOE)[0]
    log = H200_LOG.parent / "run1-6-completion-moe-fit-target-default-verbosity.txt"
    assert "common_params_fit" not in log.read_text() and "--fit on --fit-target 141349" in log.read_text()
    r = in_process("check", str(model), "--log", str(log), "--device", "h200", "--bandwidth", "100", "--json")
    (run,) = json.loads(r.stdout)["runs"]
    decode = next(m for m in run["measurements"] if m["kind"] == "decode")
    lines = {e for f in decode["findings"] for e in f["evidence"] if e.startswith("placement: ") and "derived" in e}
    said = ["check", str(model), "--device", "h200", "--tg", "209.86", "--fit-target", "141349"]
    assert sorted(lines) == _derived(json.loads(in_process(*said, "--ram-bandwidth", "100", "--json").stdout))
    assert len(lines) == 1 and " -c 4096, derived" in lines.pop()

"""Speculative decoding (ggprof.physics.speculative): a verify step is the unit of decode. Its
hard ceiling is n + 1 tokens per target pass; its expected speed follows the acceptance where
it is known, a range where it is not; low acceptance is named when drafting is the slow part."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ggufs import F16, LLAMA_8B_GQA_F16, Shape, write_model
from support import in_process

from ggprof.model.spec import load_model
from ggprof.physics.speculative import drafting_for, tokens_per_step, verify_step

RTX_3090_BYTES_PER_S = 936e9  # its profile's bandwidth


def test_tokens_per_step_by_hand() -> None:
    assert tokens_per_step(0.0, 4) == 1.0  # every draft rejected: the target's own token
    assert tokens_per_step(1.0, 4) == 5.0  # every draft kept, and one more
    assert tokens_per_step(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)  # (1 - 0.5^4) / (1 - 0.5)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An 8B F16 target (Llama shape, 32k vocabulary: 14.4 GB a token) and a 1B-class F16 draft
    sharing its vocabulary."""
    folder = tmp_path_factory.mktemp("spec")
    target = write_model(folder / "8b-f16.gguf", LLAMA_8B_GQA_F16)[0]
    draft = write_model(
        folder / "1b-f16.gguf", replace(LLAMA_8B_GQA_F16, n_layers=16, n_embd=2048, n_heads=32, n_ff=8192)
    )[0]
    return target, draft


def _check(target: Path, tg: float, *flags: str) -> tuple[int, dict[str, Any], str]:
    r = in_process("check", str(target), "--tg", str(tg), "--device", "rtx-3090", *flags, "--json")
    assert r.stdout, r.stderr
    return r.exit_code, json.loads(r.stdout), r.stderr


def test_a_drafted_decode_above_the_plain_ceiling_is_judged_per_verify_step(models: tuple[Path, Path]) -> None:
    """An 8B F16 model on an RTX 3090 at 95 tok/s: above the plain ceiling (936 GB/s / 14.4 GB
    a token = 65 tok/s), so impossible as a plain decode, and within what a draft of 4 allows."""
    target, draft = models
    plain = RTX_3090_BYTES_PER_S / load_model(target).decode_bytes_per_token
    assert 64 < plain < 66
    code, d, _ = _check(target, 95)
    assert code == 4 and d["findings"][0]["code"] == "DECODE_ABOVE_CEILING"
    code, d, err = _check(target, 95, "-md", str(draft), "--spec-draft-n-max", "4")
    assert code == 0, err
    assert d["findings"][0]["code"] == "DECODE_PLAUSIBLE"
    assert "speculative decoding (draft-simple, up to 4 drafted a step, draft model 1b-f16.gguf)" in json.dumps(d)


@pytest.mark.parametrize(
    ("flags", "n"),
    [
        (("--spec-type", "draft-simple", "--spec-draft-n-max", "4"), 4),
        (("--spec-type", "ngram-mod", "--spec-draft-n-max", "8"), 8),
        (("--spec-type", "ngram-simple", "--draft-max", "2"), 2),  # an older build's spelling
        (("--spec-type", "draft-simple"), 3),  # llama.cpp's default n-max
    ],
)
def test_above_n_plus_one_tokens_a_pass_is_impossible_every_time(
    models: tuple[Path, Path], flags: tuple[str, ...], n: int
) -> None:
    target, draft = models
    plain = RTX_3090_BYTES_PER_S / load_model(target).decode_bytes_per_token
    with_draft = ("-md", str(draft)) if "draft-simple" in flags else ()
    code, d, _ = _check(target, 1.25 * (n + 1) * plain, *flags, *with_draft)
    assert code == 4
    found = d["findings"][0]
    assert found["code"] == "DECODE_ABOVE_DRAFT_CEILING"
    assert found["title"].endswith(f"than {n + 1} tokens per target pass allow ({(n + 1) * plain:.3g} tok/s)")


def test_a_known_acceptance_pins_the_expected_speed_and_a_low_one_is_named(models: tuple[Path, Path]) -> None:
    target, draft = models
    spec, small = load_model(target), load_model(draft)
    # a = 0.8, n = 4: 3.36 tokens a step; the step: the target's pass (weights, KV at depth 0)
    # and 4 draft passes of the 1B model
    step_s = (spec.decode_bytes_per_token + 4 * small.decode_bytes_per_token) / RTX_3090_BYTES_PER_S
    rate = tokens_per_step(0.8, 4) / step_s
    flags = ("-md", str(draft), "--spec-draft-n-max", "4", "--draft-acceptance", "0.8")
    code, d, _ = _check(target, rate * 0.8, *flags)
    # the low end: the backend's band times the least of the speed-up published runs reached
    # (speculative-fits.json, well above a tenth of it)
    assert d["expected_tok_s_high"] <= rate and d["expected_tok_s_low"] >= 0.1 * rate
    assert "acceptance 80% (--draft-acceptance): 3.36 tokens a step" in d["expected_basis"]
    assert "times the speed-up published runs reach" in d["expected_basis"]
    # at 5% acceptance drafting costs more than it saves: a run at a third of that speed is slow,
    # and low acceptance is its first cause
    slow = ("-md", str(draft), "--spec-draft-n-max", "4", "--draft-acceptance", "0.05")
    code, d, _ = _check(target, 10, *slow)
    assert code == 3
    first = d["findings"][0]
    assert first["code"] == "DECODE_BELOW_BAND"
    assert first["causes"][0].startswith("low draft acceptance: the target rejected most drafted tokens (below ")


def test_mtp_drafts_with_the_models_own_heads(tmp_path: Path) -> None:
    with_heads = write_model(
        tmp_path / "mtp.gguf",
        Shape(
            n_layers=5,
            n_embd=512,
            n_heads=8,
            n_ff=1024,
            vocab=4000,
            qtype=F16,
            file_type=1,
            extra={"llama.nextn_predict_layers": 1},
        ),
    )[0]
    spec = load_model(with_heads)
    plain = RTX_3090_BYTES_PER_S / spec.decode_bytes_per_token
    code, d, err = _check(with_heads, 2.5 * plain, "--spec-type", "draft-mtp", "--spec-draft-n-max", "3")
    assert code != 4, err
    assert "4 MTP block(s)" not in json.dumps(d) and "1 MTP block(s) and the LM head" in json.dumps(d)
    none = write_model(tmp_path / "plain.gguf", Shape(n_layers=4, n_embd=512, n_heads=8, n_ff=1024, vocab=4000))[0]
    r = in_process("check", str(none), "--tg", "10", "--device", "rtx-3090", "--spec-type", "mtp")
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and "has none (no nextn_predict_layers" in r.stderr


def test_drafting_beside_llama_bench_output_is_refused(models: tuple[Path, Path], tmp_path: Path) -> None:
    target, _ = models
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 40.0, "stddev_ts": 1.0}]))
    r = in_process("check", str(target), "--llama-bench", str(rows), "--spec-type", "ngram-mod")
    assert r.exit_code == 2 and "llama-bench does not draft" in r.stderr and r.stderr.count("\n") == 1


NGRAM_LOG = Path(__file__).parent / "data" / "logs" / "own-llama-server-gemma3-270m-ngram-mod.txt"


def test_a_speculative_servers_log_is_judged_per_verify_step_from_its_own_counts(gemma_path: Path) -> None:
    """This machine's llama-server (`--spec-type ngram-mod`, Gemma 3 270M) decoded 64 tokens and
    printed `draft acceptance = 1.00000 (46 accepted / 46 generated)`: 64 - 46 = 18 target
    passes, so 46 / 18 drafted and 64 / 18 generated a pass, not the 65 tokens a step that
    n-max 64 at 100% acceptance would claim. Every draft was kept, so the slow decode is not
    blamed on acceptance."""
    r = in_process("check", str(gemma_path), "--log", str(NGRAM_LOG), "--backend", "cpu", "--bandwidth", "20", "--json")
    assert r.stdout, r.stderr
    decode = next(m for m in json.loads(r.stdout)["measurements"] if m["kind"] == "decode")
    text = json.dumps(decode)
    assert "speculative decoding (ngram-mod, up to 64 drafted a step, an n-gram lookup" in text
    assert f"{46 / 18:.2f} drafted and {64 / 18:.2f} generated a step" in text
    assert "46 of 46 drafted tokens accepted over 64 decoded (line 17)" in text
    # 20 GB/s over 247 MB a token: a plain step 12.3 ms; 3.56 tokens a pass at most ~3.5x that
    plain_tok_s = 20e9 / load_model(gemma_path).decode_bytes_per_token
    assert decode["expected_tok_s_high"] < 64 / 18 * plain_tok_s
    assert decode["expected_tok_s_high"] > plain_tok_s  # drafting is counted: above the plain band
    causes = decode["findings"][0]["causes"]
    assert causes[0].startswith("long verify steps: 2.56 drafted positions a step")
    assert not any(c.startswith("low draft acceptance") for c in causes)


def test_a_speculative_log_that_does_not_say_how_it_drafted_is_not_judged(gemma_path: Path, tmp_path: Path) -> None:
    """The same log without its command line: it drafted (its acceptance line says so), but
    with what and how many a step it does not say, so no per-token ceiling is applied."""
    log = tmp_path / "no-command.txt"
    log.write_text("".join(NGRAM_LOG.read_text().splitlines(keepends=True)[1:]))
    r = in_process("check", str(gemma_path), "--log", str(log), "--backend", "cpu", "--bandwidth", "20", "--json")
    decode = next(m for m in json.loads(r.stdout)["measurements"] if m["kind"] == "decode")
    assert decode["verdict"] == "unknown" and decode["findings"] == []
    assert "the log does not say how it drafted" in decode["not_judged"]


def test_llama_clis_summary_line_is_read(gemma_path: Path, tmp_path: Path) -> None:
    """llama-cli (2026) ends a run with `[ Prompt: %.1f t/s | Generation: %.1f t/s ]`
    (tools/cli/cli-context.cpp): both speeds are read, the decode judged like any other."""
    log = tmp_path / "cli.txt"
    log.write_text(
        "$ llama-cli -m gemma-3-270m-q4_k_m.gguf -t 2\n> hello\nHi there!\n\n"
        "[ Prompt: 282.9 t/s | Generation: 41.5 t/s ]\n"
    )
    r = in_process("check", str(gemma_path), "--log", str(log), "--backend", "cpu", "--bandwidth", "20", "--json")
    d = json.loads(r.stdout)
    speeds = {m["kind"]: m for m in d["measurements"]}
    assert speeds["prefill"]["tok_s"] == pytest.approx(282.9) and speeds["prefill"]["line"] == 5
    assert speeds["decode"]["tok_s"] == pytest.approx(41.5) and speeds["decode"]["source"] == "llama-cli summary"
    # judged against 20 GB/s over the 247 MB a token reads: 81 tok/s at most, 41.5 within the CPU band
    plain_tok_s = 20e9 / load_model(gemma_path).decode_bytes_per_token
    assert speeds["decode"]["decode_ceiling_tok_s"] == pytest.approx(plain_tok_s, rel=0.02)
    assert speeds["decode"]["verdict"] == "plausible"


def test_a_moe_mtp_block_drafts_with_its_used_experts_and_a_verify_reads_the_union(tmp_path: Path) -> None:
    """8 experts of 128 (2 a token), F16, 4 layers and one MTP block of 64 wide: the block's
    experts are read at 2/8 a drafted token; a verify over m positions reads 8 x (1 - (6/8)^m)
    experts a layer, 2 x 1.75 = 3.5 for m = 2 (1.75 x one token's)."""
    shape = Shape(
        n_layers=5, n_embd=64, n_heads=4, n_kv_heads=4, n_ff=128, vocab=100, n_experts=8, n_experts_used=2,
        qtype=F16, file_type=1, extra={"llama.nextn_predict_layers": 1},
    )  # fmt: skip
    spec = load_model(write_model(tmp_path / "moe-mtp.gguf", shape)[0])
    d = drafting_for(spec, "draft-mtp", 1, None, None, "")
    assert d is not None
    experts = 3 * 64 * 128 * 8 * 2  # gate, up, down of 8 experts, F16
    attention = 4 * 64 * 64 * 2
    f32 = (2 * 64 + 64 * 8) * 4  # two norms and the router
    assert d.draft_bytes_per_token == attention + f32 + experts * 2 // 8 + 64 * 100 * 2  # and the LM head
    assert d.expert_bytes_per_token == 4 * experts * 2 // 8 and d.experts_used_share == 2 / 8
    step = verify_step(d, kv_bytes=0, bandwidth_bytes_per_s=1e9, plain_seconds=1.0)
    assert step.experts_extra_seconds(2) == pytest.approx(d.expert_bytes_per_token / 1e9 * 0.75)


def test_the_speed_up_published_runs_reach_scales_the_band_never_past_n_plus_one_tokens_a_pass() -> None:
    """An n-gram drafter (free drafts) at a = 0.8, n = 2: 1 + 0.8 + 0.64 = 2.44 tokens a 1 s step.
    The backend's band 60%-90% and a fitted reach of 50%-150% give 0.6 x 2.44 x 0.5 = 0.732 tok/s
    at the low end; the high end, 0.9 x 2.44 x 1.5 = 3.29, stops at 0.9 x 3 tokens a pass = 2.7."""
    from ggprof.machine.device import EfficiencyBand
    from ggprof.physics.speculative import Drafting, expected_speculative

    d = Drafting(spec_type="ngram-mod", n_max=2, acceptance=0.8, acceptance_source="given")
    reach = EfficiencyBand(low=0.5, high=1.5, source="fitted on public runs")
    band = EfficiencyBand(low=0.6, high=0.9, source="the backend's")
    plain = expected_speculative(verify_step(d, kv_bytes=0, bandwidth_bytes_per_s=1e9, plain_seconds=1.0), band)
    reached = expected_speculative(
        verify_step(d, kv_bytes=0, bandwidth_bytes_per_s=1e9, plain_seconds=1.0, reach=reach), band
    )
    assert plain is not None and reached is not None
    assert plain.low_tok_s == pytest.approx(0.6 * 2.44) and plain.high_tok_s == pytest.approx(0.9 * 2.44)
    assert reached.low_tok_s == pytest.approx(0.732) and reached.high_tok_s == pytest.approx(2.7)
    assert "times the speed-up published runs reach, fitted on public runs" in reached.basis

"""What a speculative run says beyond one acceptance rate: llama-server's acceptance per draft
position (`acc per pos`, tools/server/server-context.cpp: the share of verify steps that kept
position i) and where the draft model's weights live (--spec-draft-ngl, --spec-draft-ncmoe,
--spec-draft-device)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from ggufs import LLAMA_8B_GQA_F16, write_model
from support import in_process

from ggprof.logs.parse import parse_lines
from ggprof.logs.text import Line, read_log
from ggprof.model.spec import load_model
from ggprof.physics.speculative import (
    Drafting,
    DraftPlacement,
    tokens_per_drafted_step,
    tokens_per_step,
    verify_step,
)
from ggprof.pipelines.logfacts import per_position_of
from ggprof.runfacts import facts_from_argv

LOGS = Path(__file__).parent / "data" / "logs"
OWN_LOG = LOGS / "own-llama-server-gemma3-270m-ngram-simple-per-position.txt"
PR_LOG = LOGS / "llamacpp-24536-eagle3-per-position.txt"


def test_tokens_a_step_from_the_acceptance_per_position_by_hand() -> None:
    """PR #24536's EAGLE-3 run: 167 of 259 drafts kept, per position (0.805, 0.632, 0.483). A
    step keeps 0.805 + 0.632 + 0.483 = 1.92 drafts on average and yields one of its own:
    2.92 tokens, llama.cpp's `mean acceptance length`. One rate (167 / 259 = 0.645 for each
    draft) would say (1 - 0.645^4) / (1 - 0.645) = 2.33: acceptance falls along a draft."""
    shares = (0.805, 0.632, 0.483)
    assert tokens_per_drafted_step(shares, 3) == pytest.approx(2.92)
    assert tokens_per_step(167 / 259, 3) == pytest.approx(2.329, abs=1e-3)
    assert tokens_per_drafted_step(shares, 2) == pytest.approx(1 + 0.805 + 0.632)  # n-max 2 drafts two
    d = Drafting(spec_type="draft-eagle3", n_max=3, acceptance_per_position=shares)
    assert d.yields(0.0) == pytest.approx((3.0, 2.92))  # the shares, whatever the one rate
    # measured counts (a server's timings, a log's decoded tokens) still come first
    assert replace(d, drafted_per_step=2.0, tokens_per_step=2.5).yields(0.0) == (2.0, 2.5)


def test_a_public_one_line_acceptance_per_position_is_read() -> None:
    """While PR #24536 was reviewed the shares rode on the `draft acceptance` line itself."""
    (run, *_) = parse_lines(read_log(str(PR_LOG)).lines).runs
    assert per_position_of(run) == pytest.approx((0.805, 0.632, 0.483))
    assert run.value("draft_counts") == (167, 259, 256)  # with the request's 256 decoded tokens


def test_requests_are_weighted_by_their_verify_steps() -> None:
    """Two requests: the first kept 10 drafts at shares (1.0, 1.0), so 10 / 2 = 5 verify steps;
    the second kept 2 at (0.2, 0.0), so 2 / 0.2 = 10 steps. Over the 15 steps position 1 was
    kept 5 x 1.0 + 10 x 0.2 = 7 times, position 2 5 times: (7/15, 5/15)."""
    slot = "slot print_timing: id  0 | task {} | "
    timing = "       eval time =     100.00 ms /    20 tokens (    5.00 ms per token,   200.00 tokens per second)"
    text = []
    for task, (kept, drafted, shares) in enumerate(((10, 10, "1.000, 1.000"), (2, 20, "0.200, 0.000"))):
        counts = f"draft acceptance = 0.50000 (   {kept} accepted /    {drafted} generated), mean len =  2.00"
        text += [slot.format(task) + x for x in (timing, counts, f"     acc per pos = ({shares})")]
    (run, *_) = parse_lines(Line(i + 1, t) for i, t in enumerate(text)).runs
    assert per_position_of(run) == pytest.approx((7 / 15, 5 / 15))


@pytest.mark.parametrize("shares", ["1.5, 0.2", "nan, 0.1", "1e400", "", "0.5, -0.1"])
def test_shares_that_are_no_shares_are_left_unread(shares: str) -> None:
    (run, *_) = parse_lines([Line(1, f"slot print_timing: id  0 | task 0 |      acc per pos = ({shares})")]).runs
    assert per_position_of(run) == ()


def test_the_real_servers_acceptance_per_position_is_judged_with_its_n_max(gemma_path: Path) -> None:
    """This machine's llama-server (`--spec-type ngram-simple --spec-ngram-simple-size-m 6 -lv 4`)
    printed `acc per pos = (1.000, 1.000, 0.929, 0.929, 0.857, 0.857)`: six positions, so the
    lookup drafted 6 at most (not ngram-simple's default 48: 7 tokens per target pass, not 49),
    and 1 + 5.572 = 6.57 tokens a drafted step (its `mean len`); 78 / 5.572 = 14 verify steps."""
    r = in_process("check", str(gemma_path), "--log", str(OWN_LOG), "--backend", "cpu", "--bandwidth", "20", "--json")
    assert r.stdout, r.stderr
    decode = next(m for m in json.loads(r.stdout)["measurements"] if m["kind"] == "decode")
    text = json.dumps(decode)
    assert "speculative decoding (ngram-simple, up to 6 drafted a step, an n-gram lookup" in text
    assert "kept per draft position 100%, 100%, 93%, 93%, 86%, 86% (line 240)" in text
    assert "78 of 82 drafted tokens accepted over 96 decoded (line 239)" in text
    plain_tok_s = 20e9 / (load_model(gemma_path).decode_bytes_per_token)
    assert decode["decode_ceiling_tok_s"] == pytest.approx(plain_tok_s, rel=0.02)
    assert any(e.startswith("at most 7 tokens per target pass") for e in decode["findings"][0]["evidence"])
    # the text report shows the same
    shown = in_process("check", str(gemma_path), "--log", str(OWN_LOG), "--backend", "cpu", "--bandwidth", "20")
    assert "kept per draft position 100%, 100%, 93%, 93%, 86%," in " ".join(shown.stdout.split())  # as wrapped


# -- where the draft model's weights live -------------------------------------------------------
def test_the_drafts_placement_is_read_from_a_command_line() -> None:
    argv = ["llama-server", "-m", "t.gguf", "-md", "d.gguf", "-ngld", "0", "-cmoed", "-devd", "none"]
    facts = dict(facts_from_argv(argv, ("spec_draft_ngl", "spec_draft_ncmoe", "spec_draft_device")))
    assert facts == {"spec_draft_ngl": 0, "spec_draft_ncmoe": 2**31 - 1, "spec_draft_device": ("none",)}
    later = ["--spec-draft-ngl", "99", "--spec-draft-ncmoe", "4", "--spec-draft-device", "CUDA1"]
    assert dict(facts_from_argv(later, ("spec_draft_ngl", "spec_draft_ncmoe", "spec_draft_device"))) == {
        "spec_draft_ngl": 99,
        "spec_draft_ncmoe": 4,
        "spec_draft_device": ("CUDA1",),
    }


def test_a_drafted_token_in_ram_is_read_at_the_rams_bandwidth() -> None:
    """A draft of 1.0 GB a token, 0.4 GB of it in RAM: at 900 GB/s on the GPU and 60 GB/s in
    RAM a drafted token takes 0.6 / 900 + 0.4 / 60 s = 0.667 + 6.667 ms = 7.33 ms; without a
    RAM bandwidth (a CPU's run: one memory) all of it at the device's, 1.11 ms."""
    d = Drafting(spec_type="draft-simple", n_max=4, draft_bytes_per_token=10**9, draft_bytes_in_ram=4 * 10**8)
    beside_gpu = verify_step(d, 0, 900e9, 0.01, ram_bandwidth_bytes_per_s=60e9)
    assert beside_gpu.draft_seconds == pytest.approx(0.6e9 / 900e9 + 0.4e9 / 60e9)
    assert verify_step(d, 0, 900e9, 0.01).draft_seconds == pytest.approx(1e9 / 900e9)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An 8B F16 target and a 1B-class F16 draft sharing its vocabulary (test_speculative's)."""
    folder = tmp_path_factory.mktemp("spec-place")
    target = write_model(folder / "8b-f16.gguf", LLAMA_8B_GQA_F16)[0]
    draft = write_model(
        folder / "1b-f16.gguf", replace(LLAMA_8B_GQA_F16, n_layers=16, n_embd=2048, n_heads=32, n_ff=8192)
    )[0]
    return target, draft


def test_a_draft_kept_in_ram_is_placed_by_llama_cpps_rule(models: tuple[Path, Path]) -> None:
    """-ngld 0 (or -devd none): every layer of the draft in RAM; -ngld 8 of its 16 layers: the
    output and the last 7 on the GPU (llama.cpp offloads from the end, the output counted as a
    layer: i_gpu_start = 16 + 1 - 8), the first 9 in RAM."""
    _, draft_path = models
    draft = load_model(draft_path)
    every = DraftPlacement.of({"spec_draft_ngl": 0}).bytes_in_ram(draft)
    assert DraftPlacement.of({"spec_draft_device": ("none",)}).bytes_in_ram(draft) == every
    assert DraftPlacement.of({}).bytes_in_ram(draft) == 0  # auto: every layer on the GPU
    layer = sum(t.n_bytes for t in draft.tensors if t.layer == 0)
    assert DraftPlacement.of({"spec_draft_ngl": 8}).bytes_in_ram(draft) == 9 * layer
    head = next(t.n_bytes for t in draft.tensors if t.name == "output.weight")
    assert every == 16 * layer + head + sum(t.n_bytes for t in draft.tensors if t.name == "output_norm.weight")


def test_check_names_where_the_draft_lives(models: tuple[Path, Path]) -> None:
    target, draft = models
    r = in_process(
        "check", str(target), "--tg", "60", "--device", "rtx-3090", "-md", str(draft), "-ngld", "0", "--json"
    )
    assert r.stdout, r.stderr
    text = json.dumps(json.loads(r.stdout))
    assert "draft model 1b-f16.gguf; 100% of its bytes a drafted token in RAM (--spec-draft-ngl 0)" in text

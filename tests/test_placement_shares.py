"""The shares a placement's parts reach, fitted on public rows (ggprof.calibration.placements):
the fit and its leave-one-machine-out band by hand, the committed file a refit of the rows, and a
prompt's copies of weights in RAM judged at the copies' share (docs/calibration.md, Placements)."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pytest
from ggufs import GPT_OSS_120B, write_model
from support import RunCli

from ggprof.calibration import committed_placement_fits
from ggprof.calibration.placements import ShareRow, fit_share, implied_link_share, implied_ram_share
from ggprof.machine.device import EfficiencyBand
from ggprof.physics.placement import link_band_of
from ggprof.physics.shares import TokenParts

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_host_ram(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))


def test_a_share_and_its_band_by_hand() -> None:
    """Machines a (20%, 80%: its mean 40%), b (40%), c (10%); d's 1% is 20x off the rows' median (20%)
    and left out. Centre: the geometric mean of the machines' means, (40 x 40 x 10)^(1/3) = 25.2%. Left
    out in turn: a from b, c (20%): 20/20 and 80/20; b from a, c (20%): x2; c from a, b (40%):
    x0.25. The band: 25.2% x 0.25 to 25.2% x 4, capped at 100%."""
    rows = [
        ShareRow(machine="a", label="a1", share=0.2),
        ShareRow(machine="a", label="a2", share=0.8),
        ShareRow(machine="b", label="b1", share=0.4),
        ShareRow(machine="c", label="c1", share=0.1),
        ShareRow(machine="d", label="d1", share=0.01),
    ]
    fit = fit_share(rows, "test")
    assert fit is not None
    centre = (0.4 * 0.4 * 0.1) ** (1 / 3)
    assert fit.share == pytest.approx(centre)
    assert (fit.rows, fit.machines) == (4, 3)
    assert fit.low == pytest.approx(centre * 0.25) and fit.high == 1.0
    assert fit.held_out_error == pytest.approx(statistics.median([0.0, math.log(4), math.log(2), math.log(4)]))
    assert fit.left_out == ("d1: share 1.0%, 20.0x off the rows' median",)
    assert fit_share(rows[:2], "one machine") is None  # one machine has no other to be judged by


def test_a_rows_ram_share_is_what_its_time_leaves_to_the_ram() -> None:
    """GPU part 2 ms at full rate, its band 50%-80% (midpoint sqrt(0.4) = 63.2%): 3.16 ms; RAM part
    4 ms at full rate; a 15 ms token leaves 11.84 ms to the RAM: 4 / 11.84 = 33.8%."""
    parts = TokenParts(gpu_s=0.002, ram_s=0.004, gpu_band=EfficiencyBand(low=0.5, high=0.8, source=""))
    gpu = 0.002 / math.sqrt(0.4)
    assert implied_ram_share(parts, 0.015) == pytest.approx(0.004 / (0.015 - gpu))
    assert implied_ram_share(parts, gpu) is None  # nothing left for the RAM: no share


def test_a_part_too_small_to_tell_gives_no_share() -> None:
    """A part that at full rate is under a quarter of the time predicted (the rest at its band's
    midpoint) tells nothing of its share: the other part's band (+-25% here) moves the time left
    over more than the part itself. GPU 2 ms at full rate is 3.16 ms at its midpoint: a RAM part of
    1.1 ms (26%) gives a share, of 1 ms (24%) none, however slow the token; a prompt's copies the
    same beside its compute."""
    band = EfficiencyBand(low=0.5, high=0.8, source="")
    assert implied_ram_share(TokenParts(gpu_s=0.002, ram_s=0.0011, gpu_band=band), 0.015) is not None
    assert implied_ram_share(TokenParts(gpu_s=0.002, ram_s=0.0010, gpu_band=band), 0.015) is None
    assert implied_ram_share(TokenParts(gpu_s=0.002, ram_s=0.0010, gpu_band=band), 0.150) is None
    prompt = TokenParts(gpu_s=0.0, prompt_compute_s=0.002, prompt_link_s=0.0011, prompt_band=band)
    assert implied_link_share(prompt, 0.015, prompt=True) is not None
    small = TokenParts(gpu_s=0.0, prompt_compute_s=0.002, prompt_link_s=0.0010, prompt_band=band)
    assert implied_link_share(small, 0.015, prompt=True) is None


def test_the_committed_shares_are_a_refit_of_the_rows(tmp_path: Path) -> None:
    """placement-fits.json is what `calibrate.py --write` fits on placement-results.jsonl now."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_placements

    from ggprof.machine.profiles import ProfileDB

    fresh = bench_placements.fit_placements(bench_placements.load_rows(), tmp_path, ProfileDB.default())
    assert json.loads(fresh.to_json()) == json.loads(committed_placement_fits().to_json())


def test_a_prompts_copies_go_at_the_copies_share(tmp_path: Path, run_cli: RunCli) -> None:
    """gpt-oss-120b, every expert in RAM on an RTX 5090 (PCIe 5.0 x16, 63 GB/s): each batch of 512
    copies the experts to the GPU. The band, as a share of the ceiling (compute + copies at full
    rate), is the compute at the GPU's prompt band plus the copies at the fitted share."""
    model = write_model(tmp_path / "gpt-oss-120b.gguf", GPT_OSS_120B)[0]
    args = ["check", str(model), "--device", "rtx-5090", "--backend", "cuda", "-ngl", "99", "-ncmoe", "36"]
    d = json.loads(run_cli(*args, "--pp", "250", "--prompt", "512", "--ram-bandwidth", "80", "--json").stdout)
    p = d["predictions"][0]
    parts = p["token_parts"]
    copies = committed_placement_fits().copies
    assert copies is not None and parts["prompt_link_s"] > 0
    gpu = EfficiencyBand(low=parts["prompt_band"][0], high=parts["prompt_band"][1], source="")
    ceiling_s = 512 / p["prefill_ceiling_tok_s"]
    band = link_band_of(gpu, copies.band(), ceiling_s, parts["prompt_compute_s"], parts["prompt_link_s"], "")
    low = 512 / (parts["prompt_compute_s"] / gpu.low + parts["prompt_link_s"] / copies.low)
    assert band.low * p["prefill_ceiling_tok_s"] == pytest.approx(low)
    assert p["prefill_expected_tok_s_low"] == pytest.approx(low, rel=1e-6)

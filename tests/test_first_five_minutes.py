"""What a newcomer meets first, on the real CLI: `ggprof` alone, `fit` on a fresh machine and its
expected speeds, a claim too fast for either ceiling, a log's causes against its own facts, the
"next:" line after `profile`, a network that is down, and `plot` without its extra."""

from __future__ import annotations

import json
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_server import HubServer
from support import FAKE_BENCH, as_process, in_process, judged

ROOT = Path(__file__).resolve().parents[1]
LOGS = Path(__file__).parent / "data" / "logs"
BENCH_ROW = Path(__file__).parent / "data" / "llama-bench-gemma3-270m.json"  # a real row, replayed
# what makes a number too fast, whichever ceiling it breaks (the list)
TOO_FAST = (
    "another model or quant",
    "a cached prompt counted as processed",
    "speculative decoding",
    "batched requests summed",
    "a GPU the claim does not mention",
    "tokens counted as characters",
)


# -- 1. `ggprof` alone ------------------------------------------------------------------------------
def test_ggprof_alone_prints_the_groups_help_readable() -> None:
    r = in_process()
    assert r.exit_code == 2 and r.stdout == ""  # as Click groups do: the help on stderr, usage's status
    assert r.stderr.startswith("Usage: ggprof [OPTIONS] COMMAND [ARGS]...\n")
    assert "\nCommands:\n" in r.stderr and "Exit status:" in r.stderr and "Error:" not in r.stderr
    assert len(r.stderr.splitlines()) > 20 and max(len(line) for line in r.stderr.splitlines()) <= 100


# -- 2. and 3. `fit` on a fresh machine: it measures what it needs, and shows expected speeds ---------
@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine ggprof has never measured."""
    cache = tmp_path / "fresh-cache"
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(cache))
    return cache


def test_fit_on_a_fresh_machine_measures_the_bandwidth_once_and_keeps_it(gemma_path: Path, fresh_cache: Path) -> None:
    first = in_process("fit", str(gemma_path))
    assert first.exit_code == 0, first.stderr
    assert "measuring this host's memory bandwidth" in first.stderr and "(measured now)" in first.stdout
    assert list(fresh_cache.glob("host-*.json"))  # kept
    again = in_process("fit", str(gemma_path))
    assert again.exit_code == 0 and "measuring" not in again.stderr and "(cached)" in again.stdout


def test_fit_on_a_cpu_shows_the_expected_prefill_not_the_ceiling(gemma_path: Path) -> None:
    """On this host's CPU the pp512 column is the expected prefill (llama.cpp's measured share of the
    vector units' peak), far below the compute ceiling, and says what it rests on."""
    r = in_process("fit", str(gemma_path), "--json")
    assert r.exit_code == 0, r.stderr
    (row,) = json.loads(r.stdout)["models"]
    low, high, ceiling = row["prefill_tok_s_low"], row["prefill_tok_s_high"], row["prefill_ceiling_tok_s"]
    assert 0 < low < high <= 0.12 * ceiling
    assert row["prefill_basis"].startswith("llama.cpp CPU prefill measured on 4 CPUs")
    assert row["expected_tok_s_low"] <= row["expected_tok_s_high"] <= row["decode_ceiling_tok_s"]
    text = in_process("fit", str(gemma_path)).stdout
    line = next(x for x in text.splitlines() if "gemma-3-270m" in x)
    assert line.split()[-2].count("-") == 1 and not line.split()[-2].startswith("<=")  # a range, no ceiling
    assert "pp512 from: llama.cpp CPU prefill" in text and "(<=: its compute ceiling only)" in text


# -- 6. above a ceiling: what makes a number too fast, whichever ceiling it breaks ------------------
@pytest.mark.parametrize(("tg", "code"), [("5000", "DECODE_ABOVE_COMPUTE"), ("500", "DECODE_ABOVE_CEILING")])
def test_a_claim_too_fast_names_every_way_a_number_is_too_fast(gemma_path: Path, tg: str, code: str) -> None:
    """50 GB/s and 1 TFLOP/s: 500 tok/s breaks the bandwidth ceiling (203), 5,000 the compute one too."""
    r = in_process("check", str(gemma_path), "--tg", tg, "--bandwidth", "50", "--flops", "1", "--json")
    d = judged(r)
    finding = next(f for f in d["findings"] if f["severity"] == "impossible")
    assert r.exit_code == 4 and finding["code"] == code
    for cause in TOO_FAST:
        assert any(c.startswith(cause) or cause in c for c in finding["causes"]), (cause, finding["causes"])


# -- 7. a cause the log's own facts rule out is never the likely one --------------------------------
def test_a_cause_the_logs_own_table_rules_out_is_named_as_ruled_out() -> None:
    """A public llama-bench table on ROCm says ngl 99: no layer was left on the CPU."""
    log = str(LOGS / "eliranwong-strix-halo-rocm-generic-name.txt")
    d = json.loads(in_process("check", "--log", log, "--json").stdout)
    findings = [f for m in d["measurements"] for f in m["findings"] if f["severity"] == "suspicious"]
    assert findings
    for f in findings:
        assert not [c for c in f["causes"] if c.startswith(("layers not offloaded", "partial offload"))]
    evidence = [e for f in findings for e in f["evidence"] if e.startswith("ruled out by the log")]
    assert "ruled out by the log: layers not offloaded (line 7: llama-bench's ngl 99" in evidence[0]
    likely = next(x for x in in_process("check", "--log", log).stdout.splitlines() if "likely cause:" in x)
    assert "offload" not in likely


# -- 8. after `profile`, no "next:" line sends the user to `profile` --------------------------------


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache of the test's own (the fake's roofs never reach another test), with the session's
    host measurement (none measured again)."""
    import os

    cache = tmp_path / "cache"
    cache.mkdir()
    for f in Path(os.environ["GGPROF_CACHE_DIR"]).glob("host-*.json"):
        shutil.copy(f, cache)
    monkeypatch.setenv("GGPROF_CACHE_DIR", str(cache))
    yield cache


@pytest.mark.parametrize(
    ("speeds", "verdict"),
    [
        ({"pp": 300.0, "tg": 1e7, "tg_probe": 1e7}, "impossible"),  # more FLOP/s than the CPU has
        ({"pp": 300.0, "tg": 1.0, "tg_probe": 100.0}, "suspicious"),  # far below its own thread probe
    ],
)
def test_after_profile_no_next_line_says_to_run_profile(
    gemma_path: Path, tmp_path: Path, own_cache: Path, speeds: dict[str, float], verdict: str
) -> None:
    """A llama-bench that reports what it is told (one real row replayed): every "next:" line of
    the run's findings adds a step the run has not already taken, or is absent."""
    fake = tmp_path / "llama-bench"
    row = json.dumps(json.loads(BENCH_ROW.read_text())[-1])
    fake.write_text(FAKE_BENCH.format(python=sys.executable, row=row, **speeds))
    fake.chmod(0o755)
    args = ("profile", str(gemma_path), "--engine", f"llama-bench={fake}", "-p", "64", "-n", "16", "-r", "3")
    r = in_process(*args, "--no-save", "--json")
    d = judged(r)
    assert d["verdict"] == verdict, r.stderr
    steps = [f["next_step"] for f in d["findings"] if f["next_step"]]
    assert not [s for s in steps if "ggprof profile" in s], steps
    text = in_process(*args, "--no-save").stdout
    assert "next:" not in text or "ggprof profile" not in "".join(line for line in text.splitlines() if "next:" in line)


# -- 9. a network failure is not bad input ----------------------------------------------------------
@pytest.fixture
def no_listener() -> Iterator[int]:
    """A port of this machine bound but not listening: a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def test_a_network_failure_has_its_own_status_and_says_what_to_do(
    no_listener: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    cases: tuple[tuple[tuple[str, ...], dict[str, str], str], ...] = (
        (("fit", "hf://org/repo"), {"HF_ENDPOINT": f"http://127.0.0.1:{no_listener}"}, "connection refused"),
        (("inspect", f"http://127.0.0.1:{no_listener}/m.gguf"), {}, "connection refused"),
    )
    for args, env, why in cases:
        r = as_process(*args, env={**env, "HF_HOME": str(tmp_path / "hf")}, timeout_s=60)
        assert r.exit_code == 6 and r.stdout == "", (args, r.stderr)
        assert r.stderr.count("\n") == 1 and why in r.stderr, r.stderr
        assert "give a local path" in r.stderr and "HF_HUB_OFFLINE=1" in r.stderr
    with HubServer() as hub:  # a server that answers: a repository it does not have is bad input
        r = as_process("fit", "hf://org/missing", env={"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf")})
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr


def test_the_network_status_is_documented() -> None:
    from ggprof.errors import ExitStatus, exit_status_table

    assert int(ExitStatus.NETWORK_FAILED) == 6
    row = next(x for x in exit_status_table().splitlines() if x.startswith("| 6 |"))
    assert row in (ROOT / "docs" / "commands.md").read_text()
    assert "\n      6  network failure\n" in in_process("--help").stdout


# -- 11. `plot` without matplotlib ------------------------------------------------------------------
def test_plot_without_matplotlib_says_the_one_command_and_readme_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ggprof.report.plots import INSTALL_PLOT

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an install without the [plot] extra
    r = in_process("plot", "-o", str(tmp_path / "roofline.png"))
    assert r.exit_code == 2
    assert r.stderr == f"Error: `ggprof plot` needs matplotlib, the optional extra [plot]: {INSTALL_PLOT}\n"
    readme = (ROOT / "README.md").read_text().splitlines()
    (line,) = [x for x in readme if x.startswith("| `ggprof plot`")]
    assert INSTALL_PLOT in line

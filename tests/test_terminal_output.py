"""What reaches the terminal: no control codes from outside, no huge lines."""

from __future__ import annotations

from pathlib import Path

from ggufs import Shape, write_model
from support import (
    RunCli,
    as_process,
    bench_rows,
    clean_output,
    install_example,
    row,
)


# -- 4. no terminal control codes from outside, no huge lines -----------------------------------------
def test_control_codes_in_llama_bench_json_never_reach_the_terminal(tmp_path: Path) -> None:
    rows = bench_rows(tmp_path / "r.json", [row(model_filename="\x1b]0;pwned\x07evil.gguf")])
    r = as_process("check", "--llama-bench", str(rows), "--bandwidth", "90")
    assert r.exit_code == 2 and "pwned" in r.stderr and clean_output(r.stderr + r.stdout)


def test_a_huge_key_gives_a_short_error_line(tmp_path: Path, run_cli: RunCli) -> None:
    path = write_model(tmp_path / "m.gguf", Shape(extra={"k" * 5_000_000: 1}))[0]
    r = run_cli("inspect", str(path))
    assert r.exit_code == 2 and len(r.stderr) < 600 and "at most 65,536 allowed" in r.stderr


def test_plugin_text_is_cleaned(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install_example(site)
    (site / "ggprof_example_plugin.py").write_text(
        (site / "ggprof_example_plugin.py")
        .read_text()
        .replace('code="EXAMPLE_SUSPICIOUS_ROUND_NUMBER"', 'code="EXAMPLE\\x1b[2J\\x07CODE"')
    )
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    env = {"PYTHONPATH": str(site), "EXAMPLE_JUDGE": "1"}
    r = as_process("check", str(model), "--tg", "1000000", "--bandwidth", "50", env=env)
    assert "EXAMPLE[2JCODE" in r.stdout and clean_output(r.stdout + r.stderr)

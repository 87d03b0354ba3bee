"""The house's rules that a grep can hold: no module under src/ over 500 lines, what llama.cpp
prints read only in its room (`ggprof/logs/`, and `ggprof/llamacpp.py` for the lines the
supervisor reads from a running child), no process started or engine built in `cli/`."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).parent.parent / "src" / "ggprof"
MAX_MODULE_LINES = 500

# a pattern on what llama.cpp prints: the names of its log functions and its lines' words
LLAMA_CPP_WORDS = re.compile(
    r"llama_context|llama_model_loader|load_tensors|llama_kv_cache|print_info|system_info|"
    r"offloaded|n_ubatch|n_ctx|prompt eval|eval time|t/s|tok/s|ggml_|build:|draft acceptance|failed to load model"
)
REGEX_CALL = re.compile(r"re\.(?:compile|search|match|fullmatch|findall|finditer|sub|split)\(\s*r?[\"']([^\"']*)")


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_module_over_500_lines() -> None:
    long = {str(p.relative_to(SRC)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_llama_cpp_output_is_read_in_its_room_only() -> None:
    outside = []
    for p in modules():
        rel = p.relative_to(SRC)
        if rel.parts[0] == "logs" or rel == Path("llamacpp.py"):
            continue
        for m in REGEX_CALL.finditer(p.read_text()):
            if LLAMA_CPP_WORDS.search(m[1]):
                outside.append(f"{rel}: {m[1][:60]}")
    assert outside == []


def test_the_room_does_hold_them() -> None:
    """The grep above finds what it looks for where it is (it cannot pass by matching nothing)."""
    found = [
        m[1]
        for p in (SRC / "logs" / "patterns.py", SRC / "llamacpp.py")
        for m in REGEX_CALL.finditer(p.read_text())
        if LLAMA_CPP_WORDS.search(m[1])
    ]
    assert any("offloaded" in f for f in found) and any("load_tensors" in f for f in found)


def test_cli_starts_no_process_and_builds_no_engine() -> None:
    starts = re.compile(r"subprocess\.|Popen\(|os\.fork|os\.kill|\bspawn\(|Engine\(|\.start_server\(|\.stop\(\)")
    found = [
        f"{p.relative_to(SRC)}: {m[0]}"
        for p in sorted((SRC / "cli").rglob("*.py"))
        for m in starts.finditer(p.read_text())
    ]
    assert found == []

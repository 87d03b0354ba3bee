"""`profile --server --vs-bench`: the waterfall from llama-bench's number to a server's, each
term the difference of two measured runs or requests.

The arithmetic holds by construction (the terms and the unexplained rest add up to the gap),
on made-up numbers and on the real programs. A fake llama-server on another loopback address
(a server "on another machine"), answering with the recorded /props and /slots of the vendored
llama-server and timings the test chooses, gets the terms that need no llama-bench recovered
exactly, and the others named as not measured. On the real llama-server and llama-bench built
from the vendored llama.cpp, the terms and the rest add up to the measured gap. Which term is
the largest depends on how busy the machine is, so a planted difference (-ub 16, a penalizing
chain, four busy slots) is shown by the recorded waterfall in docs/commands.md, not asserted
here. Every real run is at -t 1, the server's and llama-bench's.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llamacpp_tools import start_llama_server
from replay_server import DATA, ReplayServer, Route, json_route, ollama_routes, recorded
from support import as_process, in_process

from ggprof.bench.gap import Measured, Term, Waterfall


def _m(label: str, *samples: float) -> Measured:
    return Measured(label=label, samples=samples, evidence=label)


def test_the_terms_and_the_rest_add_up_to_the_gap() -> None:
    start, b0, bd = _m("A", 61.3, 60.1, 60.9), _m("B0", 55.07, 54.2, 56.0), _m("BD", 51.9, 52.33, 50.0)
    base, chain, end = _m("g", 49.1, 48.7, 50.02), _m("c", 40.3, 41.1, 39.7), _m("s", 38.9, 39.4, 38.2)
    w = Waterfall(
        test="decode",
        start=start,
        end=end,
        terms=(
            Term(key="settings", name="s", what="", before=start, after=b0),
            Term(key="depth", name="d", what="", before=b0, after=bd),
            Term(key="sampling", name="c", what="", before=base, after=chain),
            Term(key="streaming", name="t", what="", before=chain, after=end),
        ),
    )
    assert w.gap_tok_s == pytest.approx(end.tok_s - start.tok_s, abs=1e-12)
    terms = [t.tok_s for t in w.terms if t.tok_s is not None]
    assert len(terms) == len(w.terms) and w.rest_tok_s is not None  # every term measured
    assert sum(terms) + w.rest_tok_s == pytest.approx(w.gap_tok_s, abs=1e-12)
    # the rest is the one link left out of the chain: the server's greedy turn against llama-bench's
    assert w.rest_tok_s == pytest.approx(base.tok_s - bd.tok_s, abs=1e-12)
    shares = [w.share(x) for x in terms] + [w.share(w.rest_tok_s)]
    assert sum(s for s in shares if s is not None) == pytest.approx(1.0, abs=1e-12)
    assert w.largest() is w.terms[2]


# -- a fake llama-server on "another machine" ----------------------------------------------------
# the rates its timings say, by how a turn asks: greedy whole, its chain whole, its chain
# streamed, and a turn among others at once (a slot other than 0)
PREFILL = {"greedy": 400.0, "chain": 390.0, "streamed": 380.0, "together": 100.0}
DECODE = {"greedy": 40.0, "chain": 30.0, "streamed": 28.0, "together": 10.0}


def _fake(model_path: Path) -> dict[tuple[str, str], Route]:
    props = recorded("llama-server-4-slots-props.json") | {"model_path": str(model_path)}
    whole = recorded("llama-server-completion-whole.json")

    def answer(body: Any) -> list[bytes]:
        greedy = body.get("samplers") == ["top_k"] and body.get("top_k") == 1
        how = "together" if body["id_slot"] else "greedy" if greedy else "streamed" if body["stream"] else "chain"
        n, p = int(body["n_predict"]), len(body["prompt"])
        timings = whole["timings"] | {
            "prompt_n": p,
            "prompt_ms": p / PREFILL[how] * 1e3,
            "predicted_n": n,
            "predicted_ms": (n - 1) / DECODE[how] * 1e3,  # n - 1 decode steps: the first token is the prompt's
        }
        end = whole | {"id_slot": body["id_slot"], "tokens_predicted": n, "timings": timings}
        if not body["stream"]:
            return [json.dumps(end).encode()]
        token = {"index": 0, "content": "(", "tokens": [236769], "stop": False, "id_slot": -1}
        return [b"data: " + json.dumps(token).encode() + b"\n\n"] * n + [b"data: " + json.dumps(end).encode() + b"\n\n"]

    return {
        ("GET", "/props"): json_route(props),
        ("GET", "/slots"): json_route(recorded("llama-server-4-slots-slots.json")),
        ("GET", "/health"): json_route({"status": "ok"}),
        ("POST", "/completion"): Route(answer=answer),
    }


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[str, ReplayServer]]:
    server = ReplayServer(_fake(tmp_path / "elsewhere" / "model.gguf"), host="127.0.0.2")
    with server as url:
        yield url, server


def _terms(w: dict[str, Any]) -> dict[str, float]:
    return {t["key"]: t["tok_s"] for t in [*w["terms"], *w["beyond"]]}


def test_a_remote_server_gets_the_terms_that_need_no_llama_bench(
    remote: tuple[str, ReplayServer], gemma_path: Path, tmp_path: Path
) -> None:
    url, server = remote
    db = tmp_path / "h.db"
    args = ("profile", str(gemma_path), "--server", url, "--vs-bench", "-p", "64", "-n", "9", "--db", str(db))
    r = in_process(*args, "--json")
    assert r.exit_code == 0, r.stderr
    gap = json.loads(r.stdout)
    assert gap["local"] is False
    settings = gap["settings"]
    assert (settings["n_slots"], settings["n_ctx_slot"], settings["top_k"], settings["repeat_penalty"]) == (
        4,
        512,
        0,
        1.1,
    )
    assert gap["sources"]["n_ctx_slot"] == "/slots" and gap["sources"]["top_k"] == "/props"
    for test, rates in (("prefill", PREFILL), ("decode", DECODE)):
        w = gap[test]
        assert w["start"] is None and w["gap_tok_s"] is None and w["unexplained_tok_s"] is None
        assert w["end"]["tok_s"] == pytest.approx(rates["streamed"], rel=1e-6)
        terms = _terms(w)
        assert terms["sampling"] == pytest.approx(rates["chain"] - rates["greedy"], rel=1e-6)
        assert terms["streaming"] == pytest.approx(rates["streamed"] - rates["chain"], rel=1e-6)
        assert terms["slots"] == pytest.approx(rates["together"] - rates["streamed"], rel=1e-6)
        assert set(terms) == {"sampling", "streaming", "client", "slots"}
        missing = {m["key"]: m["why"] for m in w["not_measured"]}
        elsewhere = "llama-bench must run on the server's machine, with its model file"
        assert missing["settings"] == missing["depth"] == elsewhere
        assert missing["prompt_cache"] == "no conversation before the turn (-d 0): nothing to cache"
    turns = [body for method, path, body in server.requests if path == "/completion"]
    greedy = [b for b in turns if "samplers" in b]
    assert greedy and all(b["samplers"] == ["top_k"] and b["top_k"] == 1 and not b["stream"] for b in greedy)
    assert all("top_k" not in b and "temperature" not in b for b in turns if b not in greedy)  # the server's own chain
    assert sorted({b["id_slot"] for b in turns}) == [0, 1, 2, 3]
    # kept with the run: `report` prints the waterfall, `plot` draws it
    report = in_process("report", "--db", str(db))
    assert report.exit_code == 0, report.stderr
    assert "| the sampler chain | -10" in report.stdout and "| every slot busy | -18" in report.stdout
    picture = tmp_path / "gap.svg"
    drawn = in_process("plot", "-o", str(picture), "--db", str(db))
    assert drawn.exit_code == 0, drawn.stderr
    assert "every slot busy" in picture.read_text()


def test_the_waterfall_as_text_names_what_it_could_not_measure(
    remote: tuple[str, ReplayServer], gemma_path: Path
) -> None:
    url, _ = remote
    r = in_process("profile", str(gemma_path), "--server", url, "--vs-bench", "-p", "64", "-n", "9", "--no-save")
    assert r.exit_code == 0, r.stderr
    assert "not measured: the server's settings (llama-bench must run on the server's machine" in r.stdout
    assert "  beyond: every slot busy" in r.stdout
    assert "--top-k 0 --repeat-penalty 1.1; against greedy" in r.stdout  # the chain as /props states it


def test_a_turn_the_slots_cannot_hold_is_refused(remote: tuple[str, ReplayServer], gemma_path: Path) -> None:
    url, _ = remote
    r = in_process("profile", str(gemma_path), "--server", url, "--vs-bench", "-p", "512", "-n", "9", "--no-save")
    assert r.exit_code == 2
    assert "the server's slots hold 512 tokens: depth + prompt + gen + 1 = 522 does not fit" in r.stderr


def test_vs_bench_needs_a_llama_server(gemma_path: Path) -> None:
    assert "give --server [URL]" in in_process("profile", "--vs-bench", "--no-save").stderr
    r = in_process("profile", "--server", "http://127.0.0.1:9", "--vs-bench", "--concurrency", "2", "--no-save")
    assert r.exit_code == 2 and "leave out --concurrency" in r.stderr
    with ReplayServer(ollama_routes()) as url:
        r = in_process("profile", "--server", url, "--vs-bench", "--no-save")
    assert r.exit_code == 2 and "--vs-bench needs a llama-server" in r.stderr


def test_the_recorded_answers_are_the_vendored_servers() -> None:
    props = recorded("llama-server-4-slots-props.json")
    assert props["build_info"] == recorded("llama-server-props.json")["build_info"] == "b1-0c1e570"
    assert (DATA / "SOURCES.md").read_text().count("llama-server-4-slots-") == 2


# -- the real llama-server and llama-bench -------------------------------------------------------
def _real_gap(tools: Path, model: Path, folder: Path, server_args: str, *args: str) -> dict[str, Any]:
    proc, url = start_llama_server(tools, model, folder / "server.log", "-t", "1", "--no-warmup", *server_args.split())
    try:
        r = as_process(
            "profile", "--server", url, "--vs-bench", "-t", "1", "--repack", "off", "--json", "--no-save",
            "--engine", f"llama-bench={tools / 'llama-bench'}", *args,
            timeout_s=900,
        )  # fmt: skip
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert r.exit_code == 0, r.stderr
    gap: dict[str, Any] = json.loads(r.stdout)
    return gap


@pytest.mark.slow
def test_on_a_real_server_the_terms_and_the_rest_are_the_measured_gap(
    llama_tools: Path, gemma_path: Path, tmp_path: Path
) -> None:
    """A server that differs from llama-bench's defaults in its slots (4 of 512 tokens), its
    sampler chain (penalties, no top-k) and its physical batch (-ub 64), with a conversation
    before the turn: every term is measured, and they add up to the measured gap."""
    planted = "-np 4 -c 2048 -ub 64 --top-k 0 --repeat-penalty 1.1"
    gap = _real_gap(llama_tools, gemma_path, tmp_path, planted, "-p", "128", "-n", "32", "-d", "64", "-r", "3")
    s = gap["settings"]
    assert (s["n_slots"], s["n_ctx_slot"], s["n_ubatch"], s["top_k"], s["repeat_penalty"]) == (4, 512, 64, 0, 1.1)
    for test in ("prefill", "decode"):
        w = gap[test]
        terms = [t["key"] for t in w["terms"]]
        assert terms == ["settings", "depth", "sampling", "streaming", "prompt_cache"]
        assert [t["key"] for t in w["beyond"]] == ["client", "slots"]
        assert w["terms"][0]["what"] == "-ub 64 (llama-bench's: 512)"
        assert "-c 2048 -np 4, 512 tokens a slot" in w["unexplained_evidence"]
        gap_tok_s = w["end"]["tok_s"] - w["start"]["tok_s"]
        assert w["gap_tok_s"] == pytest.approx(gap_tok_s, abs=1e-9)
        assert sum(t["tok_s"] for t in w["terms"]) + w["unexplained_tok_s"] == pytest.approx(gap_tok_s, abs=1e-9)
        for t in [*w["terms"], *w["beyond"]]:  # each term is its two measurements' medians apart
            after, before = t["after"]["samples_tok_s"], t["before"]["samples_tok_s"]
            assert t["tok_s"] == pytest.approx(statistics.median(after) - statistics.median(before), abs=1e-9)
            assert t["after"]["evidence"] and t["before"]["evidence"]
    assert "-p 0 -n 32 -r 1 -d 0,192 -t 1 -ngl 999 -ub 64 --repack 0" in gap["decode"]["terms"][0]["after"]["evidence"]

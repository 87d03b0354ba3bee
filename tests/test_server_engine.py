"""The server engine: a real llama-server (built from the installed llama-cpp-python's llama.cpp)
serving the real Gemma model with 4 slots; Ollama and LM Studio from their documented
answers (tests/data/servers); and servers that misbehave."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ggufs import Shape, write_model
from llamacpp_tools import free_port, start_llama_server
from replay_server import ReplayServer, Route, json_route, lm_studio_routes, ollama_routes
from support import as_process, judged, kept


@pytest.fixture(scope="module")
def llama_server(llama_tools: Path, gemma_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-server on the Gemma model, 4 slots of 1,024 tokens, 2 threads, on a free port."""
    log = tmp_path_factory.mktemp("llama-server") / "log.txt"
    proc, url = start_llama_server(llama_tools, gemma_path, log, "-np", "4", "-c", "4096", "-t", "2", "--no-warmup")
    with kept(proc, gently=True):
        yield url


@pytest.mark.slow
def test_profile_a_real_llama_server(llama_server: str, tmp_path: Path) -> None:
    # the host pinned (--bandwidth 0.1 GB/s: a ceiling no real decode stays under), so that the
    # verdict is one certain code whatever this machine is
    r = as_process(
        "profile", "--server", llama_server, "-p", "64", "-n", "32", "-r", "3", "--json",
        "--db", str(tmp_path / "r.db"), "--bandwidth", "0.1",
    )  # fmt: skip
    d = judged(r)
    assert d["engine"].startswith(f"llama-server at {llama_server} serving gemma-3-270m-q4_k_m.gguf")
    assert d["model"]["path"].endswith("gemma-3-270m-q4_k_m.gguf")  # its model path, read from /props
    # where it runs: the server process mapped no GPU library -> the CPU, with 2 threads from its command line
    assert d["context"]["backends_used"] == ["cpu"] and d["context"]["n_threads"] == 2
    assert any(
        n.startswith("placement: process") and n.endswith("no GPU library mapped") for n in d["context"]["notes"]
    )
    pp, tg = d["bench"]
    assert (pp["n_prompt"], tg["n_gen"]) == (64, 32)  # token-id prompts: exactly 64 tokens, never cached
    assert len(tg["samples_ns"]) == 3 and tg["itl_p50_ms"] > 0 and pp["ttft_ms"] > 0
    assert any(n.startswith("as the client saw it: decode") for n in d["context"]["notes"])
    # a CPU server's compute roof: ggprof's own llama.cpp on the same file at half its 2 threads
    assert any(n.startswith("compute roof: ggprof's own llama.cpp") for n in d["context"]["notes"])
    assert d["depths"][0]["probe_threads"] == 1 and d["depths"][0]["probe_tg_tok_s"] > 0
    (decode,) = [f for f in d["findings"] if f["code"].startswith("DECODE_")]
    assert (decode["code"], d["verdict"]) == ("DECODE_ABOVE_CEILING", "impossible")


@pytest.mark.slow
def test_a_cpu_server_profile_is_adaptive(llama_server: str) -> None:
    """Without -r: the requests repeat until the answer is known, and the reason is said."""
    r = as_process("profile", "--server", llama_server, "-p", "32", "-n", "32", "--json", "--no-save", timeout_s=300)
    tg = judged(r)["bench"][1]
    assert tg["stop_reason"] and 1 <= len(tg["samples_ns"]) <= 10


@pytest.mark.slow
@pytest.mark.parametrize(("low_tok_s", "probed"), [(1e6, True), (1e-3, False)])
def test_a_cpu_server_is_probed_only_where_the_decode_verdict_turns_on_it(
    llama_server: str, gemma_path: Path, low_tok_s: float, probed: bool
) -> None:
    """The compute roof of ggprof's own llama.cpp only lowers the low end of the range where the
    decode is plausible. Below a low end no decode reaches (1e6 tok/s), it is measured after the
    first request, between requests, and the stop rule uses it; above a low end every decode
    clears (0.001 tok/s), it is not measured at all, and the reason says so."""
    from ggprof.bench.results import BenchParams
    from ggprof.bench.stopping import PlausibleRange, StopRule
    from ggprof.engines.server import ServerEngine
    from ggprof.machine.facts import gather_facts
    from ggprof.model.spec import load_model

    rule = StopRule(ranges=(PlausibleRange("tg@0", low_tok_s, 1e9, 1.14),))
    params = BenchParams(model=gemma_path, n_prompt=(16,), n_gen=(16,), n_threads=2, stop=rule)
    result = ServerEngine(llama_server).run(load_model(gemma_path), params, gather_facts())
    tg = result.row("tg")
    assert tg is not None and tg.stop_reason
    notes = result.context.notes
    roof = [i for i, n in enumerate(notes) if n.startswith("compute roof: ggprof's own llama.cpp")]
    assert (tg.probe is not None) == probed and len(roof) == int(probed)
    assert tg.stop_reason.endswith("; no thread probe: the decode lies wholly in the range") != probed
    if probed:  # measured before the client's summary of the timed requests is written
        assert roof[0] < next(i for i, n in enumerate(notes) if n.startswith("as the client saw it"))
        assert tg.probe is not None and tg.probe.n_threads == 1


@pytest.mark.slow
def test_the_server_decode_figure_is_its_own_timings(llama_server: str) -> None:
    """What the engine reports for decode is what llama-server's `timings` say, request by request."""
    import urllib.request

    body = json.dumps({"prompt": [1000 + i for i in range(16)], "n_predict": 16, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"{llama_server}/completion", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        timings = json.load(resp)["timings"]
    assert timings["predicted_n"] == 16 and timings["prompt_n"] == 16
    r = as_process("profile", "--server", llama_server, "-p", "16", "-n", "16", "-r", "2", "--json", "--no-save")
    tg = json.loads(r.stdout)["bench"][1]
    # the row is the server's own figures (16 tokens in each request's timings): how close they are
    # to the client's clock is benchmarks/bench_engines.py's measurement, not this test's
    assert (tg["n_gen"], len(tg["samples_ns"])) == (16, 2)
    assert tg["avg_ts"] == pytest.approx(statistics.fmean(16 / (ns / 1e9) for ns in tg["samples_ns"]))


@pytest.mark.slow
def test_concurrency_sweep_on_four_slots(llama_server: str) -> None:
    r = as_process(
        "profile",
        "--server",
        llama_server,
        "-p",
        "16",
        "-n",
        "24",
        "-r",
        "1",
        "--concurrency",
        "1,2,4",
        "--json",
        "--no-save",
        timeout_s=300,
    )
    d = judged(r)
    rows = {b["n_parallel"]: b for b in d["bench"]}
    assert sorted(rows) == [1, 2, 4]
    sweep = d["concurrency"]  # what users at once do to speed: benchmarks/bench_sweeps.py measures it
    assert [p["users"] for p in sweep["points"]] == [1, 2, 4]
    for p in sweep["points"]:  # each level's figures are its row's, per user the aggregate shared out
        assert p["aggregate_tok_s"] == pytest.approx(rows[p["users"]]["avg_ts"])
        assert p["per_user_tok_s"] == pytest.approx(p["aggregate_tok_s"] / p["users"])
    assert all(p["predicted_aggregate_ceiling_tok_s"] > 0 for p in sweep["points"])


def profile_replayed(
    routes: dict[tuple[str, str], Route], *args: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """`ggprof profile --server` against a replayed server (short runs; later flags win)."""
    with ReplayServer(routes) as url:
        short = ("-p", "16", "-n", "16", "-r", "1", "--json", "--no-save")
        r = as_process("profile", "--server", url, *short, *args, env=env)
    return {**judged(r), "url": url}


def test_ollama_from_its_documented_answers(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    d = profile_replayed(ollama_routes(), str(model), "--device", "rtx-4090", "-n", "64", "-r", "2")
    url = d["url"]
    assert d["engine"] == f"Ollama at {url} serving mistral:latest, build Ollama 0.12.6"
    tg = d["bench"][1]
    # the server's own figure: eval_count 259 in eval_duration 4.23271 s
    assert tg["avg_ts"] == pytest.approx(259 / 4.23271, rel=1e-3)
    assert d["bench"][0]["n_prompt"] == 26  # prompt_eval_count: the prompt as the server counted it
    notes = " ".join(d["context"]["notes"])
    assert "size_vram 5.14 GB of 5.14 GB (100% on the GPU)" in notes
    assert d["device"]["backend"] == "cuda"  # where Ollama says it runs, the --device of it


def test_ollama_placement_unknown_without_a_device(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    with ReplayServer(ollama_routes()) as url:
        r = as_process("profile", str(model), "--server", url, "-p", "16", "-n", "16", "-r", "1", "--json", "--no-save")
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and d["verdict"] == "unknown"
    assert {f["code"] for f in d["findings"]} == {"PLACEMENT_UNKNOWN"}


def test_ollama_model_found_in_its_store(tmp_path: Path) -> None:
    """With no MODEL: the loaded model's manifest -> blob in the local store."""
    store = tmp_path / "ollama"
    blob = store / "blobs" / ("sha256-" + "b" * 64)
    blob.parent.mkdir(parents=True)
    write_model(blob, Shape(name="mistral stand-in"))
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "mistral" / "latest"
    manifest.parent.mkdir(parents=True)
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "b" * 64}
    manifest.write_text(json.dumps({"layers": [layer]}))
    d = profile_replayed(ollama_routes(), "--device", "rtx-4090", env={"OLLAMA_MODELS": str(store)})
    assert d["model"]["path"] == str(blob)


def test_lm_studio_from_its_documented_answers(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    d = profile_replayed(lm_studio_routes(), str(model), "--device", "apple-m2-max", "-n", "9", "-r", "2")
    url = d["url"]
    assert (
        d["engine"]
        == f"LM Studio at {url} serving meta-llama-3.1-8b-instruct, runtime llama.cpp-mac-arm64-apple-metal-advsimd"
    )
    tg = d["bench"][1]
    assert tg["avg_ts"] == pytest.approx(9 / 0.156, rel=1e-3)  # generation_time 0.156 s for 9 tokens
    assert d["context"]["backends_used"] == ["metal"]


def test_lm_studio_with_no_model_loaded_says_so(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    with ReplayServer(lm_studio_routes(loaded=None)) as url:
        r = as_process("profile", str(model), "--server", url, "--no-save")
    assert r.exit_code == 2 and f"LM Studio at {url} has no model loaded" in r.stderr


# -- servers that misbehave: one line, a documented status, nothing hangs -----------------------
def broken(generate: Route) -> dict[tuple[str, str], Route]:
    routes = ollama_routes()
    routes[("POST", "/api/generate")] = generate
    return routes


def run_against(routes: dict[tuple[str, str], Route], tmp_path: Path, *extra: str) -> tuple[int, str]:
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    with ReplayServer(routes) as url:
        r = as_process(
            "profile", str(model), "--server", url, "-p", "8", "-n", "8", "-r", "2", "--no-save", *extra, timeout_s=60
        )
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error: ")]
    assert "Traceback" not in r.stderr and len(errors) == 1, r.stderr
    return r.exit_code, errors[0]


def test_a_url_that_is_not_a_server(tmp_path: Path) -> None:
    code, err = run_against({("GET", "/"): json_route({"hello": 1})}, tmp_path)
    assert code == 2 and "not llama-server, Ollama, LM Studio or an OpenAI-compatible server" in err
    port = free_port()
    r = as_process("profile", "--server", f"http://127.0.0.1:{port}", "--no-save")
    assert r.exit_code == 2 and "nothing accepts connections there" in r.stderr
    r = as_process("profile", "--server", "ftp://example", "--no-save")
    assert r.exit_code == 2 and "not an http(s) URL" in r.stderr


def test_a_server_answering_500(tmp_path: Path) -> None:
    code, err = run_against(broken(Route(status=500, body=b"model crashed")), tmp_path)
    assert code == 5 and "HTTP 500 model crashed" in err


def test_a_stream_that_is_not_json(tmp_path: Path) -> None:
    code, err = run_against(broken(Route(lines=[b"<html>oops</html>\n"])), tmp_path)
    assert code == 5 and "a streamed line is not JSON: <html>oops</html>" in err


def test_a_stream_that_breaks_off_keeps_what_was_measured(tmp_path: Path) -> None:
    """The warm-up and the first repetition complete; the second stream closes after 3 tokens."""
    code, err = run_against(broken(Route(lines=recorded_lines(), cut_after=3, cut_from=2)), tmp_path)
    assert code == 5 and "the stream ended before the completion did" in err
    assert "measured before the fault: pp8 " in err and "tg8 " in err


def recorded_lines() -> list[bytes]:
    from replay_server import DATA

    return [ln.encode() + b"\n" for ln in (DATA / "ollama-generate-stream.jsonl").read_text().splitlines()]


def test_a_stream_that_never_ends_times_out(tmp_path: Path) -> None:
    t0 = time.monotonic()
    code, err = run_against(
        broken(Route(lines=recorded_lines()[:1], forever=True, line_delay_s=0.01)), tmp_path, "--timeout", "3"
    )
    assert code == 5 and "ran past its time limit (--timeout)" in err and time.monotonic() - t0 < 40


def test_a_server_that_never_sends_a_token_times_out(tmp_path: Path) -> None:
    code, err = run_against(broken(Route(silent_s=30)), tmp_path, "--timeout", "2")
    assert code == 5 and "the stream ran past its time limit (--timeout)" in err


def test_each_flag_needs_an_engine_that_can_measure_it(gemma_path: Path) -> None:
    """The CLI asks the engine what it can measure (its declared capabilities), never its name:
    a flag it cannot serve is one line naming the engines that can."""
    r = as_process("profile", str(gemma_path), "--concurrency", "1,2", "--no-save")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert (
        "--concurrency measures several users at once, which the python engine cannot; engines that can: server; "
        "--server [URL] runs the server engine" in r.stderr
    )
    r = as_process("profile", str(gemma_path), "--server", "http://127.0.0.1:9", "-d", "512", "--no-save")
    assert (
        r.exit_code == 2 and "-d measures decode at a KV depth" in r.stderr and "the server engine cannot" in r.stderr
    )
    assert "engines that can: llama-bench, python" in r.stderr


def test_a_remote_ollama_model_described_by_api_show(tmp_path: Path) -> None:
    """No store here: the header comes from `/api/show` verbose (GGUF metadata and tensor table,
    in Ollama's shape), and is read as the file's own header would be."""
    from ggprof.model.gguf import ArrayValue, read_header
    from ggprof.model.spec import load_model

    model = write_model(tmp_path / "m.gguf", Shape(n_layers=3, name="remote"))[0]
    header = read_header(model)

    def as_ollama(v: object) -> object:  # Ollama lists arrays whole (the tokenizer too) when verbose
        if isinstance(v, ArrayValue):
            return list(v.items) if v.items is not None else ["tok"] * v.length
        return v

    info = {k: as_ollama(v.value) for k, v in header.metadata.items()}
    tensors = [{"name": t.name, "type": t.ggml_type.name, "shape": list(t.shape)} for t in header.tensors]
    routes = ollama_routes()
    routes[("POST", "/api/show")] = json_route({"model_info": info, "tensors": tensors, "details": {"format": "gguf"}})
    empty = tmp_path / "no-store"
    empty.mkdir()
    d = profile_replayed(routes, "--device", "rtx-4090", env={"OLLAMA_MODELS": str(empty)})
    direct = load_model(model)
    assert d["model"]["path"] == "ollama:mistral:latest"
    assert d["model"]["decode_bytes_per_token"] == direct.decode_bytes_per_token
    assert d["model"]["kv_bytes_per_token"] == direct.kv_bytes_per_token()


def test_an_old_ollama_without_tensors_asks_for_the_file(tmp_path: Path) -> None:
    routes = ollama_routes()
    routes[("POST", "/api/show")] = json_route({"model_info": {"general.architecture": "llama"}})
    empty = tmp_path / "no-store"
    empty.mkdir()
    with ReplayServer(routes) as url:
        r = as_process("profile", "--server", url, "--no-save", env={"OLLAMA_MODELS": str(empty)})
    assert r.exit_code == 2 and "lists no tensors (an older Ollama): give the model file" in r.stderr


@pytest.mark.slow
def test_other_users_on_the_server_are_named(llama_server: str) -> None:
    """A request already decoding when the run starts takes one of the 4 slots: the run context
    says so, and a slow decode names it first (the slots share the device)."""
    import threading
    import urllib.request

    body = json.dumps({"prompt": "hello", "n_predict": 400, "ignore_eos": True}).encode()
    other = urllib.request.Request(
        f"{llama_server}/completion", data=body, headers={"Content-Type": "application/json"}
    )
    busy = threading.Thread(target=lambda: urllib.request.urlopen(other, timeout=300).read(), daemon=True)
    busy.start()
    # wait until the server reports the other request in a slot (the state the run must meet),
    # not a fixed time: /slots polled under one whole deadline
    deadline = time.monotonic() + 120

    def processing() -> int:
        with urllib.request.urlopen(f"{llama_server}/slots", timeout=5) as answer:
            return sum(1 for slot in json.loads(answer.read()) if slot.get("is_processing") is True)

    while processing() == 0:
        assert busy.is_alive() and time.monotonic() < deadline, "the other request never took a slot"
    r = as_process("profile", "--server", llama_server, "-p", "32", "-n", "16", "-r", "2", "--json", "--no-save")
    d = json.loads(r.stdout)
    assert (d["context"]["other_requests"], d["context"]["server_slots"]) == (1, 4)
    for f in d["findings"]:
        if f["code"] == "DECODE_BELOW_BAND":
            assert f["causes"][0].startswith("the server was serving 1 other request(s)")
    busy.join(timeout=300)


def test_an_openai_compatible_server_is_timed_by_the_client(tmp_path: Path) -> None:
    """Neither llama-server, Ollama nor LM Studio: /v1/models answers, completions stream as
    server-sent events in OpenAI's documented shape, and the client's clock is all there is."""
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    chunk = {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": "served",
        "choices": [{"index": 0, "text": " a", "finish_reason": None}],
    }
    last = {**chunk, "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
    events = [f"data: {json.dumps(chunk)}\n\n".encode()] * 16 + [
        f"data: {json.dumps(last)}\n\n".encode(),
        b"data: [DONE]\n\n",
    ]
    routes = {
        ("GET", "/v1/models"): json_route({"object": "list", "data": [{"id": "served", "object": "model"}]}),
        ("POST", "/v1/completions"): Route(lines=events, line_delay_s=0.01),
    }
    d = profile_replayed(routes, str(model), "--device", "rtx-4090")
    assert d["engine"] == f"an OpenAI-compatible server at {d['url']} serving served"
    tg = d["bench"][1]
    # 16 tokens 10 ms apart: about 100 tok/s by the client's clock (the server says nothing)
    assert 30 < tg["avg_ts"] < 110 and tg["client_avg_ts"] == pytest.approx(tg["avg_ts"])

"""Peers that drip, lie, flood or fork: fake servers (on loopback, started here, living only
for their test), fake llama-bench programs and a fake rpc-server. Each case asserts its one
outcome: a bounded time (a whole deadline), a bounded peak memory (measured here), one clean
error line with its documented status or a verdict, no control character in the output, and
no process left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from ggufs import Shape, write_model
from replay_server import (
    ReplayServer,
    Route,
    json_route,
    llama_server_routes,
    lm_studio_routes,
    ollama_routes,
    recorded,
)
from support import CliResult, as_process

MiB = 1 << 20


@dataclass
class Watched:
    result: CliResult
    seconds: float
    peak_rss_bytes: int


def watched(*args: str, env: dict[str, str] | None = None, timeout_s: float = 120) -> Watched:
    """`ggprof ARGS` in a subprocess, its resident memory sampled every 20 ms."""
    t0 = time.monotonic()
    proc = psutil.Popen(
        [sys.executable, "-m", "ggprof", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    peak = 0
    out: list[bytes] = []

    def read() -> None:
        out.extend(proc.communicate(timeout=timeout_s))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while reader.is_alive():
        with contextlib.suppress(psutil.Error):
            peak = max(peak, proc.memory_info().rss)
        reader.join(0.02)
    stdout, stderr = (b.decode("utf-8", "replace") for b in out)
    return Watched(CliResult(proc.returncode, stdout, stderr), time.monotonic() - t0, peak)


def one_error(r: CliResult, status: int) -> str:
    """The run's one `Error:` line, its status `status`, no traceback, nothing raw from outside."""
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error: ")]
    assert r.exit_code == status and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert not any(ch in r.stderr + r.stdout for ch in "\x1b\x07\u202e")
    return errors[0]


# -- 1. drip-fed answers end at a whole deadline ---------------------------------------------------
def test_a_props_dripped_a_byte_at_a_time_ends_at_the_request_deadline(tmp_path: Path) -> None:
    """/props: headers promising 100 kB, then one byte every 0.5 s. The identification request
    has a 5 s deadline as a whole; no API answers as its own, so: not a server, exit 2."""
    drip = Route(headers={"Content-Length": "100000"}, raw=b'{"model_path": "' + b"a" * 1000, raw_step=1)
    drip.line_delay_s = 0.5
    with ReplayServer({("GET", "/props"): drip}) as url:
        w = watched("profile", "--server", url, "--no-save")
    assert "not llama-server, Ollama, LM Studio or an OpenAI-compatible server" in one_error(w.result, 2)
    assert w.seconds < 25


def test_a_completion_line_dripped_without_a_newline_ends_at_timeout(tmp_path: Path) -> None:
    """The stream's line never ends: a byte every 0.3 s. --timeout 4 bounds the whole stream."""
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    routes = llama_server_routes(model)
    routes[("POST", "/completion")] = Route(raw=b'data: {"content": "' + b"a" * 10_000, raw_step=1, line_delay_s=0.3)
    with ReplayServer(routes) as url:
        w = watched("profile", "--server", url, "--timeout", "4", "--no-save")
    assert "the stream ran past its time limit (--timeout)" in one_error(w.result, 5)
    assert w.seconds < 30


def test_endless_chunk_trailers_end_at_the_request_deadline(tmp_path: Path) -> None:
    """A chunked /props whose trailer lines never end: the request stops at its deadline."""
    trailers = Route(
        headers={"Transfer-Encoding": "chunked"}, raw=b"0\r\n" + b"X-A: b\r\n" * 100_000, raw_step=8, line_delay_s=0.01
    )
    with ReplayServer({("GET", "/props"): trailers}) as url:
        w = watched("profile", "--server", url, "--no-save")
    assert "not llama-server, Ollama, LM Studio" in one_error(w.result, 2)
    assert w.seconds < 25


def test_an_ollama_show_dripped_ends_at_the_runs_timeout(tmp_path: Path) -> None:
    """No store here: the header must come from /api/show, which drips. --timeout 4 bounds it
    as it bounds the run's own requests."""
    routes = ollama_routes()
    routes[("POST", "/api/show")] = Route(
        headers={"Content-Length": "100000"}, raw=b'{"model_info": {"a": "' + b"b" * 1000, raw_step=1, line_delay_s=0.3
    )
    empty = tmp_path / "no-store"
    empty.mkdir()
    with ReplayServer(routes) as url:
        w = watched("profile", "--server", url, "--timeout", "4", "--no-save", env={"OLLAMA_MODELS": str(empty)})
    assert "/api/show: no whole answer in time (the request's deadline passed)" in one_error(w.result, 5)
    assert w.seconds < 25


# -- 2. memory bounded by what is parsed, not only by bytes read ----------------------------------
def test_a_chunk_of_size_minus_one_then_gigabytes_is_cut_at_the_cap(tmp_path: Path) -> None:
    """/props, then a streamed completion, chunked with a chunk size of -1, then 2 GiB: each read
    up to its answer's cap (65 MiB, 33 MiB), never all of it."""
    flood = Route(headers={"Transfer-Encoding": "chunked"}, raw=b"-1\r\n" + b"x" * MiB, raw_step=MiB)
    flood.raw_repeat = 2048
    with ReplayServer({("GET", "/props"): flood}) as url:
        w = watched("profile", "--server", url, "--no-save")
    one_error(w.result, 2)
    assert w.peak_rss_bytes < 400 * MiB, w.peak_rss_bytes
    # the stream's flood against the same run whose stream answers an error at once: what the
    # host's own measurement takes is in both, the flood's share must stay within its cap
    routes = llama_server_routes(write_model(tmp_path / "m.gguf", Shape())[0])
    peaks = {}
    error = Route(status=500, body=b"no")
    for name, route in (("warm-up", error), ("error", error), ("flood", flood)):  # warm-up: the host cached
        routes[("POST", "/completion")] = route
        with ReplayServer(routes) as url:
            w = watched("profile", "--server", url, "--no-save")
        peaks[name] = w.peak_rss_bytes
    assert "the stream broke off (sent more than 33 MiB; the rest not read)" in one_error(w.result, 5)
    assert peaks["flood"] - peaks["error"] < 150 * MiB, peaks


def test_a_body_of_millions_of_empty_objects_is_not_parsed(tmp_path: Path) -> None:
    """63 MiB of `[{},{},...]` would parse into 1.6 GB: refused by its item count, from a
    server and from a llama-bench file alike."""
    body = b"[" + b"{}," * (21 * MiB) + b"{}]"
    with ReplayServer({("GET", "/props"): Route(body=body)}) as url:
        w = watched("profile", "--server", url, "--no-save")
    one_error(w.result, 2)
    assert w.peak_rss_bytes < 500 * MiB, w.peak_rss_bytes
    results = tmp_path / "results.json"
    results.write_bytes(body)
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    w = watched("check", str(model), "--llama-bench", str(results), "--bandwidth", "50")
    assert "more JSON items than 0 llama-bench rows hold" in one_error(w.result, 2)
    assert w.peak_rss_bytes < 500 * MiB, w.peak_rss_bytes


# -- 3. lying but finite numbers are judged or refused, never a crash ------------------------------
PINNED = ("--bandwidth", "50", "--flops", "1", "-p", "16", "-n", "16", "-r", "1", "--json", "--no-save")


@pytest.mark.parametrize("timings", [{"predicted_ms": 5e-324}, {"predicted_ms": 1e-12}, {"predicted_ms": 0}])
def test_a_llama_server_claiming_no_time_is_judged_impossible(timings: dict[str, float], tmp_path: Path) -> None:
    """16 tokens in (next to) no time: more arithmetic than a 1 TFLOP/s device can do, whatever
    its caches hold."""
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    with ReplayServer(llama_server_routes(model, **timings)) as url:
        r = as_process("profile", "--server", url, *PINNED)
    d = json.loads(r.stdout)
    assert r.exit_code == 4 and d["verdict"] == "impossible"
    assert "DECODE_ABOVE_COMPUTE" in {f["code"] for f in d["findings"]}


def test_a_llama_server_counting_more_tokens_than_it_streamed_is_refused(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    with ReplayServer(llama_server_routes(model, predicted_n=1e14)) as url:
        r = as_process("profile", "--server", url, *PINNED)
    assert "its timings count 99,999,999,999,999 generated tokens, its stream carried 4" in one_error(r, 5)


def test_lm_studio_claiming_no_generation_time_is_judged_impossible(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    routes = lm_studio_routes()
    completion = recorded("lm-studio-completion.json")
    completion["stats"]["generation_time"] = 5e-324
    routes[("POST", "/api/v0/completions")] = json_route(completion)
    with ReplayServer(routes) as url:
        r = as_process("profile", str(model), "--server", url, *PINNED)
    d = json.loads(r.stdout)
    assert r.exit_code == 4 and "DECODE_ABOVE_COMPUTE" in {f["code"] for f in d["findings"]}


def test_a_stream_delivered_in_one_burst_is_not_a_decode_rate(tmp_path: Path) -> None:
    """An OpenAI-compatible server behind a proxy that buffers the stream: every token in one
    flush, microseconds apart. Without timings of the server's own, nothing can be timed."""
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    chunk = {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": " a", "finish_reason": None}]}
    last = {**chunk, "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
    stream = b"".join([f"data: {json.dumps(chunk)}\n\n".encode()] * 16 + [f"data: {json.dumps(last)}\n\n".encode()])
    routes = {
        ("GET", "/v1/models"): json_route({"object": "list", "data": [{"id": "served", "object": "model"}]}),
        ("POST", "/v1/completions"): Route(
            headers={"Content-Type": "text/event-stream"}, raw=stream + b"data: [DONE]\n\n"
        ),
    }
    with ReplayServer(routes) as url:
        r = as_process("profile", str(model), "--server", url, *PINNED)
    assert "a burst (a proxy that buffers the stream?), not a decode rate" in one_error(r, 5)


# -- 4 and 5. a remote Ollama's run is kept; its texts are cleaned wherever they are printed -------
def test_a_remote_ollama_run_is_kept_and_its_hostile_names_are_cleaned(tmp_path: Path) -> None:
    """The header comes from /api/show (no store here), its architecture an OSC title sequence
    and a right-to-left override: the run is judged, kept, and printed clean everywhere."""
    from ggprof.model.gguf import ArrayValue, read_header

    model = write_model(tmp_path / "m.gguf", Shape(n_layers=3, name="remote"))[0]
    header = read_header(model)
    bad = "llama\x1b]0;pwned\x07\u202e"

    def as_ollama(v: object) -> object:
        return (list(v.items) if v.items is not None else ["tok"] * v.length) if isinstance(v, ArrayValue) else v

    info = {k.replace("llama.", bad + ".", 1): as_ollama(v.value) for k, v in header.metadata.items()}
    info["general.architecture"] = bad
    tensors = [{"name": t.name, "type": t.ggml_type.name, "shape": list(t.shape)} for t in header.tensors]
    routes = ollama_routes()
    routes[("POST", "/api/show")] = json_route({"model_info": info, "tensors": tensors})
    empty = tmp_path / "no-store"
    empty.mkdir()
    db = tmp_path / "h.db"
    env = {"OLLAMA_MODELS": str(empty)}
    with ReplayServer(routes) as url:
        r = as_process("profile", "--server", url, "-p", "16", "-n", "16", "-r", "1", "--device", "rtx-4090",
                       "--db", str(db), env=env)  # fmt: skip
    # the replayed timings and /api/ps placement (3 of 4 layers on the GPU) make it suspicious
    assert r.exit_code == 3 and "verdict: SUSPICIOUS (exit status 3)" in r.stdout, r.stderr
    assert "saved as run 1" in r.stderr and "| llama]0;pwned Q8_0 |" in r.stdout
    history = as_process("history", "--db", str(db)).stdout
    report = as_process("report", "--db", str(db)).stdout
    assert "remote" in history and "llama]0;pwned" in report
    for out in (r.stdout, history, report):
        assert not any(ch in out for ch in "\x1b\x07\u202e")


# -- 6. long or odd names are one line ------------------------------------------------------------
@pytest.mark.parametrize(
    ("engine", "error"),
    [
        ("llama-bench=~nouser-ggprof-test/x", "the home folder of ~nouser-ggprof-test is not known here"),
        ("llama-bench=" + "a" * 5000, "a path longer than a file system allows"),
        ("llama-bench=/tmp/" + "a" * 300 + "/x", "a path longer than a file system allows"),
    ],
)
def test_an_engine_path_no_system_can_open_is_one_line(engine: str, error: str, tmp_path: Path) -> None:
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    r = as_process("bench", str(model), "--engine", engine, "--no-save")
    assert error in one_error(r, 2)


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("http://" + "a" * 3000, "not a host name that can be looked up"),
        ("http://" + "a" * 70 + ".example", "not a host name that can be looked up"),
        ("http://127.0.0.1:0", "port 0 is not a port a server listens on"),
    ],
)
def test_a_server_url_that_names_no_server_is_one_line(url: str, error: str) -> None:
    assert error in one_error(as_process("profile", "--server", url, "--no-save"), 2)


def test_a_served_model_path_longer_than_a_file_name_is_one_line(tmp_path: Path) -> None:
    routes = llama_server_routes(tmp_path / ("a" * 300 + ".gguf"))
    with ReplayServer(routes) as url:
        r = as_process("profile", "--server", url, "--no-save")
    assert "whose file is not on this machine: give it as MODEL.gguf" in one_error(r, 2)


def test_an_ollama_model_name_longer_than_a_file_name_is_one_line(tmp_path: Path) -> None:
    ps = recorded("ollama-ps.json")
    ps["models"][0]["name"] = "a" * 300 + ":latest"
    routes = ollama_routes()
    routes[("GET", "/api/ps")] = json_route(ps)
    empty = tmp_path / "no-store"
    empty.mkdir()
    with ReplayServer(routes) as url:  # not in the store (no such name can be), and no /api/show here
        r = as_process("profile", "--server", url, "--no-save", env={"OLLAMA_MODELS": str(empty)})
    assert "/api/show: HTTP 404" in one_error(r, 5)


# -- 9. a served -t is bounded ----------------------------------------------------------------------
def test_a_thread_count_llama_cpp_refuses_is_not_believed() -> None:
    from ggprof.engines.server.process import threads_of

    assert threads_of(["llama-server", "-m", "x.gguf", "-t", "1200"]) is None
    assert threads_of(["llama-server", "--threads=0"]) is None
    assert threads_of(["llama-server", "-t", "8"]) == 8


# -- 10. a failure of what is measured has its own status; a loading server is waited for ---------
@pytest.mark.parametrize("program", ["/bin/true", "/bin/false", "yes", "env"])
def test_a_program_that_is_not_llama_bench_is_a_failed_run(program: str, tmp_path: Path) -> None:
    import shutil

    model = write_model(tmp_path / "m.gguf", Shape())[0]
    path = shutil.which(program)
    assert path is not None
    w = watched("bench", str(model), "--engine", f"llama-bench={path}", "-r", "1", "--no-save", timeout_s=60)
    one_error(w.result, 5)
    assert w.seconds < 30


def test_a_llama_server_still_loading_is_waited_for(tmp_path: Path) -> None:
    """503 `Loading model` (as recorded from llama-server) for 2.5 s, then the model is there:
    the run waits for it and goes on to its verdict."""
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    routes = llama_server_routes(model)
    ready = routes[("GET", "/props")]
    routes[("GET", "/props")] = json_route(recorded("llama-server-loading.json"), 503)
    with ReplayServer(routes) as url:  # the server reads `routes` on each request
        threading.Timer(2.5, routes.__setitem__, (("GET", "/props"), ready)).start()
        r = as_process("profile", "--server", url, *PINNED)
    d = json.loads(r.stdout)
    assert r.exit_code == d["exit_status"] and d["engine"].startswith("llama-server at "), r.stderr


# -- 11. a store a server names is never left; figures a device cannot have are refused -----------
def test_lm_studio_naming_a_path_outside_its_folder_is_not_followed(tmp_path: Path) -> None:
    """publisher "/tmp"-like, id "gemma.gguf": the file there is never opened as the model."""
    planted = write_model(tmp_path / "gemma.gguf", Shape())[0]
    models = recorded("lm-studio-models.json")
    models["data"][0].update(state="loaded", publisher=str(tmp_path), id="gemma.gguf", type="llm")
    routes = lm_studio_routes()
    routes[("GET", "/api/v0/models")] = json_route(models)
    with ReplayServer(routes) as url:
        r = as_process("profile", "--server", url, "--no-save")
    assert "no such model in LM Studio's folder" in one_error(r, 2) and r.stdout == ""
    assert planted.is_file()  # there, and never read as the model


def test_an_rpc_server_claiming_impossible_memory_is_refused() -> None:
    from ggprof.machine.rpc import RpcError, _server_from

    claim = {"devices": [{"name": "RPC0", "free_bytes": 2**64 - 1, "total_bytes": 0}]}
    with pytest.raises(RpcError, match="claims 18,446,744,073,709,551,615 bytes free of 0: figures a device"):
        _server_from("127.0.0.1:50052", (3, 0, 0), claim)


# -- 1 (RPC). a HELLO reply dripped ends at the handshake's deadline --------------------------------
def test_an_rpc_hello_dripped_a_byte_at_a_time_ends_at_its_deadline() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.5)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(4096)
                for b in (8 + 4 + 8).to_bytes(8, "little") * 10:  # a plausible size, dripped
                    if stop.is_set():
                        return
                    try:
                        conn.sendall(bytes([b]))
                    except OSError:
                        break
                    if stop.wait(1.5):  # a byte each 1.5 s, until the test is done
                        return

    threading.Thread(target=serve, daemon=True).start()
    try:
        endpoints = ",".join([f"127.0.0.1:{port}"] * 1)
        w = watched("host", "--rpc", endpoints, "--no-measure", timeout_s=90)
    finally:
        stop.set()
        listener.close()
    assert "no answer to the RPC HELLO within 5 s" in one_error(w.result, 2)
    assert w.seconds < 20


# -- 2 and 7. llama-bench rows past what was asked, repeated, of another model, or self-contradicting -
def fake_llama_bench(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "llama-bench"
    path.write_text(f"#!{sys.executable}\nimport json, sys, os\nargs = sys.argv[1:]\n{body}\n")
    path.chmod(0o755)
    return path


ROW = (
    "row = dict(model_filename=args[args.index('-m') + 1], n_prompt=0, n_gen=8, n_depth=0, "
    "samples_ns=[80_000_000, 80_000_000], avg_ts=100.0, stddev_ts=0.0, backends='CPU', n_threads=1)\n"
)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (ROW + "for _ in range(1_000_000): print(json.dumps(row), flush=True)", "tg8 printed twice"),
        (ROW + "row['n_gen'] = 999\nprint(json.dumps(row))", "a test not asked for (tg999)"),
        (ROW + "row['model_filename'] = '/elsewhere/other.gguf'\nprint(json.dumps(row))", "a row of another model"),
        (ROW + "row['samples_ns'] = [1, 1]\nprint(json.dumps(row))", "avg_ts 100 t/s, while its samples_ns say"),
    ],
)
def test_llama_bench_rows_not_of_this_run_are_refused(body: str, problem: str, tmp_path: Path) -> None:
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    log = tmp_path / "invocations"
    fake = fake_llama_bench(tmp_path, f"open({str(log)!r}, 'a').write('x')\n" + body)
    w = watched("bench", str(model), "--engine", f"llama-bench={fake}", "-p", "0", "-n", "8", "-r", "2", "--no-save")
    assert problem in one_error(w.result, 5)
    assert w.seconds < 60 and w.peak_rss_bytes < 300 * MiB
    assert log.read_text().count("x") <= 2  # --list-devices and the run: never invoked again for more


def test_a_llama_bench_row_past_the_models_context_is_refused(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps({"n_prompt": 0, "n_gen": 128, "n_depth": 1_000_000_000, "avg_ts": 5.0}) + "\n")
    r = as_process("check", str(model), "--llama-bench", str(results), "--bandwidth", "50")
    assert "row 1's n_depth + n_prompt + n_gen = 1,000,000,128 is over the model's context length" in one_error(r, 2)


def test_api_show_shapes_bounded_in_total_and_names_once() -> None:
    from ggprof.errors import GGUFError
    from ggprof.model.remote import header_from_show

    info = {"general.architecture": "llama"}
    huge = [{"name": "w", "type": "F32", "shape": [1 << 40] * 4}]
    with pytest.raises(GGUFError, match="no model is that large"):
        header_from_show("m", {"model_info": info, "tensors": huge})
    twice = [{"name": "w", "type": "F32", "shape": [4]}] * 2
    with pytest.raises(GGUFError, match="lists a tensor name twice"):
        header_from_show("m", {"model_info": info, "tensors": twice})


# -- 8. llama-bench's children and SIGHUP ----------------------------------------------------------
# a process that sleeps 600 s, its command line carrying a marker to find it by
SLEEPER = "os.execv(sys.executable, [sys.executable, '-c', 'import threading; threading.Event().wait()', '{marker}'])"


def descendants_named(word: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if word in " ".join(p.info["cmdline"] or []):
            out.append(p)
    return out


@pytest.mark.parametrize("detach", ["", "os.setsid()"])
def test_a_llama_bench_whose_child_holds_stdout_is_read_when_it_exits(detach: str, tmp_path: Path) -> None:
    """It prints its row and exits, leaving a child (in its group, or in a session of its own)
    that holds stdout open for 600 s: the row is read when llama-bench exits, the child ended."""
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    marker = f"ggprof-orphan-{os.getpid()}-{time.time_ns()}"
    child = (
        "if '--list-devices' in args: sys.exit(0)\n"
        f"if os.fork() == 0:\n    {detach or 'pass'}\n    {SLEEPER.format(marker=marker)}\n"
    )
    fake = fake_llama_bench(tmp_path, ROW + child + "print(json.dumps(row), flush=True)")
    w = watched("bench", str(model), "--engine", f"llama-bench={fake}", "-p", "0", "-n", "8", "-r", "2", "--no-save",
                "--json")  # fmt: skip
    assert w.result.exit_code == 0, w.result.stderr
    assert json.loads(w.result.stdout)[0]["avg_ts"] == pytest.approx(100.0)
    assert w.seconds < 30
    time.sleep(0.5)
    assert descendants_named(marker) == []


def test_sighup_ends_ggprof_and_llama_bench(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    marker = f"ggprof-hup-{os.getpid()}-{time.time_ns()}"
    fake = fake_llama_bench(tmp_path, f"if '--list-devices' in args: sys.exit(0)\n{SLEEPER.format(marker=marker)}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ggprof", "bench", str(model), "--engine", f"llama-bench={fake}", "--no-save"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not descendants_named(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert descendants_named(marker), "the fake llama-bench never started"
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 129 and "Error: hung up (the terminal closed)" in err
    time.sleep(0.5)
    assert descendants_named(marker) == []


def test_a_llama_server_holding_back_the_bytes_of_a_character_is_timed_not_refused(tmp_path: Path) -> None:
    """A real llama-server sends a token that ends inside a UTF-8 character with a later one:
    three byte-fallback tokens of `日` come as one event, so its timings count three times the
    events it streamed, and that is no contradiction."""
    model = write_model(tmp_path / "m.gguf", Shape())[0]
    routes = llama_server_routes(model)
    whole = routes[("POST", "/completion")].answer
    assert whole is not None

    def answer(body: Any) -> list[bytes]:
        chunks = whole(body)  # n_predict token events, then the last with the timings
        token = {**json.loads(chunks[0][len(b"data: ") :]), "content": "日"}
        return [b"data: " + json.dumps(token).encode() + b"\n\n"] * -(-int(body["n_predict"]) // 3) + chunks[-1:]

    routes[("POST", "/completion")] = Route(answer=answer)
    with ReplayServer(routes) as url:
        r = as_process("profile", "--server", url, *PINNED)
    d = json.loads(r.stdout)
    recorded_ms = json.loads(whole({"n_predict": 1})[-1][len(b"data: ") :])["timings"]["predicted_ms"]
    # the server's own decode time, the first token (sampled from the prompt's logits) left out;
    # far below the band the pinned 50 GB/s gives a 1.5 MB model: suspicious, not refused
    assert d["measured_tg_tok_s"] == pytest.approx((16 - 1) / recorded_ms * 1e3, rel=1e-6)
    assert r.exit_code == 3 and d["verdict"] == "suspicious" and "Error" not in r.stderr, r.stderr

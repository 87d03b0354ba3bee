"""A model split over machines with llama.cpp's RPC backend: the split llama.cpp chooses, what a
token moves over each link, `predict --rpc-device`, `host --rpc` through llama.cpp's own RPC
client, and real runs of Gemma over real rpc-servers, direct and through a relay that makes
the link slow for real (tests/rpc_relay.py)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ggufs import Shape, write_model
from llamacpp_tools import rpc_library, rpc_llama_cpp_python
from rpc_relay import start_relay, start_rpc_server
from support import as_process, judged, kept, started

from ggprof.errors import BadInputError
from ggprof.machine.links import parse_link
from ggprof.machine.rpc import parse_endpoints
from ggprof.physics.rpc import layer_devices

GBE_BYTES_PER_S = 1e9 * 1448 / 1538 / 8  # IEEE 802.3 line rate x the TCP payload share of a frame


# -- the split llama.cpp chooses (src/llama-model.cpp, load_tensors) -------------------------------
def test_layers_split_by_free_memory_as_llama_cpp_does() -> None:
    # 18 layers + the output layer = 19 slots; equal shares -> cumulative [0.5, 1.0]; layer il goes
    # to the first device whose split point is above il/19: il <= 9 -> device 0, the rest -> 1
    per_layer, output = layer_devices(18, [8e9, 8e9], None)
    assert per_layer == (0,) * 10 + (1,) * 8
    assert output == 1


def test_tensor_split_and_partial_offload() -> None:
    # 3:1 -> split points [0.75, 1.0]: il/19 < 0.75 for il <= 14
    per_layer, output = layer_devices(18, [3, 1], None)
    assert per_layer == (0,) * 15 + (1,) * 3 and output == 1
    # -ngl 10 of 18: the first 9 layers stay on the main host's CPU (None), 10 slots offloaded
    per_layer, output = layer_devices(18, [1], 10)
    assert per_layer == (None,) * 9 + (0,) * 9 and output == 0
    # -ngl 0: nothing offloaded, the output layer stays on the CPU too
    assert layer_devices(18, [1], 0) == ((None,) * 18, None)


def test_links_named_and_given() -> None:
    gbe = parse_link("1GbE")
    assert gbe.throughput_bytes_per_s == pytest.approx(GBE_BYTES_PER_S)
    assert gbe.throughput.source == "theoretical"
    custom = parse_link("300Mb/s,2ms")
    assert custom.throughput_bytes_per_s == pytest.approx(300e6 / 8)
    assert custom.rtt_s == pytest.approx(2e-3)
    assert custom.throughput.source == custom.rtt.source == "user"
    assert parse_link("1.2GB/s").throughput_bytes_per_s == pytest.approx(1.2e9)
    assert parse_link("2.5gbe,0.1ms").rtt_s == pytest.approx(1e-4)
    for bad in ("fast", "1GbE,soon", "0Mb/s", "9TB/s", "x" * 100, "1GbE,20s"):
        with pytest.raises(BadInputError):
            parse_link(bad)


def test_endpoints_are_checked() -> None:
    assert parse_endpoints("10.0.0.2:50052, box:50053") == ("10.0.0.2:50052", "box:50053")
    for bad in ("10.0.0.2", "host:0", "host:99999", "a b:1", "h:1,h:1", ",".join(f"h:{p}" for p in range(1, 18))):
        with pytest.raises(BadInputError):
            parse_endpoints(bad)


# -- predict --rpc-device: planning a split ---------------------------------------------------
def test_predict_a_split_over_a_declared_link(gemma_path: Path) -> None:
    r = as_process("predict", str(gemma_path), "--rpc-device", "rtx-3060@1GbE,0.5ms", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    split = d["split"]
    inspect = json.loads(as_process("inspect", str(gemma_path), "--json").stdout)
    # every layer and the output layer on the remote GPU: one hop, and the logits come back
    remote = [x for x in split["devices"] if x["remote"]]
    assert len(remote) == 1 and len(remote[0]["layers"]) == inspect["n_layers"] and remote[0]["output_layer"]
    (hop,) = split["hops"]
    assert hop["returns_logits"] and hop["returned_bytes_per_token"] == 4 * inspect["vocab_size"]
    # the hop: a 0.5 ms round trip, the bytes each way at 1GbE's TCP payload rate
    moved = hop["sent_bytes_per_token"] + hop["returned_bytes_per_token"]
    assert hop["network_s_per_token"] == pytest.approx(0.5e-3 + moved / GBE_BYTES_PER_S, rel=1e-6)
    # the GPU's term: the bytes it reads at the RTX 3060's 360 GB/s (its profile)
    assert remote[0]["floor_s_per_token"] == pytest.approx(remote[0]["read_bytes_per_token"] / 360e9, rel=1e-6)
    # the ceiling is one over the sum of the terms; a 1 MB logits hop over 1GbE sets the pace
    total = sum(x["floor_s_per_token"] for x in split["devices"]) + hop["network_s_per_token"]
    assert d["decode_ceiling_tok_s"] == pytest.approx(1 / total, rel=1e-6)
    assert "the 1GbE,0.5ms link" in split["pace"] and "logits" in split["pace"]
    assert d["backend"] == "rpc" and d["expected_tok_s_high"] < d["decode_ceiling_tok_s"]


def test_predict_split_text_names_the_pace(gemma_path: Path) -> None:
    r = as_process("predict", str(gemma_path), "--rpc-device", "rtx-3060@100Mb", "--rpc-device", "rtx-3060@100Mb")
    assert r.exit_code == 0, r.stderr
    assert "rpc: hop to remote 2 over 100Mb" in r.stdout.replace("\n            ", " ")
    assert "gets back 1.05 MB of logits a token" in r.stdout.replace("\n            ", " ")


def test_predict_split_bad_input(gemma_path: Path) -> None:
    for args, words in (
        (["--rpc-device", "no-such-gpu@1GbE"], "no-such-gpu"),
        (["--rpc-device", "rtx-3060@carrier-pigeon"], "not one of localhost, 100Mb, 1GbE"),
        (["--rpc-device", "rtx-3060@1GbE", "--tensor-split", "1,2,3"], "--tensor-split"),
        (["--rpc-device", "rtx-3060", "--tensor-split", "a,b"], "--tensor-split"),
    ):
        r = as_process("predict", str(gemma_path), *args)
        assert r.exit_code == 2, (args, r.stderr)
        assert r.stderr.count("Error:") == 1 and words in r.stderr and "Traceback" not in r.stderr


# -- real rpc-servers ---------------------------------------------------------------------------
# -- causes a slow split can carry: the graph re-sent, MoE experts on the main host ----------------
LOCAL_AND_REMOTE = ("--device", "rtx-3060", "--rpc-device", "rtx-3060@10MB/s,0.2ms")  # 1e7 bytes/s, 0.2 ms
GRAPH_BYTES_PER_LAYER = 30 * 8 + 40 * 296  # ggml-rpc.cpp serialize_graph: 8 bytes a node, 296 an rpc_tensor


def _slow_end(model: Path) -> float:
    """The slow end of the split's expected band, s a token: the run is made slower than it."""
    p = json.loads(as_process("predict", str(model), *LOCAL_AND_REMOTE, "--json").stdout)
    return 1 / float(p["expected_tok_s_low"])


def _causes(model: Path, tg: float) -> list[str]:
    d = judged(as_process("check", str(model), "--tg", f"{tg:.6g}", "--backend", "rpc", *LOCAL_AND_REMOTE, "--json"))
    (finding,) = [f for f in d["findings"] if f["code"] == "DECODE_BELOW_BAND"]
    return list(finding["causes"])


def test_a_run_slower_by_the_graph_sent_every_token_names_the_old_build(gemma_path: Path) -> None:
    """Gemma's 18 layers over two 12 GB cards: the remote one holds layers 0-9 (llama.cpp's split),
    whose graph is 10 x 12,080 bytes = 121 kB: 12.1 ms a token at 10 MB/s. A run that lost
    that much is named as one without graph reuse; one that lost eight times more is not."""
    lost_s = (12 + 10 * GRAPH_BYTES_PER_LAYER) / 1e7
    causes = _causes(gemma_path, 1 / (_slow_end(gemma_path) + lost_s))
    assert causes[0].startswith("the compute graph crosses the link every token (121 kB, 12.1 ms")
    assert "PR #15405" in causes[0]
    assert not any("compute graph" in c for c in _causes(gemma_path, 1 / (_slow_end(gemma_path) + 8 * lost_s)))


def test_a_moe_run_slower_by_experts_on_the_main_host_names_them(tmp_path: Path) -> None:
    """8 MoE layers over two equal cards: llama.cpp puts layers 0-4 remote (9 slots, half each).
    Experts left on the main host send each of those layers' activation (4 x 1024 bytes) there
    and back: 10 round trips of 0.2 ms + 8,192 bytes at 10 MB/s = 10.2 ms a token. The graph
    re-sent (5 x 12,080 bytes, 6.0 ms) fits such a gap less well, so the experts come first."""
    model = write_model(
        tmp_path / "moe.gguf", Shape(n_layers=8, n_embd=1024, n_ff=1024, n_experts=8, n_experts_used=2)
    )[0]
    lost_s = 10 * (0.2e-3 + 2 * 4 * 1024 / 1e7)
    causes = _causes(model, 1 / (_slow_end(model) + lost_s))
    assert causes[0].startswith("MoE experts kept on the main host") and "10 round trips a token (10.2 ms" in causes[0]
    assert causes[1].startswith("the compute graph crosses the link every token (60.4 kB, 6.04 ms")


@pytest.fixture(scope="module")
def rpc_lib() -> str:
    """llama.cpp's RPC client library, built once from the same vendored llama.cpp (~45 s)."""
    return str(rpc_library())


def _serving(llama_tools: Path, folder: Path) -> Iterator[str]:
    """A real rpc-server at one thread (the server has a core of this 2-core machine, the main
    host the other: two threads each made the runs erratic), kept while the module runs."""
    proc, endpoint = start_rpc_server(llama_tools, folder / "log.txt", threads=1)
    with kept(proc):
        yield endpoint


@pytest.fixture(scope="module")
def rpc_server(llama_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serving(llama_tools, tmp_path_factory.mktemp("rpc"))


@pytest.fixture(scope="module")
def second_rpc_server(llama_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serving(llama_tools, tmp_path_factory.mktemp("rpc2"))


def test_host_rpc_measures_the_link_through_llama_cpp(rpc_server: str, rpc_lib: str) -> None:
    r = as_process("host", "--rpc", rpc_server, "--json", env={"GGPROF_RPC_LIB": rpc_lib})
    assert r.exit_code == 0, r.stderr
    (s,) = json.loads(r.stdout)["rpc_servers"]
    assert s["endpoint"] == rpc_server and s["protocol"] == "7.0.0"
    (device,) = s["devices"]
    assert device["name"] == "RPC0" and 0 < device["free_bytes"] <= device["total_bytes"]
    assert 0 < s["rtt_s"] < 0.1 and s["upload_bytes_per_s"] > 1e6 and s["download_bytes_per_s"] > 1e6
    assert s["rtt_source"].startswith("measured: llama.cpp's RPC client")
    assert s["upload_source"].startswith("measured: llama.cpp's RPC client")


def test_host_rpc_through_a_slow_relay(rpc_server: str, rpc_lib: str) -> None:
    """The relay adds 20 ms a round trip and caps the link at 4 MB/s: the probe sees both."""
    proc, front = start_relay(rpc_server, 4e6, 20e-3)
    try:
        r = as_process("host", "--rpc", front, "--json", env={"GGPROF_RPC_LIB": rpc_lib})
    finally:
        proc.kill()
        proc.wait()
    assert r.exit_code == 0, r.stderr
    (s,) = json.loads(r.stdout)["rpc_servers"]
    assert 20e-3 <= s["rtt_s"] < 40e-3
    assert 2.5e6 < s["upload_bytes_per_s"] < 4.4e6 and 2.5e6 < s["download_bytes_per_s"] < 4.4e6


def test_host_rpc_without_the_client_library_says_how_to_get_it(rpc_server: str, tmp_path: Path) -> None:
    r = as_process("host", "--rpc", rpc_server, "--json", env={"GGPROF_RPC_LIB": str(tmp_path / "missing.so")})
    assert r.exit_code == 2 and "GGPROF_RPC_LIB" in r.stderr and r.stderr.count("Error:") == 1


def _fake_server(reply: bytes | None) -> tuple[socket.socket, str]:
    """A TCP server that answers each connection with `reply` (None: says nothing, keeps it open)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(64)
            if reply is None:  # silent until the client gives up and closes its end
                conn.settimeout(60)
                with contextlib.suppress(OSError):
                    while conn.recv(64):
                        pass
            else:
                conn.sendall(reply)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener, f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (struct.pack("<Q", 28) + bytes([3, 0, 0, 0]) + bytes(24), "speaks RPC protocol 3.0.0"),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "not an rpc-server"),
        (b"", "closed the connection"),
        (None, "no answer to the RPC HELLO"),
    ],
)
def test_not_an_rpc_server_is_one_line_exit_2(reply: bytes | None, words: str, rpc_lib: str) -> None:
    listener, endpoint = _fake_server(reply)
    try:
        r = as_process("host", "--rpc", endpoint, env={"GGPROF_RPC_LIB": rpc_lib}, timeout_s=30)
    finally:
        listener.close()
    assert r.exit_code == 2, r.stderr
    assert r.stderr.count("Error:") == 1 and words in r.stderr and "Traceback" not in r.stderr


def test_unreachable_rpc_server(llama_tools: Path, gemma_path: Path) -> None:
    from llamacpp_tools import free_port

    port = free_port()
    r = as_process(*_rpc_profile(llama_tools, gemma_path, f"127.0.0.1:{port}"))
    assert r.exit_code == 2 and "connection refused" in r.stderr and r.stderr.count("Error:") == 1


def test_python_engine_without_rpc_says_how_to_rebuild(rpc_server: str, gemma_path: Path) -> None:
    r = as_process("profile", str(gemma_path), "--rpc", rpc_server, "-r", "1", "-n", "4", "-p", "8")
    assert r.exit_code == 2, r.stderr
    assert "-DGGML_RPC=on" in r.stderr and "--engine llama-bench" in r.stderr


def split_decode(d: dict[str, Any]) -> str:
    """The code of the decode finding: the split's judgement. (How much the run's repetitions
    varied is the machine's: prompts over RPC on this busy 2-core VM have varied by over 20%,
    a RUN_TOO_NOISY finding of its own.)"""
    code: str = next(f["code"] for f in d["findings"] if f["code"].startswith("DECODE_"))
    return code


def _rpc_profile(llama_tools: Path, gemma_path: Path, endpoint: str, *flags: str) -> tuple[str, ...]:
    """`ggprof profile` of the Gemma model by the built llama-bench, split over `endpoint`."""
    engine = f"llama-bench={llama_tools / 'llama-bench'}"
    return ("profile", str(gemma_path), "--engine", engine, "--rpc", endpoint, *flags)


def _profile_rpc(llama_tools: Path, gemma_path: Path, endpoint: str, rpc_lib: str, *extra: str) -> dict[str, Any]:
    flags = ("-t", "1", "-p", "128", "-n", "32", "--json", "--no-save", *extra)
    r = as_process(
        *_rpc_profile(llama_tools, gemma_path, endpoint, *flags), env={"GGPROF_RPC_LIB": rpc_lib}, timeout_s=300
    )
    return judged(r)


@pytest.mark.slow
def test_profile_a_real_split_over_a_local_rpc_server(
    llama_tools: Path, gemma_path: Path, rpc_server: str, rpc_lib: str
) -> None:
    d = _profile_rpc(llama_tools, gemma_path, rpc_server, rpc_lib)
    assert d["context"]["backends_used"] == ["rpc"]
    depth = d["depths"][0]
    split = depth["prediction"]["split"]
    (hop,) = split["hops"]
    assert hop["label"] == rpc_server and hop["link_source"].startswith("measured")
    assert split["devices"][-1]["measured_alone_bytes_per_s"] > 0  # this host's CPU decoding alone
    assert split_decode(d) == "DECODE_PLAUSIBLE", d["findings"]


@pytest.mark.slow
def test_profile_a_real_split_over_two_local_rpc_servers(
    llama_tools: Path, gemma_path: Path, rpc_server: str, second_rpc_server: str, rpc_lib: str
) -> None:
    """Gemma's 18 layers over two rpc-servers of (nearly) equal free memory: llama.cpp puts slot
    i of 19 on the first device whose cumulative share exceeds i/19, so layers 0-9 on the first
    (9/19 < 1/2) and 10-17 with the output layer on the second; a token crosses both links, the
    second returning the logits (4 x 262,144 bytes)."""
    d = _profile_rpc(llama_tools, gemma_path, f"{rpc_server},{second_rpc_server}", rpc_lib)
    assert d["context"]["backends_used"] == ["rpc"]
    split = d["depths"][0]["prediction"]["split"]
    first, second = split["hops"]
    assert (first["label"], second["label"]) == (rpc_server, second_rpc_server)
    assert (first["layers"], second["layers"]) == (list(range(10)), list(range(10, 18)))
    assert not first["returns_logits"] and second["returned_bytes_per_token"] == 4 * 262144
    assert split_decode(d) == "DECODE_PLAUSIBLE", d["findings"]


@pytest.mark.slow
def test_the_python_engine_built_with_rpc_splits_over_a_real_rpc_server(gemma_path: Path, rpc_server: str) -> None:
    """llama-cpp-python rebuilt with -DGGML_RPC=on (the rebuild ggprof advises; built once and
    cached): the python engine registers the rpc-server as llama.cpp's tools do, every layer
    runs there, and the run is judged as the split."""
    site = rpc_llama_cpp_python()
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)}
    flags = ("-t", "1", "-p", "64", "-n", "16", "--json", "--no-save")
    d = judged(as_process("profile", str(gemma_path), "--rpc", rpc_server, *flags, env=env, timeout_s=300))
    assert d["engine"].startswith("llama.cpp via llama-cpp-python") and d["context"]["backends_used"] == ["rpc"]
    assert d["context"]["n_gpu_layers_offloaded"] == 19  # 18 layers and the output layer
    (hop,) = d["depths"][0]["prediction"]["split"]["hops"]
    assert hop["label"] == rpc_server and hop["returns_logits"]
    assert split_decode(d) == "DECODE_PLAUSIBLE", d["findings"]


@pytest.mark.slow
def test_a_link_10x_slower_than_declared_is_suspicious(
    llama_tools: Path, gemma_path: Path, rpc_server: str, rpc_lib: str
) -> None:
    """Declared 1 GbE with a 0.5 ms round trip; the relay gives a tenth of that and 5 ms: the
    logits (1 MB a token) take ten times longer than the split was promised."""
    proc, front = start_relay(rpc_server, GBE_BYTES_PER_S / 10, 5e-3)
    try:
        d = _profile_rpc(llama_tools, gemma_path, front, rpc_lib, "--rpc-device", "this-host@1GbE,0.5ms")
    finally:
        proc.kill()
        proc.wait()
    assert d["verdict"] == "suspicious"
    below = next(f for f in d["findings"] if f["code"] == "DECODE_BELOW_BAND")
    assert any("logits" in c for c in below["causes"])
    assert any("link to" in e and "1GbE,0.5ms" in e for e in below["evidence"])


@pytest.mark.slow
def test_a_server_that_dies_mid_run_ends_in_one_line(
    llama_tools: Path, gemma_path: Path, tmp_path: Path, rpc_lib: str
) -> None:
    """The rpc-server is killed while llama-bench decodes over RPC (seen, not timed: a llama-bench
    child of ggprof with --rpc has run for a second), whatever the machine's speed: one line,
    exit 1, well before the run would have ended."""
    import psutil

    proc, endpoint = start_rpc_server(llama_tools, tmp_path / "log.txt", threads=1)
    with kept(proc):
        # 3 x 256 tokens on 1 thread: the local reference run first, then the same over RPC
        # (slower: one server thread and a round trip a token), long enough to be cut mid-run on
        # any machine; one thread, so that a busy neighbour cannot stall spinning threads at
        # every step (llama.cpp's threads wait for each other)
        flags = ("-t", "1", "-r", "3", "-n", "256")
        run = started(*_rpc_profile(llama_tools, gemma_path, endpoint, *flags), env={"GGPROF_RPC_LIB": rpc_lib})
        try:
            over_rpc = False
            deadline = time.monotonic() + 600
            while not over_rpc and time.monotonic() < deadline and run.poll() is None:
                over_rpc = any(_decoding_over_rpc(c) for c in psutil.Process(run.pid).children(recursive=True))
                time.sleep(0.2)
            assert over_rpc and run.poll() is None, "the run ended (or never began) before it decoded over RPC"
            proc.kill()
            killed_at = time.monotonic()
            _, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:  # the run and every process it started (llama-bench has its own group)
                for child in psutil.Process(run.pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        child.kill()
                run.kill()
                run.wait()
    assert run.returncode == 5, err
    assert err.count("Error:") == 1 and "llama-bench" in err and "Traceback" not in err
    assert time.monotonic() - killed_at < 120


def _decoding_over_rpc(proc: object) -> bool:
    """A llama-bench given --rpc that has run for a second (one that has ended: no)."""
    import psutil

    assert isinstance(proc, psutil.Process)
    try:
        return "--rpc" in proc.cmdline() and time.time() - proc.create_time() > 1
    except psutil.Error:
        return False


def test_fit_splits_a_model_one_machine_cannot_hold(tmp_path: Path) -> None:
    """Llama 3 70B Q4_K_M (42 GB) and one RTX 3090 (24 GB): with a second RTX 3090 behind
    2.5 GbE it fits in the two GPUs, every layer offloaded, and is the pick."""
    from ggprof.model.reference import reference_path

    model = reference_path("llama3-70b-q4_k_m", tmp_path)
    r = as_process("fit", str(model), "--device", "rtx-3090", "--rpc-device", "rtx-3090@2.5GbE", "--json")
    assert r.exit_code == 0, r.stderr
    (m,) = json.loads(r.stdout)["models"]
    assert m["split_over_rpc"] and m["pick"] and m["fits"] and m["n_gpu_layers"] == 81
    assert m["expected_tok_s_low"] >= 10
    text = as_process("fit", str(model), "--device", "rtx-3090", "--rpc-device", "rtx-3090@2.5GbE").stdout
    assert " RPC  all " in text and "split over RPC: the pace is set by" in text


@pytest.mark.slow
def test_check_judges_real_rpc_rows_as_the_split(
    llama_tools: Path, gemma_path: Path, rpc_server: str, tmp_path: Path
) -> None:
    """llama-bench's own rows of a real RPC run (backends "RPC"), judged by `check` against the
    split the user describes; without a description the split is unknown, never a guess."""
    import subprocess

    rows = tmp_path / "rows.jsonl"
    flags = ["-p", "0", "-n", "16", "-r", "2", "--repack", "0", "-o", "jsonl"]
    with rows.open("w") as out:
        subprocess.run(
            [str(llama_tools / "llama-bench"), "-m", str(gemma_path), "--rpc", rpc_server, *flags],
            stdout=out,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=120,
        )
    assert json.loads(rows.read_text().splitlines()[0])["backends"] == "RPC"
    d = judged(as_process("check", "--llama-bench", str(rows), "--rpc-device", "ddr5-4800-dual@localhost", "--json"))
    (row,) = d["rows"]
    prediction = d["predictions"][row["prediction_index"]]
    split = prediction["split"]
    assert prediction["backend"] == "rpc" and split["hops"][0]["label"] == "remote 1"
    assert split["devices"][-1]["device"] == "DDR5-4800 dual channel"
    plain = judged(as_process("check", "--llama-bench", str(rows), "--json"))
    assert plain["verdict"] == "unknown" and plain["rows"][0]["prediction_index"] is None


def test_the_gemma3_4b_reference_is_the_published_file(tmp_path: Path) -> None:
    """llama-bench printed `gemma3 4B Q4_0 | 2.93 GiB | 3.88 B` for gemma-3-4b-it-q4_0 (llama.cpp
    PR #16276): the rebuilt header holds the same bytes and parameters, and a token reads the
    F16 embedding as the tied output head: 671M x 2 bytes on top of the Q4_0 layers."""
    from ggprof.model.reference import reference_path
    from ggprof.model.spec import load_model

    spec = load_model(reference_path("gemma3-4b-q4_0", tmp_path))
    assert spec.tensor_bytes / 2**30 == pytest.approx(2.93, abs=0.005)
    assert spec.n_params / 1e9 == pytest.approx(3.88, abs=0.005)
    embedding = 262144 * 2560
    layers_q4_0 = (spec.n_params - embedding) * 18 / 32  # Q4_0: 18 bytes a block of 32
    assert spec.decode_bytes_per_token == pytest.approx(layers_q4_0 + 2 * embedding, rel=0.002)

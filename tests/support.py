"""Helpers the test modules share (test modules never import each other).

Two ways to run ggprof, and only two: `in_process` (through ggprof.cli.main, as the console
script does; the `run_cli` fixture) and `as_process` (a real subprocess with its own
environment and a timeout: signals, PYTHONPATH, start-up). Plus what several modules build:
llama-bench rows, an installed third-party plugin, a long-running bench and its llama.cpp
child.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import psutil

if TYPE_CHECKING:
    from ggprof.history.store import RunRecord

THIRDPARTY = Path(__file__).parent / "thirdparty"
H200 = Path(__file__).parent / "data" / "h200"  # recorded by benchmarks/device_cuda.sh
CONTROL = ("\x1b", "\x07", "\x9b")
KEEP: set[int] = set()  # processes a fixture keeps across tests (a llama-server), spared by the reaper


@contextlib.contextmanager
def kept(proc: subprocess.Popen[Any], gently: bool = False) -> Iterator[subprocess.Popen[Any]]:
    """A server a fixture keeps across tests: spared by the reaper until the fixture ends, then
    stopped (`gently`: SIGTERM, for a server that cleans up; else SIGKILL) and waited for."""
    KEEP.add(proc.pid)
    try:
        yield proc
    finally:
        KEEP.discard(proc.pid)
        if gently:
            proc.terminate()
        else:
            proc.kill()
        proc.wait(timeout=30)


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


class RunCli(Protocol):
    """The `run_cli` fixture: `ggprof ARGS` through ggprof.cli.main (`in_process`)."""

    def __call__(self, *args: str) -> CliResult: ...


def in_process(*args: str) -> CliResult:
    """`ggprof ARGS` in this process, through ggprof.cli.main."""
    from ggprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return CliResult(code, out.getvalue(), err.getvalue())


def astuple(r: CliResult) -> tuple[int, str, str]:
    return r.exit_code, r.stdout, r.stderr


def as_process(*args: str, env: dict[str, str] | None = None, timeout_s: float = 120) -> CliResult:
    """`ggprof ARGS` in a subprocess that must finish (a hang fails the test instead of blocking it)."""
    r = subprocess.run(
        [sys.executable, "-m", "ggprof", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return CliResult(r.returncode, r.stdout, r.stderr)


@dataclass
class Measured:
    exit_code: int
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_bytes: int  # the program's own high-water mark since it started (VmHWM at its exit)
    left: list[str]  # processes of its session still alive once it ended (killed then)


# `python -m ggprof ARGS` that writes its peak RSS as it exits. Not the rusage wait4 gives: Linux
# folds the pre-exec image into ru_maxrss, and a child spawned (vfork) from pytest reports
# pytest's own peak. VmHWM is the program's address space's alone.
_PEAK_WRAPPER = """
import atexit, os, runpy, sys

def peak():
    with open("/proc/self/status") as f:
        kib = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    with open(os.environ["MEASURED_PEAK_FILE"], "w") as out:
        out.write(kib)

atexit.register(peak)
sys.argv = ["ggprof", *sys.argv[1:]]
runpy.run_module("ggprof", run_name="__main__", alter_sys=True)
"""


def measured(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 120, stdin: Any = subprocess.DEVNULL
) -> Measured:
    """`ggprof ARGS` in a subprocess of its own session, killed (with its session) past
    `timeout_s`: its wall time, its own peak RSS and what of its session outlived it (Linux)."""
    import tempfile
    import threading

    with tempfile.TemporaryDirectory(prefix="measured-") as folder:
        peak_file = Path(folder) / "peak"
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", _PEAK_WRAPPER, *args],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {}), "MEASURED_PEAK_FILE": str(peak_file)},
            start_new_session=True,
        )
        out: dict[str, bytes] = {}

        def read(key: str, f: Any) -> None:
            with f:
                out[key] = f.read()

        readers = [
            threading.Thread(target=read, args=kf, daemon=True) for kf in (("out", proc.stdout), ("err", proc.stderr))
        ]
        for t in readers:
            t.start()
        timer = threading.Timer(timeout_s, lambda: _kill_session(proc.pid))
        timer.start()
        proc.wait()
        wall_s = time.monotonic() - start
        timer.cancel()
        left = _kill_session(proc.pid)
        for t in readers:
            t.join(timeout=30)
        # killed before its exit: no figure, and no bound on memory holds
        peak_kib = int(peak_file.read_text()) if peak_file.exists() else sys.maxsize // 1024
    return Measured(
        proc.returncode,
        out.get("out", b"").decode(errors="replace"),
        out.get("err", b"").decode(errors="replace"),
        wall_s,
        peak_kib * 1024,
        left,
    )


def _kill_session(sid: int) -> list[str]:
    """The processes of session `sid`, killed; their names."""
    found = []
    for p in psutil.process_iter(["pid", "name"]):
        try:
            if os.getsid(p.pid) == sid:
                found.append(str(p.info["name"]))
                p.kill()
        except (OSError, psutil.Error):
            continue
    return found


def as_bounded_process(
    *args: str,
    env: dict[str, str] | None = None,
    timeout_s: float = 60,
    max_rss_bytes: int = 1 << 30,
    stdin: str | Path | None = None,
) -> Measured:
    """`measured`, held to a hostile-input test's own limits: done within `timeout_s`, its peak
    resident memory under `max_rss_bytes`, and nothing of its session left."""
    with open(stdin, "rb") if stdin is not None else contextlib.nullcontext(subprocess.DEVNULL) as f:
        m = measured(*args, env=env, timeout_s=timeout_s, stdin=f)
    shown = " ".join(args)[:200]
    assert m.wall_s < timeout_s, f"ggprof {shown}: still running after {timeout_s:.0f} s"
    assert m.peak_rss_bytes <= max_rss_bytes, f"ggprof {shown}: {m.peak_rss_bytes >> 20} MiB resident"
    assert not m.left, f"ggprof {shown} left processes running: {m.left}"
    return m


def clean_output(text: str) -> bool:
    """No terminal control code in it."""
    return not any(c in text for c in CONTROL)


def bench_rows(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps(rows))
    return path


def row(**fields: object) -> dict[str, object]:
    """A llama-bench JSON row (a tg128 at depth 0, 100 +- 1 tok/s), with `fields` changed."""
    base: dict[str, object] = {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 100.0, "stddev_ts": 1.0}
    return {**base, **fields}


def install_example(site: Path, module: str = "ggprof_example_plugin") -> None:
    """What `pip install ggprof-example` leaves behind: a module and a .dist-info with entry points."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text((THIRDPARTY / "ggprof_example_plugin.py").read_text())
    info = site / "ggprof_example-1.2.3.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ggprof-example\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[ggprof]\nexample = {module}\n")


def raising_plugin(site: Path, hook: str) -> None:
    """A real plugin package on sys.path whose `hook` raises (or whose import calls sys.exit)."""
    install_example(site, module="ggprof_bad_plugin")
    body = {
        "judge": "@hookimpl\ndef judge(case):\n    raise RuntimeError('judge exploded')\n",
        "register_commands": "@hookimpl\ndef register_commands(cli):\n    raise RuntimeError('commands exploded')\n",
        "import": "import sys\nsys.exit(3)\n",
    }[hook]
    (site / "ggprof_bad_plugin.py").write_text("from ggprof import hookimpl\n\n" + body)


def site_env(tmp_path: Path) -> dict[str, str]:
    """The environment that puts a plugin installed under tmp_path/site on the path."""
    return {"PYTHONPATH": str(tmp_path / "site")}


def _interruptible() -> None:
    """In the child before it runs: Ctrl-C's default action back. A suite started in the
    background by a non-interactive shell (`nohup ... &`, some CI runners) inherits SIGINT
    ignored, and Python then keeps it ignored: a test that sends SIGINT would wait forever."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def started(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`ggprof ARGS` started in the background (to be signalled, killed or raced)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ggprof", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        preexec_fn=_interruptible,
    )


def start_bench(model: Path, *extra: str) -> subprocess.Popen[str]:
    """A `ggprof bench` decoding 30,000 tokens: long enough to be signalled mid-run."""
    return started("bench", str(model), "-p", "0", "-n", "30000", "-r", "1", *extra)


def llama_child(proc: subprocess.Popen[str], timeout_s: float = 60) -> psutil.Process:
    """The llama.cpp child of a running ggprof, once it is decoding."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for kid in psutil.Process(proc.pid).children():
            try:  # a short-lived helper can be a zombie (or gone) by the time it is asked
                if "ggprof.engines.python.child" in " ".join(kid.cmdline()) and kid.cpu_times().user > 0.5:
                    return kid
            except psutil.Error:
                continue
        time.sleep(0.2)
    raise AssertionError("the llama.cpp child did not start")


# -- a history database, written through the store (its numbers made up: the store does not care)
def history_record(name: str = "model", tg: float = 50.0) -> RunRecord:
    """A run as `ggprof bench` keeps one (its numbers made up: the store does not care)."""
    rows = [
        {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 400.0, "stddev_ts": 4.0},
        {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": tg, "stddev_ts": 0.5, "n_threads": 2},
    ]
    from ggprof.history.store import RunRecord

    return RunRecord.from_json(
        {
            "kind": "bench",
            "created_at": "2026-11-30T12:00:00Z",
            "ggprof_version": "0.1.0",
            "command": ["ggprof", "bench", f"{name}.gguf"],
            "model": {"key": f"1:{name}", "name": name, "file": f"{name}.gguf"},
            "host": {"fingerprint": "abc", "cpu_model": "a CPU"},
            "result": {"rows": rows, "context": {"backends_used": ["cpu"], "n_threads": 2}},
        }
    )


def database(path: Path, n: int = 3) -> Path:
    """A history of n runs (ids 1..n)."""
    from ggprof.history.store import save

    for i in range(n):
        save(path, history_record(f"m{i}", tg=50.0 + i))
    return path


def judged(r: CliResult) -> dict[str, Any]:
    """A `--json` verdict whose exit status is the one its verdict names (0 plausible or unknown,
    3 suspicious, 4 impossible): which verdict a real run on this machine gets is the machine's;
    that the status follows it is ggprof's."""
    assert r.stdout, r.stderr
    d: dict[str, Any] = json.loads(r.stdout)
    assert r.exit_code == {"plausible": 0, "unknown": 0, "suspicious": 3, "impossible": 4}[d["verdict"]], r.stderr
    return d


def with_h200(tmp_path: Path) -> dict[str, str]:
    """PATH with an nvidia-smi that answers as it did on an H200 (H200/nvidia-smi-query.csv);
    no NVML library here, so the CUDA plugin asks it."""
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    smi = tools / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat '{H200 / 'nvidia-smi-query.csv'}'\n")
    smi.chmod(0o755)
    return {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}


# A llama-bench that reports what it is told, one real row replayed with the speeds given: pp for a
# prompt, tg_probe at one thread (the probe), tg otherwise ({python}, {row}, {pp}, {tg_probe}, {tg})
FAKE_BENCH = """#!{python}
import json, sys
args = sys.argv[1:]
if "--list-devices" in args:
    print("Available devices:")
    sys.exit(0)
def values(flag):
    return [int(v) for v in args[args.index(flag) + 1].split(",")] if flag in args else [0]
row = json.loads({row!r})
threads, depth, reps = values("-t")[0], values("-d")[0], values("-r")[0] or 5
for p, n in [(p, 0) for p in values("-p") if p] + [(0, n) for n in values("-n") if n]:
    tok_s = {pp} if p else ({tg_probe} if threads == 1 else {tg})
    ns = int(1e9 * (p or n) / tok_s)
    row.update(n_prompt=p, n_gen=n, n_depth=depth, n_threads=threads, avg_ts=tok_s, stddev_ts=0.0,
               avg_ns=ns, stddev_ns=0, samples_ns=[ns] * reps, samples_ts=[tok_s] * reps)
    print(json.dumps(row), flush=True)
"""


def spill_fit_without(gpu: str, others: set[str]) -> Any:
    """The committed spill share refitted without one machine's rows (`gpu`, named as each row's
    label names its GPUs before its source), the way the bench judges that machine; `others`: the
    machines left, asserted."""
    import re

    from ggprof import calibration
    from ggprof.calibration.placements import ShareRow, fit_share

    rows = []
    for line in calibration.committed_placement_fits().inputs:
        kind, share, label = line.split(" ", 2)
        found = re.search(r" on (.+?) \(https?:", label)  # the GPUs before the source
        if kind == "spill" and found and found[1] != gpu:
            rows.append(ShareRow(machine=found[1], label=label, share=float(share)))
    assert {r.machine for r in rows} == others
    held = fit_share(rows, f"the spill share without the {gpu}")
    assert held is not None
    return held

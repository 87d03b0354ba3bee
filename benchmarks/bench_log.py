"""`ggprof check --log` on a 1 MB log: ggprof's own time for it, start-up excluded.

The log is the real logs of tests/data/logs (public issues' logs and this machine's own runs)
one after another until 1 MB: 14,000 lines, 64 runs, every format and most facts ggprof
reads, so denser than a long server log of the same size. Its time beyond start-up is the
median wall time of `check --log BIG` less that of `check --log SMALL` (one short log: the
same interpreter start, imports and profile loading), the two run in turn, A B A B.
Target: under 200 ms (issue: log triage).

    python benchmarks/bench_log.py [--repeat 9] [--json]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "logs"
TARGET_S = 0.200
SIZE = 1 << 20


def big_log(folder: Path) -> Path:
    data = b"".join(p.read_bytes() for p in sorted(LOGS.glob("*.txt")))
    out = bytearray()
    while len(out) < SIZE:
        out += data
    path = folder / "big.log"
    path.write_bytes(bytes(out[:SIZE]))
    return path


def wall(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ggprof", "check", "--log", *args], capture_output=True, check=False)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--json", action="store_true", help="time --json output instead of text")
    a = ap.parse_args()
    extra = ["--json"] if a.json else []
    with tempfile.TemporaryDirectory() as tmp:
        big = big_log(Path(tmp))
        small = LOGS / "ollama-1806-verbose-mistral.txt"
        wall([str(big), *extra]), wall([str(small), *extra])  # warm the page cache and the bytecode
        pairs = [(wall([str(big), *extra]), wall([str(small), *extra])) for _ in range(a.repeat)]
    own = [b - s for b, s in pairs]
    med = statistics.median(own)
    print(f"1 MiB log ({'json' if a.json else 'text'}), {a.repeat} pairs, big then small in turn")
    print(f"  big   wall median {statistics.median(b for b, _ in pairs):.3f} s")
    print(f"  small wall median {statistics.median(s for _, s in pairs):.3f} s (start-up, imports, profiles)")
    print(
        f"  ggprof's own time for the 1 MiB: median {med * 1e3:.0f} ms "
        f"(min {min(own) * 1e3:.0f}, max {max(own) * 1e3:.0f})"
    )
    ok = med < TARGET_S
    print(f"  target < {TARGET_S * 1e3:.0f} ms: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

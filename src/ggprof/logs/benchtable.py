"""llama-bench's markdown table pasted in a log: each row a speed with its own backend, offload,
flash attention and physical batch."""

from __future__ import annotations

import math
import re
from typing import Any

from ggprof.llamacpp import N_UBATCH, physical_batch
from ggprof.logs import figures
from ggprof.logs.patterns import (
    _BENCH_SEP,
    flash_attn,
)
from ggprof.logs.records import (
    Kind,
    Speed,
    bytes_of,
    count,
    params_of,
)
from ggprof.logs.state import (
    ParserState,
)
from ggprof.logs.text import Line
from ggprof.runfacts import BY_HEAD


class BenchTable(ParserState):
    """llama-bench's markdown table: its header, then its rows, each a speed."""

    bench_columns: list[str] | None

    # -- llama-bench's markdown table -----------------------------------------------------------
    def _bench_header(self, text: str) -> bool:
        cells = [c.strip().lower() for c in text.strip().strip("|").split("|")]
        if "model" not in cells or "test" not in cells or not any(c.startswith("t/s") for c in cells):
            return False
        self.bench_columns = cells
        self.saw("llama-bench table")
        return True

    def _bench_row(self, line: Line) -> bool:
        t = line.text.strip()
        if _BENCH_SEP.match(t):
            return True
        cells = [c.strip() for c in t.strip("|").split("|")]
        cols = self.bench_columns or []
        if len(cells) != len(cols):
            return False
        row = dict(zip(cols, cells, strict=True))
        test = row.get("test", "").replace(" ", "")
        m = re.fullmatch(r"(pp|tg)(\d+)(?:@d(\d+))?", test)
        ts_key = next(c for c in cols if c.startswith("t/s"))
        if not m:
            return True  # a test that is neither a prompt nor a decode (pp512+tg128)
        ts = re.match(r"(\S+)\s*(?:±\s*(\S+))?", row.get(ts_key, ""))
        tok_s = figures.speed(ts[1], line, f"{test}'s speed") if ts else None
        if tok_s is None:
            return True  # no number in its t/s cell
        sd = figures.number(ts[2]) if ts and ts[2] else None
        if sd is not None and not (math.isfinite(sd) and sd >= 0):
            raise figures.BadFigure(line, f"{test}'s spread of {ts[2] if ts else ''} t/s is no spread")
        self._next_model(row, line)
        r = self.run
        r.setdefault("model_desc", row.get("model", "")[:80], line)
        if re.fullmatch(r"[a-z][a-z0-9_.-]{1,30}", arch := row.get("model", "").split(" ")[0]):
            r.setdefault("architecture", arch, line)  # llama-bench's model column starts with it
        if (size := bytes_of(row.get("size", ""))) is not None:
            r.setdefault("model_size_bytes", size, line)
        if (params := params_of(row.get("params", ""))) is not None:
            r.setdefault("model_params", params, line)
        quant = re.sub(r"^\S+ [\d.x]+[BMK]\S* ", "", row.get("model", ""))
        if quant and quant != row.get("model"):
            r.setdefault("quant", quant[:40], line)
        backend = row.get("backend", "").split(",")[0].strip().lower() or None
        ngl = count(row.get("ngl")) if row.get("ngl") else None
        if (threads := count(row.get("threads"))) is not None:
            r.setdefault("threads", threads, line)
        n = count(m[2])
        kind: Kind = "prefill" if m[1] == "pp" else "decode"
        r.add_speed(
            Speed(
                kind,
                tok_s,
                n,
                line.number,
                line.text,
                "llama-bench",
                depth=count(m[3]) or 0,
                cv=sd / tok_s if sd is not None else None,
                backend=backend,
                n_gpu_layers=ngl,
                n_prompt=n if kind == "prefill" else None,
                flash_attn=flash_attn(row["fa"]) if "fa" in row else None,
                n_ubatch=_table_ubatch(row),
                facts=_row_facts(row),
            )
        )
        return True

    def _next_model(self, row: dict[str, str], line: Line) -> None:
        """A table of several models (`llama-bench -m A -m B`): a row of another model than the
        rows before it starts a run of its own, judged with its own size and parameters; what
        the log said of the machine and the command (devices, threads, build) goes with it."""
        r = self.run
        said = tuple(r.value(k) for k in ("model_desc", "model_size_bytes", "model_params"))
        mine = (row.get("model", "")[:80], bytes_of(row.get("size", "")), params_of(row.get("params", "")))
        if not r.speeds or said[0] is None or all(a == b for a, b in zip(said, mine, strict=True) if a and b):
            return
        self.new_run_if_measured(line)
        self.run.facts.update({k: f for k, f in r.facts.items() if k not in _MODEL_FACTS})
        self.run.devices.extend(r.devices)


# what a llama-bench row says of its model: a row of another model leaves them behind
_MODEL_FACTS = frozenset({"model_desc", "architecture", "model_size_bytes", "model_params", "quant"})


def _row_facts(row: dict[str, str]) -> tuple[tuple[str, Any], ...]:
    """The run facts a row's columns state (its heads as llama-bench prints them: `n_cpu_moe`, `ot`,
    `sm`, `ts`, `dev`), read by the run-fact table; a cell that is not the fact's value is left out."""
    return tuple(
        (f.name, v) for h, c in row.items() if (f := BY_HEAD.get(h)) is not None and (v := f.read(c)) is not None
    )


def _table_ubatch(row: dict[str, str]) -> int | None:
    """A llama-bench table row's physical batch: its n_ubatch column, at most its n_batch one;
    llama-bench prints them only where they are not its defaults (-b 2048, -ub 512)."""
    ub = count(row["n_ubatch"]) if "n_ubatch" in row else N_UBATCH
    b = count(row["n_batch"]) if "n_batch" in row else None
    return physical_batch(ub, b)

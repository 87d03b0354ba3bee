"""The shares of a bandwidth a placement's parts reach, fitted on public rows (data, not code):
the RAM's share for the part of a token read from the CPU's memory (experts in RAM, layers not
offloaded); the host link's share for spilled weights the GPU reads over it (a driver's fallback
to system memory, managed memory), and for the copies a prompt's batches make of weights kept in
RAM (ggml's offload of a batch to the GPU); and the time of a layer's round trip to the CPU where
-nkvo keeps its cache in RAM. `benchmarks/calibrate.py --write` fits them on
benchmarks/data/placement-results.jsonl and writes src/ggprof/calibration/placement-fits.json;
each band is as wide as the errors of the rows of machines the fit left out (docs/calibration.md)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ggprof.machine.device import EfficiencyBand


@dataclass(frozen=True, kw_only=True)
class TokenParts:
    """A token's time split by memory, each part at full rate (s): what the GPUs read at their
    bandwidth, the RAM part at the RAM's, the weights a link carries at its rate; a prompt's copies
    over the link; and the GPU's own band, so that a row's time tells the share of the rest."""

    gpu_s: float
    ram_s: float = 0.0
    # spill: every weight of the GPU's spilled allocation over its link, as often as it crosses it at
    # the band's slow end (physics.placement.SPILL_CROSSINGS: a migrated page twice, out and in)
    link_s: float = 0.0
    prompt_link_s: float = 0.0  # a prompt's batches: the weights in RAM (or spilled) copied to the GPU
    prompt_compute_s: float = 0.0  # the prompt's compute floor (FLOPs at the peak)
    trips: int = 0  # -nkvo: layers whose cache is in RAM, each a round trip to the CPU a token
    gpu_band: EfficiencyBand | None = None
    prompt_band: EfficiencyBand | None = None  # the GPU's share of its compute peak on a prompt

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if not k.endswith("_band")}
        for name, band in (("gpu_band", self.gpu_band), ("prompt_band", self.prompt_band)):
            out[name] = [band.low, band.high] if band else None
        return out


@dataclass(frozen=True, kw_only=True)
class ShareFit:
    """One fitted share: its centre (the geometric mean over machines, each weighing the same) and
    its band (the centre times the smallest and largest error of a machine's rows predicted by
    the fit made without that machine)."""

    share: float
    low: float
    high: float
    rows: int
    machines: int
    held_out_error: float  # median |ln(row's share / share fitted without its machine)|
    what: str
    left_out: tuple[str, ...] = ()  # rows more than OUTLIER_FACTOR off the others, named

    def to_json(self) -> str:
        d = asdict(self)
        d["left_out"] = list(self.left_out)
        return json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in d.items()}, indent=1) + "\n"

    @staticmethod
    def load(path: Path) -> ShareFit:
        d = json.loads(path.read_text())
        return ShareFit(**{**d, "left_out": tuple(d.get("left_out", ()))})

    def band(self) -> EfficiencyBand:
        return EfficiencyBand(
            low=self.low,
            high=self.high,
            source=f"{self.what}: {self.low:.0%}-{self.high:.0%} (fitted on {self.rows} public rows of "
            f"{self.machines} machines, each left out in turn: median error {self.held_out_error:.0%})",
        )


@dataclass(frozen=True, kw_only=True)
class PlacementFits:
    """The fitted shares (None: too few rows; the sourced default band applies)."""

    dataset: str = ""
    ram: ShareFit | None = None
    spill: ShareFit | None = None
    copies: ShareFit | None = None
    # -nkvo: the time (s, in `share`) of a layer's round trip to the CPU with its cache in RAM
    trip: ShareFit | None = None
    inputs: tuple[str, ...] = field(default=())  # the rows each fit used, by source

    def to_json(self) -> str:
        def fit(f: ShareFit | None) -> dict[str, Any] | None:
            if f is None:
                return None
            d = asdict(f)
            d["left_out"] = list(f.left_out)
            return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in d.items()}

        body = {
            "dataset": self.dataset,
            "ram": fit(self.ram),
            "spill": fit(self.spill),
            "copies": fit(self.copies),
            "trip": fit(self.trip),
            "inputs": list(self.inputs),
        }
        return json.dumps(body, indent=1, sort_keys=True) + "\n"

    @staticmethod
    def load(path: Path) -> PlacementFits:
        d = json.loads(path.read_text())

        def fit(x: dict[str, Any] | None) -> ShareFit | None:
            return ShareFit(**{**x, "left_out": tuple(x.get("left_out", ()))}) if x else None

        return PlacementFits(
            dataset=d.get("dataset", ""),
            ram=fit(d.get("ram")),
            spill=fit(d.get("spill")),
            copies=fit(d.get("copies")),
            trip=fit(d.get("trip")),
            inputs=tuple(d["inputs"]),
        )

"""Where a pasted log's run put the model: each device's model and KV buffers as llama.cpp printed
them, what `--fit` chose for each device, the placement that amounts to in llama.cpp's flags
(from --fit's lines, else the command line, else derived as llama.cpp would: the layers its
offload line counts, split by each device's free memory), and each buffer ggprof predicts for
that placement (ggprof.physics.buffers) beside the printed one."""

from __future__ import annotations

from dataclasses import dataclass

from ggprof.logs.records import Fact, LogRun
from ggprof.model.spec import ModelSpec
from ggprof.physics.buffers import MAPPED, model_buffers
from ggprof.runfacts import BY_NAME as RUN_FACTS

# llama.cpp's device names per backend (ggml's backends name their devices CUDA0, ROCm0, ...)
_DEVICE_PREFIX = {"cuda": "CUDA", "rocm": "ROCm", "vulkan": "Vulkan", "sycl": "SYCL", "metal": "MTL", "rpc": "RPC"}
_IN_RAM = ("CPU", "CPU_MAPPED", "CPU_REPACK", "CPU_AARCH64")
# the routed experts of one layer, as --fit moves them to system memory (common/fit.cpp's overflow
# pattern for a whole layer's experts; ggprof.physics.placement.EXPERT_TENSORS)
_LAYER_EXPERTS = r"blk\.{}\.ffn_(up|down|gate|gate_up)_(ch|)exps"


@dataclass(frozen=True)
class BufferRow:
    """One device's part: llama.cpp's name for it, its own words, the bytes the log printed for
    its model and KV buffers, and ggprof's bytes for the placement read."""

    name: str  # RPC1, CUDA0, CPU_Mapped
    where: str  # 127.0.0.1:50052, a GPU's name, system RAM
    model_bytes: int | None
    kv_bytes: int | None
    predicted_bytes: int | None
    line: int | None  # the model buffer's line

    @property
    def error(self) -> float | None:
        """ggprof's bytes over the log's, minus one."""
        if self.predicted_bytes is None or not self.model_bytes:
            return None
        return self.predicted_bytes / self.model_bytes - 1


@dataclass(frozen=True)
class FitChoice:
    """--fit's last word on one device: its layers, and how many of them overflow (their experts
    moved to system memory)."""

    device: str
    where: str
    layers: int
    overflowing: int
    used_mib: int
    free_mib: int
    line: int


@dataclass(frozen=True)
class LogPlacement:
    flags: str  # the placement in llama.cpp's flags: `-ngl 5 -ts 3,2 -ncmoe 3`
    source: str  # where it was read: as --fit set it, from the command line, or derived as llama.cpp would
    rows: tuple[BufferRow, ...]
    fit: tuple[FitChoice, ...]
    fit_status: Fact | None
    breakdown: tuple[tuple[str, Fact], ...]  # the memory breakdown after the load, per device
    # what --fit set, as a prediction takes it (one GPU): its -ngl and the experts it moved to RAM
    fit_facts: tuple[tuple[str, object], ...] = ()


def _devices(run: LogRun) -> list[tuple[str, str, int | None]]:
    """(llama.cpp's name, its words, free bytes) of each device the run used, in its order."""
    out = []
    for d in run.devices:
        prefix = _DEVICE_PREFIX.get(d.backend)
        if prefix is not None:
            out.append((f"{prefix}{d.index}", d.name, d.memory_bytes))
    return out


def _device_of(buffer: str, devices: list[tuple[str, str, int | None]]) -> str:
    """The device a buffer is on: an RPC buffer names its server (`RPC0[127.0.0.1:50053]`, the
    server's first device), which the device's `using device RPC1 (127.0.0.1:50053)` line names."""
    if "[" not in buffer:
        return buffer
    kind, _, rest = buffer.partition("[")
    endpoint = rest.rstrip("]")
    at = [name for name, where, _ in devices if where == endpoint]
    k = kind.lstrip("RPC")
    i = int(k) if k.isdigit() else 0
    return at[i] if i < len(at) else buffer


def _fit_overrides(n_layers: int, ngl: int, fit: tuple[FitChoice, ...]) -> tuple[int, tuple[int, ...]]:
    """--fit's choice as llama.cpp sets it (common/fit.cpp, set_ngl_tensor_split_tbo): -ngl the
    sum of the devices' layers, -ts each device's layers, and each device's overflowing layers
    (the last of its layers) with their experts in system memory. Returns (ngl, those layers)."""
    start = n_layers + 1 - ngl
    moved: list[int] = []
    for c in fit:
        start += c.layers - c.overflowing
        moved += [il for il in range(start, start + c.overflowing) if il < n_layers]
        start += c.overflowing
    return ngl, tuple(moved)


def _spelled(name: str, value: object) -> str:
    return RUN_FACTS[name].spelled(value)


def log_placement(run: LogRun, spec: ModelSpec | None) -> LogPlacement | None:
    """The run's placement read from its log, with ggprof's buffers for it (None: the log shows
    no model buffer)."""
    if not run.model_buffers:
        return None
    devices = _devices(run)
    names = [n for n, _, _ in devices]
    given = dict(run.value("command_facts") or ())
    fit = tuple(
        FitChoice(name, f.value[0], f.value[1] or 0, f.value[2] or 0, f.value[3], f.value[4], f.line)
        for name, f in run.fit_devices.items()
    )
    n_layers = spec.n_layers if spec is not None else run.value("n_layers") or 0
    offloaded = run.value("layers_offloaded")
    overrides: tuple[tuple[str, str], ...] = tuple(given.get("tensor_buft_overrides") or ())
    n_cpu_moe = int(given.get("n_cpu_moe") or 0)
    shares: list[float]
    ngl: int | None
    flags: list[str] = []
    if fit and set(c.device for c in fit) <= set(names):
        order = {n: i for i, n in enumerate(names)}
        fit = tuple(sorted(fit, key=lambda c: order[c.device]))
        ngl, moved = _fit_overrides(n_layers, sum(c.layers for c in fit), fit)
        shares = [float(next((c.layers for c in fit if c.device == n), 0)) for n in names]
        overrides = tuple((_LAYER_EXPERTS.format(il), "CPU") for il in moved) + overrides
        flags += [f"-ngl {ngl}", _spelled("tensor_split", tuple(shares))] if len(names) > 1 else [f"-ngl {ngl}"]
        if moved and moved == tuple(range(len(moved))):
            flags.append(_spelled("n_cpu_moe", len(moved)))
        elif moved:
            flags.append(f"-ot {','.join(p + '=CPU' for p, _ in overrides[: len(moved)])}")
        lines = sorted(c.line for c in fit)
        source = (
            f"as --fit set it (lines {lines[0]}-{lines[-1]})"
            if len(lines) > 1
            else f"as --fit set it (line {lines[0]})"
        )
    else:
        ngl = given.get("n_gpu_layers")
        said = [n for n in ("n_gpu_layers", "tensor_split", "n_cpu_moe", "tensor_buft_overrides") if given.get(n)]
        if ngl is None or ngl < 0:
            ngl = offloaded if isinstance(offloaded, int) else None
        ts = given.get("tensor_split") or ()
        free = [m for _, _, m in devices]
        shares = [float(v) for v in ts] if ts else ([float(m or 0) for m in free] if all(free) else [1.0] * len(names))
        flags += [f"-ngl {ngl}"] if ngl is not None else []
        flags += [_spelled(n, given[n]) for n in said if n != "n_gpu_layers"]
        source = "from the command line" if said else "derived as llama.cpp would: the offloaded layers"
        if len(names) > 1 and not ts:
            source += ", split by each device's free memory"
    buffers = None
    if spec is not None and names:
        buffers = model_buffers(
            spec,
            names,
            shares,
            mode=str(given.get("split_mode") or "layer"),
            n_gpu_layers=ngl,
            n_cpu_moe=n_cpu_moe,
            overrides=overrides,
            mapped=any(b.upper() == MAPPED.upper() for b in run.model_buffers),
        )
    rows: list[BufferRow] = []
    kv = {_device_of(b, devices): f.value for b, f in run.kv_buffers.items()}
    for buffer, f in run.model_buffers.items():
        name = _device_of(buffer, devices)
        where = next((w for n, w, _ in devices if n == name), "system RAM" if name.upper() in _IN_RAM else "")
        predicted = buffers.of(name) if buffers is not None else None
        rows.append(BufferRow(name, where, f.value, kv.get(name), predicted, f.line))
    return LogPlacement(
        flags=" ".join(flags),
        source=source,
        rows=tuple(rows),
        fit=fit,
        fit_status=run.facts.get("fit_status"),
        breakdown=tuple(run.memory_breakdown.items()),
        fit_facts=(("n_gpu_layers", ngl), ("tensor_buft_overrides", overrides)) if fit and len(names) == 1 else (),
    )

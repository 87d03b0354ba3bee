"""The model buffers llama.cpp allocates for a placement: each device's bytes and the CPU's, as
its load log prints them (`load_tensors: CUDA0 model buffer size = 3.81 MiB`). Pure functions.

- A device's buffer holds the tensors placed on it (ggml_backend_alloc_ctx_tensors_from_buft:
  each tensor padded to the buffer's alignment, 32 bytes on the CPU and RPC backends).
- The CPU's: with mmap (llama.cpp's default, `CPU_Mapped`) the file is not copied but mapped,
  and the buffer is the range of the file from the first to the end of the last tensor kept in
  RAM, whatever lies between (src/llama-model-loader.cpp, get_mapping_range; one range per
  file of a split model). Without mmap (`--no-mmap`, `-lm none`: `CPU`) it holds only them.

Where each tensor lives is ggprof.physics.devices.homes: -ngl, the layer split, -ncmoe, -ot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ggprof.model.spec import ModelSpec, TensorSpec
from ggprof.physics.devices import homes
from ggprof.physics.rpc import layer_devices

ALIGNMENT = 32  # GGUF's default data alignment; the CPU and RPC backends' buffer alignment
MAPPED = "CPU_Mapped"  # the CPU's buffer of a memory-mapped model (ggml-backend.cpp)


@dataclass(frozen=True)
class Buffers:
    """Each device's model buffer, in llama.cpp's device order, and the CPU's."""

    devices: tuple[tuple[str, int], ...]  # (llama.cpp's device name, bytes)
    cpu_name: str  # CPU_Mapped (mmap) or CPU
    cpu_bytes: int  # the CPU's buffer: with mmap, the span of the file its tensors lie in
    cpu_held_bytes: int  # the tensors kept in RAM themselves

    def of(self, name: str) -> int | None:
        """The bytes of the buffer named `name` (a device's name, CPU or CPU_Mapped)."""
        if name.upper() in ("CPU", MAPPED.upper()):
            return self.cpu_bytes
        return dict(self.devices).get(name)


def _padded(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def model_buffers(
    spec: ModelSpec,
    devices: Sequence[str],
    shares: Sequence[float],
    *,
    mode: str = "layer",
    n_gpu_layers: int | None = None,
    n_cpu_moe: int = 0,
    overrides: tuple[tuple[str, str], ...] = (),
    mapped: bool = True,
) -> Buffers:
    """The buffers of `spec` over `devices` (llama.cpp's names, in its order) cut in `shares`
    (normalised -ts, or each device's free memory), with the CPU's buffer mapped or not."""
    per_layer, output = layer_devices(spec.n_layers, list(shares) or [1.0] * len(devices), n_gpu_layers)
    labels = {name: i for i, name in enumerate(devices)}
    held = [0] * len(devices)
    in_ram: list[TensorSpec] = []
    for t, home in homes(spec, per_layer, output, labels, mode, n_cpu_moe, overrides):
        if home.device is None:
            in_ram.append(t)
        elif home.split:
            total = sum(shares)
            for i, share in enumerate(shares):
                held[i] += _padded(int(t.n_bytes * share / total))
        else:
            held[home.device] += _padded(t.n_bytes)
    ram = sum(_padded(t.n_bytes) for t in in_ram)
    return Buffers(
        devices=tuple(zip(devices, held, strict=True)),
        cpu_name=MAPPED if mapped else "CPU",
        cpu_bytes=_mapped_span(spec, in_ram) if mapped else ram,
        cpu_held_bytes=ram,
    )


def _mapped_span(spec: ModelSpec, in_ram: Sequence[TensorSpec]) -> int:
    """The file ranges a memory-mapped CPU buffer covers: per file, from the first tensor kept in
    RAM to the end of the last. Offsets are the file's own; a model estimated from a log has
    none, and its tensors are taken in llama.cpp's layout order, each padded to the alignment."""
    offsets: dict[str, tuple[int, int]] = {}
    at: dict[int, int] = {}
    for t in spec.tensors:
        start = t.offset if t.offset is not None else at.get(t.shard, 0)
        offsets[t.name] = (t.shard, start)
        at[t.shard] = _padded(start + t.n_bytes)
    spans: dict[int, tuple[int, int]] = {}
    for t in in_ram:
        shard, start = offsets[t.name]
        first, last = spans.get(shard, (start, start + t.n_bytes))
        spans[shard] = (min(first, start), max(last, start + t.n_bytes))
    return sum(last - first for first, last in spans.values())

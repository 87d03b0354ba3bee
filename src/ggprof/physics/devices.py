"""A model over several GPUs of one machine, as llama.cpp places it: which bytes each memory
holds and reads a token, how the devices run (in sequence, or in parallel on each layer) and
what they exchange. Pure functions, no I/O.

- `-sm layer` (llama.cpp's default): the repeating layers and the output layer (n_layer + 1
  slots, the last -ngl of them offloaded) are cut in proportion to `-ts`, or to each device's
  free memory: slot i goes to the first device whose cumulative share exceeds i / slots
  (src/llama-model.cpp, `load_tensors`; ggprof.physics.rpc.layer_devices). A token visits the
  devices one after another, so its time is the sum over memories of bytes / bandwidth, plus
  one hand-over of the activation (4 x n_embd bytes) where the next layer is on another GPU.
- `-sm row`: each layer's matrices are cut by rows over every GPU in `-ts` proportions (the
  backend's split buffer type, `make_gpu_buft_list`); the rest of a layer (norms, experts, its
  KV cache) stays on the layer's device. The GPUs multiply each matrix together and the result
  is gathered: the slowest GPU's share of the matrices, the rest in sequence, and one
  synchronisation per matrix a token multiplies.
- `-sm tensor` (2026 builds, a "meta" device over the GPUs, llama.cpp PR #19378): every layer's
  weights and KV cache are cut over the GPUs, which run each layer in parallel and add their
  partial results twice a layer (after attention, after the feed-forward): the slowest share
  plus two all-reduces a layer.
- `-sm none`: the model on `-mg`'s device alone (ggprof.physics.roofline, one device).

Weights `-ncmoe` or `-ot ...=CPU` put in RAM, and layers beyond `-ngl`, are read by the CPU in
sequence with the GPUs, as for one GPU (ggprof.physics.placement). docs/physics.md has the
derivation and its sources.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby, pairwise

from ggprof.errors import NoBandwidthError
from ggprof.machine.device import Device, EfficiencyBand
from ggprof.machine.links import named_link
from ggprof.model.spec import OUTPUT_LAYER_TENSORS, ModelSpec, TensorSpec
from ggprof.physics.placement import EXPERT_TENSORS, buffer_of
from ggprof.physics.rpc import HOP_OVERHEAD_S, layer_devices
from ggprof.units import fmt_bytes, fmt_rate

# The link between two GPUs of one machine, when none is given: PCIe 4.0 x16 (31.5 GB/s after
# 128b/130b encoding, PCI-SIG); peer copies reach about 25 GB/s in NVIDIA's
# p2pBandwidthLatencyTest. A synchronisation (a copy launched, its event waited on) takes from
# 5 us (the floor: a peer copy's latency in that test) to 20 us (the slow end of the band).
LINK_BYTES_PER_S = 25e9
LINK_SOURCE = "PCIe 4.0 x16 peer copies (~25 GB/s, NVIDIA p2pBandwidthLatencyTest); 5-20 us a synchronisation"
SYNC_LATENCY_S = (5e-6, 20e-6)
SPLIT_MODES = ("layer", "row", "tensor")
PARALLEL = ("row", "tensor")  # the devices run each layer together


@dataclass(frozen=True, kw_only=True)
class MemoryTerm:
    """One memory's part of a token: the bytes it holds and reads, over its bandwidth."""

    label: str  # llama.cpp's device name (CUDA0), or "CPU" for system RAM
    device: Device
    layers: tuple[int, ...]  # the layers whose own tensors it holds (a row/tensor split: every GPU's)
    output: bool
    weight_bytes: int  # held
    kv_bytes: int  # the KV cache (and recurrent state) it reads a token at the depth
    read_bytes: int  # weights touched + KV, a token
    parallel_bytes: int  # of read_bytes: read while the other GPUs read theirs (row/tensor split)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.device.bandwidth_bytes_per_s or 0.0

    @property
    def parallel_s(self) -> float:
        return self.parallel_bytes / self.bandwidth_bytes_per_s if self.parallel_bytes else 0.0

    @property
    def sequential_s(self) -> float:
        rest = self.read_bytes - self.parallel_bytes
        return rest / self.bandwidth_bytes_per_s if rest else 0.0

    @property
    def seconds(self) -> float:
        return self.parallel_s + self.sequential_s

    @property
    def name(self) -> str:
        return f"{self.label} ({self.device.name})"


@dataclass(frozen=True, kw_only=True)
class SyncTerm:
    """What the GPUs exchange a token: `count` transfers of `bytes_each` over the link."""

    what: str
    count: int  # at the floor: transfers to the GPUs at once count once
    bytes_each: int
    slow_count: int | None = None  # at the band's slow end: every transfer one after another
    bytes_per_s: float = LINK_BYTES_PER_S
    source: str = LINK_SOURCE
    latency_s: tuple[float, float] = SYNC_LATENCY_S  # a transfer's fixed cost: the floor's, the slow end's
    slow_bytes_per_s: float | None = None  # the slow end's rate where it differs (a network link not given)

    def seconds(self, latency_s: float | None = None) -> float:
        fixed = self.latency_s[0] if latency_s is None else latency_s
        return self.count * (fixed + self.bytes_each / self.bytes_per_s)

    def slow_seconds(self) -> float:
        count = self.count if self.slow_count is None else self.slow_count
        return count * (self.latency_s[1] + self.bytes_each / (self.slow_bytes_per_s or self.bytes_per_s))


@dataclass(frozen=True, kw_only=True)
class DeviceSplit:
    """A model over several GPUs (and the CPU's RAM): each memory's term and each exchange."""

    mode: str  # layer | row | tensor
    shares: tuple[float, ...]  # each GPU's share, summing to 1
    shares_source: str  # "-ts 3,1", or each device's memory
    terms: tuple[MemoryTerm, ...]  # the GPUs in llama.cpp's order, then the CPU where it reads
    syncs: tuple[SyncTerm, ...]

    @property
    def parallel_s(self) -> float:
        return max((t.parallel_s for t in self.terms), default=0.0)

    @property
    def sequential_s(self) -> float:
        return sum(t.sequential_s for t in self.terms)

    def sync_s(self, latency_s: float | None = None) -> float:
        return sum(s.seconds(latency_s) for s in self.syncs)

    @property
    def floor_s(self) -> float:
        """A token's floor: the slowest parallel share, the memories read in sequence, every exchange."""
        return self.parallel_s + self.sequential_s + self.sync_s()

    @property
    def gpus(self) -> tuple[MemoryTerm, ...]:
        return tuple(t for t in self.terms if t.label != "CPU")

    def expected_s(self, bands: Sequence[EfficiencyBand | None]) -> tuple[float, float] | None:
        """(fast, slow) seconds a token: each memory's term at its backend's band (`bands`, one a
        term), the exchanges at the fast and slow ends of a synchronisation. None when a term that
        reads more than a MiB has no band."""
        fast_par = slow_par = fast = slow = 0.0
        for t, band in zip(self.terms, bands, strict=True):
            if band is None:
                if t.read_bytes > 1 << 20:
                    return None
                band = EfficiencyBand(low=1.0, high=1.0, source="")
            fast_par, slow_par = max(fast_par, t.parallel_s / band.high), max(slow_par, t.parallel_s / band.low)
            fast, slow = fast + t.sequential_s / band.high, slow + t.sequential_s / band.low
        return fast_par + fast + self.sync_s(), slow_par + slow + sum(s.slow_seconds() for s in self.syncs)

    def pace(self) -> str:
        """Which term sets the pace, in words."""
        terms = [(t.seconds if self.mode == "layer" else t.sequential_s, t.name) for t in self.terms]
        if self.mode in PARALLEL:
            slowest = max(self.terms, key=lambda t: t.parallel_s)
            terms.append((self.parallel_s, f"the slowest share of the split matrices ({slowest.name})"))
        terms += [(s.seconds(), s.what) for s in self.syncs]
        seconds, words = max(terms)
        return f"{words}, {seconds / self.floor_s:.0%} of the step" if self.floor_s else words

    def unbalanced(self) -> tuple[float, float] | None:
        """(this split's parallel seconds, a split by bandwidth's) where -ts makes the slowest GPU's
        share at least 10% longer than a split in proportion to each GPU's bandwidth would."""
        if self.mode not in PARALLEL or not self.parallel_s:
            return None
        total = sum(t.parallel_bytes for t in self.gpus)
        balanced = total / sum(t.bandwidth_bytes_per_s for t in self.gpus)
        return (self.parallel_s, balanced) if self.parallel_s > 1.1 * balanced else None


def shares_of(gpus: Sequence[tuple[str, Device]], tensor_split: Sequence[float]) -> tuple[tuple[float, ...], str]:
    """Each GPU's share (normalised) and where it came from: -ts, else each device's memory
    (llama.cpp asks each device for its free memory; a profile gives its size)."""
    if tensor_split and sum(tensor_split[: len(gpus)]) > 0:
        given = [float(tensor_split[i]) if i < len(tensor_split) else 0.0 for i in range(len(gpus))]
        spelled = ",".join(f"{v:g}" for v in tensor_split)
        return tuple(v / sum(given) for v in given), f"-ts {spelled}"
    sizes = [float(d.memory_bytes or 0) for _, d in gpus]
    if not all(sizes):
        return tuple(1 / len(gpus) for _ in gpus), "equal shares (a device's memory is not known)"
    sizes_text = ", ".join(fmt_bytes(int(s), binary=False) for s in sizes)
    return tuple(s / sum(sizes) for s in sizes), f"each device's memory ({sizes_text}), as llama.cpp splits by default"


def _is_split_matrix(spec: ModelSpec, t: TensorSpec, mode: str) -> bool:
    """Whether a row or tensor split cuts this tensor over every GPU (row: 2-D matrices only,
    as the backends' split buffer type holds them; tensor: every weight of a layer or the head)."""
    if mode == "tensor":
        return True
    return mode == "row" and len(t.shape) == 2 and t.name.endswith(".weight") and not spec.is_lookup(t)


@dataclass(frozen=True)
class Home:
    """Where llama.cpp puts one tensor: a GPU's index in its order (None: the CPU's RAM), cut over
    every GPU (a row or tensor split's matrix), or the input embedding's lookup (always RAM)."""

    device: int | None
    split: bool = False
    lookup: bool = False


def homes(
    spec: ModelSpec,
    per_layer: Sequence[int | None],
    output: int | None,
    labels: dict[str, int],
    mode: str = "layer",
    n_cpu_moe: int = 0,
    overrides: tuple[tuple[str, str], ...] = (),
) -> Iterator[tuple[TensorSpec, Home]]:
    """Each tensor of `spec` with its home: its layer's device (`per_layer`, the output layer's
    `output`), then -ot's buffer (the first pattern that matches; a CPU buffer is RAM, a GPU's
    name that GPU), else -ncmoe's experts of the first layers in RAM (src/llama-model.cpp)."""
    for t in spec.tensors:
        if spec.is_lookup(t):  # llama.cpp keeps the input embedding on the CPU; one row a token
            yield t, Home(None, lookup=True)
            continue
        if t.layer is not None:
            dev = per_layer[t.layer] if t.layer < len(per_layer) else None
        elif t.name in OUTPUT_LAYER_TENSORS or spec.is_tied_head(t):
            dev = output
        else:
            dev = None
        buffer = buffer_of(t.name, overrides) if overrides else None
        if buffer is not None:  # -ot before -ncmoe: the first pattern added that matches
            dev = None if buffer.upper().startswith("CPU") else labels.get(buffer, dev)
        elif dev is not None and t.layer is not None and t.layer < n_cpu_moe and EXPERT_TENSORS.search(t.name):
            dev = None
        yield t, Home(dev, split=dev is not None and buffer is None and _is_split_matrix(spec, t, mode))


def plan_devices(
    spec: ModelSpec,
    gpus: Sequence[tuple[str, Device]],
    cpu: Device | None,
    *,
    mode: str = "layer",
    tensor_split: Sequence[float] = (),
    n_gpu_layers: int | None = None,
    n_cpu_moe: int = 0,
    overrides: tuple[tuple[str, str], ...] = (),
    no_kv_offload: bool = False,
    kv_layer_bytes: Sequence[int] = (),
) -> DeviceSplit:
    """The split of `spec` over `gpus` (llama.cpp's names and devices, in its order) with the
    CPU's RAM for what stays there; `kv_layer_bytes`: each layer's KV (and state) a token reads."""
    shares, source = shares_of(gpus, tensor_split)
    per_layer, output = layer_devices(spec.n_layers, shares, n_gpu_layers)
    n, cpu_i = len(gpus), len(gpus)
    held, read, par, kv = [0] * (n + 1), [0] * (n + 1), [0] * (n + 1), [0] * (n + 1)
    labels = {label: i for i, (label, _) in enumerate(gpus)}
    matrices: list[TensorSpec] = []
    for t, home in homes(spec, per_layer, output, labels, mode, n_cpu_moe, overrides):
        decode = int(t.n_bytes * spec.decode_share(t))
        if spec.is_tied_head(t) and not home.lookup:
            held[cpu_i] += t.n_bytes  # the lookup's own copy
        if home.split:
            for i, share in enumerate(shares):
                held[i] += int(t.n_bytes * share)
                read[i] += int(decode * share)
                par[i] += int(decode * share)
            if decode:
                matrices.append(t)
            continue
        i = cpu_i if home.device is None else home.device
        held[i], read[i] = held[i] + t.n_bytes, read[i] + decode
    for il, b in enumerate(kv_layer_bytes):
        dev = per_layer[il] if il < len(per_layer) else None
        if no_kv_offload or dev is None:
            kv[cpu_i] += b
        elif mode == "tensor":  # each GPU holds its heads' share of the cache
            for i, share in enumerate(shares):
                kv[i] += int(b * share)
                par[i] += int(b * share)
        else:
            kv[dev] += b
    terms = []
    for i in range(n + 1):
        label, device = gpus[i] if i < n else ("CPU", cpu)
        if i == cpu_i and (device is None or not device.bandwidth_bytes_per_s or read[i] + kv[i] == 0):
            if read[i] + kv[i] > 1 << 20:
                raise NoBandwidthError(
                    "the placement puts weights in the CPU's memory, but this host's CPU bandwidth is unknown: "
                    "run `ggprof host` first"
                )
            continue
        assert device is not None
        layers = tuple(il for il, d in enumerate(per_layer) if (d == i) or (d is not None and mode == "tensor"))
        terms.append(
            MemoryTerm(
                label=label,
                device=device,
                layers=layers if i < n else tuple(il for il, d in enumerate(per_layer) if d is None),
                output=(output == i) if i < n else output is None,
                weight_bytes=held[i],
                kv_bytes=kv[i],
                read_bytes=read[i] + kv[i],
                parallel_bytes=par[i],
            )
        )
    return DeviceSplit(
        mode=mode,
        shares=shares,
        shares_source=source,
        terms=tuple(terms),
        syncs=_syncs(spec, mode, per_layer, output, matrices, gpus),
    )


def _syncs(
    spec: ModelSpec,
    mode: str,
    per_layer: Sequence[int | None],
    output: int | None,
    matrices: list[TensorSpec],
    gpus: Sequence[tuple[str, Device]],
) -> tuple[SyncTerm, ...]:
    activation = 4 * spec.n_embd  # one f32 row of the residual stream
    n = len(gpus)
    if mode == "layer":
        runs = [d for d, _ in groupby(d for d in (*per_layer, output) if d is not None)]
        remote = {i for i, (label, _) in enumerate(gpus) if label.startswith("RPC[")}
        hops = sum(1 for a, b in pairwise(runs) if a not in remote and b not in remote)
        what = f"{hops} hand-over(s) of the activation between GPUs"
        local = (SyncTerm(what=what, count=hops, bytes_each=activation),) if hops else ()
        return local + tuple(
            _network_trips(spec, gpus[i], runs.count(i), output == i) for i in sorted(remote) if i in runs
        )
    if mode == "row":
        # llama.cpp's row split (ggml_cuda_op_mul_mat): each split matrix's input is copied to the
        # other GPUs and each GPU's rows of the result back to the main GPU: two transfers, which
        # overlap across GPUs at best (the floor) and follow one another at worst
        moved = sum(4 * (t.shape[0] + t.shape[1]) for t in matrices) // (2 * max(len(matrices), 1))
        count = len(matrices)
        what = f"{count} split matrices a token, each its input sent to the GPUs and its result gathered"
        return (
            (SyncTerm(what=what, count=2 * count, bytes_each=moved, slow_count=2 * (n - 1) * count),) if count else ()
        )
    layers = sum(1 for d in per_layer if d is not None)
    ring = 2 * (n - 1) * activation // n  # a ring all-reduce moves 2(n-1)/n of the data through each GPU
    what = f"{2 * layers} all-reduces a token (2 a layer: after attention, after the feed-forward)"
    # a ring all-reduce takes 2(n - 1) steps; at the floor they cost one latency
    slow = 2 * layers * 2 * (n - 1)
    return (SyncTerm(what=what, count=2 * layers, bytes_each=ring, slow_count=slow),) if layers else ()


def _network_trips(spec: ModelSpec, gpu: tuple[str, Device], stretches: int, output: bool) -> SyncTerm:
    """A device behind an rpc-server: each stretch of its layers a blocking round trip from the main
    host (ggml-rpc: the activation sent, its graph recomputed, the result read back; no
    server-to-server path), over its network link with a hop's fixed cost (physics.rpc's
    HOP_OVERHEAD_S); a link not given spans loopback (the floor) to Gigabit Ethernet (the slow end)."""
    label, device = gpu
    moved = 2 * 4 * spec.n_embd + (4 * spec.vocab_size if output else 0)  # the activation there and back, logits
    link = device.network
    fast, slow = (link, link) if link is not None else (named_link("localhost"), named_link("1GbE"))
    source = link.name if link is not None else f"link not given ({label}=PROFILE@LINK): loopback to 1GbE"
    return SyncTerm(
        what=f"{stretches} round trip(s) to {label} over the network (ggml-rpc: the activation sent, the result "
        "read back)",
        count=stretches,
        bytes_each=moved,
        bytes_per_s=fast.throughput_bytes_per_s,
        slow_bytes_per_s=slow.throughput_bytes_per_s,
        source=f"{source}; a hop's fixed cost {HOP_OVERHEAD_S[0] * 1e3:.2g}-{HOP_OVERHEAD_S[1] * 1e3:.2g} ms",
        latency_s=(fast.rtt_s + HOP_OVERHEAD_S[0], slow.rtt_s + HOP_OVERHEAD_S[1]),
    )


def split_rules(split: DeviceSplit) -> tuple[str, ...]:
    """The split in words: each memory's bytes over its bandwidth (and its source), each exchange."""
    how = "in sequence" if split.mode == "layer" else "in parallel on each layer"
    shares = ", ".join(f"{t.label} {s:.0%}" for t, s in zip(split.gpus, split.shares, strict=False))
    lines = [f"devices: -sm {split.mode}, the GPUs run {how}; shares {shares} ({split.shares_source})"]
    for t in split.terms:
        bw = t.device.bandwidth
        where = _layers_text(t) if split.mode == "layer" or t.label == "CPU" else "its share of every layer"
        parallel = f", {fmt_bytes(t.parallel_bytes, binary=False)} of it in parallel" if t.parallel_bytes else ""
        lines.append(
            f"devices: {t.name} holds {where}: {fmt_bytes(t.weight_bytes, binary=False)}; reads "
            f"{fmt_bytes(t.read_bytes, binary=False)} a token{parallel} at {fmt_rate(t.bandwidth_bytes_per_s)} "
            f"[{bw.describe() if bw else 'unknown'}] = {t.seconds * 1e3:.3g} ms"
        )
    for s in split.syncs:
        lines.append(
            f"devices: {s.what}: {s.count} x ({s.latency_s[0] * 1e6:.0f} us + "
            f"{fmt_bytes(s.bytes_each, binary=False)} at {fmt_rate(s.bytes_per_s)}) = {s.seconds() * 1e3:.3g} ms "
            f"[{s.source}]"
        )
    total = (
        "the sum of the terms"
        if split.mode == "layer"
        else "the slowest parallel share + the terms in sequence + the exchanges"
    )
    lines.append(f"devices: a token takes {split.floor_s * 1e3:.3g} ms at least ({total}); the pace: {split.pace()}")
    return tuple(lines)


def _layers_text(t: MemoryTerm) -> str:
    layers = f"layers {t.layers[0]}-{t.layers[-1]}" if t.layers else "no layers"
    return layers + (" + output" if t.output else "")

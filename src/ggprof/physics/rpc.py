"""A model split over machines with llama.cpp's RPC backend: which layers each device holds, and
what a token costs on each device and on each link. Pure functions, no I/O.

llama.cpp puts the RPC devices first in its device list and splits the repeating layers and
the output layer (n_layer + 1 slots) over the devices in proportion to their free memory, or
to --tensor-split (src/llama-model.cpp, `load_tensors`); the input embedding stays on the
main host's CPU. Decoding one token visits the devices in layer order: for each stretch of
layers on a remote device the main host sends the activation (4 x n_embd bytes per token)
with the positions and the attention mask, asks the server to recompute its stored graph, and
reads the result back in one blocking round trip (ggml-rpc: there is no server-to-server
path). The last stretch returns the logits when the output layer is remote (4 x n_vocab bytes).
So a token takes

    sum over devices (bytes read there / its bandwidth) + sum over hops (RTT + bytes moved / link throughput)

with a hop's fixed cost (serialisation, the server waking, launching the graph) calibrated on
measured runs. docs/physics.md has the derivation and its sources.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from ggprof.figures import Figure
from ggprof.llamacpp import CACHE_TYPE
from ggprof.machine.device import Device, EfficiencyBand
from ggprof.machine.links import Link
from ggprof.model.spec import OUTPUT_LAYER_TENSORS, ModelSpec, offloaded_layers
from ggprof.units import fmt_bytes

NEGLIGIBLE_BYTES = 1 << 20  # a device reading less a token (the main host's embedding row) needs no bandwidth
HOP_COMMAND_BYTES = 64  # the command, sizes and tensor descriptors of one set/recompute/get
# A hop's fixed cost beyond the network: calibrated on measured localhost runs (benchmarks/
# data/rpc-runs.jsonl, benchmarks/calibrate.py prints the fit). Its low and high ends bound the
# expected band; a slow hop beyond that is a finding.
HOP_OVERHEAD_S = (0.15e-3, 0.6e-3)
# A device measured alone: its term in the split within -15% / +40% of that. Fitted on the
# runs of benchmarks/bench_rpc.py (benchmarks/data/rpc-runs.json): two separate measurements
# on a shared 2-core machine, where the split's device term came out up to 33% slower than
# the device alone (relays and servers sharing the cores) and up to 13% faster.
MEASURED_SLACK = (0.15, 0.40)
# What a token costs when the graph is not reused: the client serialises the whole graph of a
# stretch (ggml-rpc.cpp `serialize_graph`: 8 bytes a node, one `rpc_tensor` of 296 bytes for
# every node and source) and sends it with GRAPH_COMPUTE every token. Builds before graph
# reuse (llama.cpp PR #15405, merged November 2025) always did; a current build still does
# when a device's layers are cut into several graphs (tensors overridden to the main host
# inside its range). A llama-style layer's decode graph holds about 30 nodes and 40 tensors
# with its weights: ~12 kB a layer.
RPC_TENSOR_BYTES = 296
GRAPH_NODES_PER_LAYER = 30
GRAPH_TENSORS_PER_LAYER = 40


@dataclass(frozen=True, kw_only=True)
class Member:
    """One device of the split: the main host's CPU (no link), or a device behind an rpc-server."""

    label: str  # "this host" or the endpoint ("192.168.1.20:50052")
    device: Device
    link: Link | None = None  # None: on the main host
    free_bytes: int | None = None  # what llama.cpp splits by (None: the device's memory)
    # bytes/s the device really decodes at, measured alone (a local rpc-server's CPU decoding the
    # same model without RPC): its term uses this instead of its backend's band
    measured: Figure | None = None
    measured_prefill: Figure | None = None  # tok/s of the whole model's prompt on the device alone

    @property
    def remote(self) -> bool:
        return self.link is not None


@dataclass(frozen=True, kw_only=True)
class Hop:
    """One stretch of layers on a remote device, as one token (or micro-batch) crosses it."""

    member: int
    layers: tuple[int, ...]
    output: bool  # the stretch ends with the output layer: the logits come back
    sent_bytes: int
    returned_bytes: int
    network_s: float  # RTT + bytes / throughput (the link's floor)


@dataclass(frozen=True, kw_only=True)
class DeviceTerm:
    member: int
    layers: tuple[int, ...]
    output: bool
    weight_bytes: int
    read_bytes: int  # weights touched + KV at the depth, per token
    seconds: float  # read_bytes / bandwidth (the floor)


@dataclass(frozen=True, kw_only=True)
class ChainTime:
    """One token (decode) or one prompt (prefill) across the chain."""

    devices: tuple[DeviceTerm, ...]
    hops: tuple[Hop, ...]

    @property
    def device_s(self) -> float:
        return sum(d.seconds for d in self.devices)

    @property
    def network_s(self) -> float:
        return sum(h.network_s for h in self.hops)

    @property
    def floor_s(self) -> float:
        return self.device_s + self.network_s


def layer_devices(
    n_layers: int, shares: Sequence[float], n_gpu_layers: int | None
) -> tuple[tuple[int | None, ...], int | None]:
    """llama.cpp's split: the device index of each layer and of the output layer (None: the
    main host's CPU). `shares` are the devices' free memory or --tensor-split, in order."""
    total = sum(shares)
    if not shares or total <= 0:
        return (None,) * n_layers, None
    start, active = offloaded_layers(n_layers, n_gpu_layers)
    cumulative, run = [], 0.0
    for s in shares:
        run += s
        cumulative.append(run / total)

    def device(il: int) -> int | None:
        if il < start or il - start >= active:
            return None
        return min(bisect.bisect_right(cumulative, (il - start) / active), len(shares) - 1)

    return tuple(device(il) for il in range(n_layers)), device(n_layers)


def split_of(
    spec: ModelSpec, members: Sequence[Member], n_gpu_layers: int | None, tensor_split: Sequence[float] = ()
) -> tuple[tuple[int, ...], int]:
    """(member index per layer, member index of the output layer); member 0 is the main host."""
    gpus = members[1:]
    if tensor_split:
        shares = list(tensor_split)
    else:
        # a device whose memory is not known (a RAM profile without a size) takes the mean share
        # of the known ones, or all an equal one (llama.cpp asks each device; ggprof cannot)
        known = [m.free_bytes or m.device.memory_available_bytes or m.device.memory_bytes for m in gpus]
        sizes = [float(k) for k in known if k]
        mean = sum(sizes) / len(sizes) if sizes else 1.0
        shares = [float(k) if k else mean for k in known]
    per_layer, output = layer_devices(spec.n_layers, shares, n_gpu_layers)
    return tuple(0 if i is None else i + 1 for i in per_layer), 0 if output is None else output + 1


def member_bytes(
    spec: ModelSpec, per_layer: tuple[int, ...], output: int, n_members: int
) -> tuple[list[int], list[int]]:
    """Weight bytes held and bytes a decoded token reads, per member."""
    held, read = [0] * n_members, [0] * n_members
    for t in spec.tensors:
        decode = int(t.n_bytes * spec.decode_share(t))
        if t.layer is not None:
            m = per_layer[t.layer]
        elif t.name in OUTPUT_LAYER_TENSORS:
            m = output
        elif spec.is_tied_head(t):
            # the input lookup stays on the host; llama.cpp copies a tied table to the output's device
            held[0] += t.n_bytes
            held[output] += t.n_bytes if output else 0
            read[output] += decode
            continue
        else:  # the input lookups (and any other tensor of no layer) stay on the main host
            m = 0
        held[m] += t.n_bytes
        read[m] += decode
    return held, read


def stretches(per_layer: tuple[int, ...], output: int) -> list[tuple[int, tuple[int, ...], bool]]:
    """The devices a token visits in order: (member, its layers, ends with the output layer)."""
    out: list[tuple[int, list[int], bool]] = []
    for il, m in enumerate(per_layer):
        if out and out[-1][0] == m:
            out[-1][1].append(il)
        else:
            out.append((m, [il], False))
    if out and out[-1][0] == output:
        out[-1] = (output, out[-1][1], True)
    else:
        out.append((output, [], True))
    return [(m, tuple(layers), last) for m, layers, last in out]


def chain_time(
    spec: ModelSpec,
    members: Sequence[Member],
    per_layer: tuple[int, ...],
    output: int,
    *,
    depth: int = 0,
    tokens: int = 1,
    outputs: int = 1,
    cache_type_k: str = CACHE_TYPE,
    cache_type_v: str = CACHE_TYPE,
) -> ChainTime:
    """The floor of one step of `tokens` tokens at `depth` (decode: 1 token, 1 output)."""
    held, read = member_bytes(spec, per_layer, output, len(members))
    kv = spec.kv_layer_bytes_at(depth + tokens, cache_type_k, cache_type_v)
    for il, m in enumerate(per_layer):
        read[m] += kv[il] if il < len(kv) else 0
    devices = []
    for i, member in enumerate(members):
        layers = tuple(il for il, m in enumerate(per_layer) if m == i)
        if not layers and i != output and i != 0:
            continue
        bw = member.device.bandwidth_bytes_per_s
        devices.append(
            DeviceTerm(
                member=i,
                layers=layers,
                output=i == output,
                weight_bytes=held[i],
                read_bytes=read[i],
                seconds=read[i] / bw if bw else (0.0 if read[i] < NEGLIGIBLE_BYTES else float("inf")),
            )
        )
    activation = 4 * spec.n_embd * tokens
    mask = 2 * (depth + tokens) * tokens  # f16 KQ mask of the step
    hops = []
    for m, layers, last in stretches(per_layer, output):
        link = members[m].link
        if link is None:
            continue
        sent = activation + mask + 4 * tokens + HOP_COMMAND_BYTES
        returned = 4 * spec.vocab_size * outputs if last else activation
        hops.append(
            Hop(
                member=m,
                layers=layers,
                output=last,
                sent_bytes=sent,
                returned_bytes=returned,
                network_s=link.rtt_s + sent / link.throughput_bytes_per_s + returned / link.download_bytes_per_s,
            )
        )
    return ChainTime(devices=tuple(devices), hops=tuple(hops))


@dataclass(frozen=True, kw_only=True)
class ChainBand:
    """The expected step time from each device's own efficiency band, and every hop's fixed cost."""

    floor_s: float
    fast_s: float
    slow_s: float

    @property
    def expected_s(self) -> float:
        """The point prediction: the middle of the band, in time."""
        return (self.fast_s + self.slow_s) / 2

    def as_band(self, source: str) -> EfficiencyBand:
        """The same as a fraction of the chain's ceiling, the form every backend's band takes."""
        return EfficiencyBand(low=self.floor_s / self.slow_s, high=self.floor_s / self.fast_s, source=source)


def expected_time(
    t: ChainTime, bands: Sequence[EfficiencyBand | None], members: Sequence[Member] = ()
) -> ChainBand | None:
    """None when a device holding layers has no band (its backend is unknown). A device measured
    alone takes its measured speed, within MEASURED_SLACK, instead of its backend's band."""
    fast = slow = 0.0
    for d in t.devices:
        measured = members[d.member].measured if members else None
        if measured is not None and measured.value > 0:
            seconds = d.read_bytes / measured.value
            fast += seconds * (1 - MEASURED_SLACK[0])
            slow += seconds * (1 + MEASURED_SLACK[1])
            continue
        band = bands[d.member]
        if band is None:
            if d.read_bytes > (1 << 20):
                return None
            band = EfficiencyBand(low=1.0, high=1.0, source="")
        fast += d.seconds / band.high
        slow += d.seconds / band.low
    for h in t.hops:
        fast += h.network_s + HOP_OVERHEAD_S[0]
        slow += h.network_s + HOP_OVERHEAD_S[1]
    return ChainBand(floor_s=t.floor_s, fast_s=fast, slow_s=slow)


def graph_bytes(layers: int) -> int:
    """The serialised decode graph of `layers` layers, as GRAPH_COMPUTE sends it."""
    return 12 + layers * (GRAPH_NODES_PER_LAYER * 8 + GRAPH_TENSORS_PER_LAYER * RPC_TENSOR_BYTES)


def graph_resend_s(t: ChainTime, members: Sequence[Member]) -> tuple[int, float]:
    """Bytes and seconds a token would add if every remote stretch sent its graph again."""
    moved, seconds = 0, 0.0
    for h in t.hops:
        link = members[h.member].link
        if link is not None:
            b = graph_bytes(len(h.layers))
            moved += b
            seconds += b / link.throughput_bytes_per_s
    return moved, seconds


def experts_on_host_s(spec: ModelSpec, t: ChainTime, members: Sequence[Member]) -> tuple[int, float]:
    """Round trips and seconds a token would add if a MoE model's experts stayed on the main host
    (`--n-cpu-moe`, `-ot exps=CPU`) inside the remote devices' layers: every such layer sends its
    activation to the host for the experts and back, a round trip each way."""
    if not spec.n_experts:
        return 0, 0.0
    trips, seconds = 0, 0.0
    activation = 4 * spec.n_embd
    for h in t.hops:
        link = members[h.member].link
        if link is not None and h.layers:
            n = 2 * len(h.layers)
            trips += n
            moved = activation / link.throughput_bytes_per_s + activation / link.download_bytes_per_s
            seconds += n * (link.rtt_s + moved)
    return trips, seconds


def dominant(t: ChainTime, members: Sequence[Member]) -> str:
    """Which term sets the pace, in words ("the 1GbE link to 10.0.0.2:50052: 1.05 MB of logits a token")."""

    terms: list[tuple[float, str]] = []
    for d in t.devices:
        m = members[d.member]
        terms.append((d.seconds, f"{m.device.name} ({m.label}): reads {fmt_bytes(d.read_bytes, binary=False)}"))
    for h in t.hops:
        m = members[h.member]
        assert m.link is not None
        what = "logits" if h.output else "activations"
        moved = fmt_bytes(h.sent_bytes + h.returned_bytes, binary=False)
        terms.append((h.network_s, f"the {m.link.name} link to {m.label}: a round trip and {moved} ({what})"))
    seconds, words = max(terms)
    share = seconds / t.floor_s if t.floor_s else 0.0
    return f"{words}, {share:.0%} of the step"


@dataclass(frozen=True, kw_only=True)
class Split:
    """A model over the main host and its rpc-servers: the layer split and one step's terms."""

    members: tuple[Member, ...]
    per_layer: tuple[int, ...]  # member index of each layer (0: the main host's CPU)
    output: int  # member index of the output layer
    decode: ChainTime  # one token at the prediction's depth
    band: ChainBand | None  # None: a device with layers has no known backend band
    prefill_floor_s: float | None  # the whole prompt (None: a device has no peak FLOP/s)
    prefill_expected_s: float | None = None  # from devices measured alone (None: not all were)
    prompt: int = 0

    @property
    def prefill_expected_tok_s(self) -> float | None:
        """The prompt speed expected from devices measured alone (shown beside the measured one;
        not a band the verdict uses: prompts vary too much between runs on a shared machine)."""
        return self.prompt / self.prefill_expected_s if self.prefill_expected_s and self.prompt else None

    pace: str  # which term sets the decode pace, in words
    # what a token would add (bytes or round trips, seconds) if each remote stretch re-sent its
    # graph (a build without graph reuse), or if a MoE model's experts stayed on the main host
    graph_resend: tuple[int, float] = (0, 0.0)
    experts_on_host: tuple[int, float] = (0, 0.0)

    def layers_of(self, member: int) -> int:
        return sum(1 for m in self.per_layer if m == member)


def params_shares(spec: ModelSpec, per_layer: tuple[int, ...], output: int, n: int) -> list[float]:
    params = [0] * n
    for t in spec.tensors:
        if t.layer is not None:
            params[per_layer[t.layer]] += t.n_elements
        elif t.name in OUTPUT_LAYER_TENSORS or spec.is_tied_head(t):
            params[output] += t.n_elements
    total = sum(params) or 1
    return [p / total for p in params]


def prefill_floor(
    spec: ModelSpec,
    members: Sequence[Member],
    per_layer: tuple[int, ...],
    output: int,
    flops: float,
    *,
    prompt: int,
    n_ubatch: int,
    depth: int = 0,
) -> float | None:
    """The prompt's floor: per micro-batch, each device's larger of its share of the FLOPs at
    its peak and reading its weights once, plus every hop (activations of the whole micro-batch)."""
    if not prompt:
        return None
    shares = params_shares(spec, per_layer, output, len(members))
    n_ub = -(-prompt // n_ubatch)
    step = chain_time(spec, members, per_layer, output, depth=depth, tokens=min(prompt, n_ubatch), outputs=1)
    total = step.network_s * n_ub
    for d in step.devices:
        device = members[d.member].device
        peak = device.peak_flops.value if device.peak_flops else None
        if shares[d.member] > 1e-3 and not peak:
            return None
        compute = flops * shares[d.member] / peak if peak else 0.0
        bw = device.bandwidth_bytes_per_s or float("inf")
        total += max(compute, d.weight_bytes * n_ub / bw)
    return total


def prefill_expected(
    spec: ModelSpec, members: Sequence[Member], per_layer: tuple[int, ...], output: int, *, prompt: int, n_ubatch: int
) -> float | None:
    """The prompt's time from each device's own prompt speed measured alone (its share of the
    parameters) plus every hop of every micro-batch; None unless every device holding layers
    was measured."""
    if not prompt:
        return None
    shares = params_shares(spec, per_layer, output, len(members))
    total = 0.0
    for i, m in enumerate(members):
        if shares[i] <= 1e-3:
            continue
        if m.measured_prefill is None or m.measured_prefill.value <= 0:
            return None
        total += shares[i] * prompt / m.measured_prefill.value
    step = chain_time(spec, members, per_layer, output, tokens=min(prompt, n_ubatch), outputs=1)
    mid = sum(HOP_OVERHEAD_S) / 2
    return total + (step.network_s + mid * len(step.hops)) * -(-prompt // n_ubatch)


def plan_split(
    spec: ModelSpec,
    members: Sequence[Member],
    bands: Sequence[EfficiencyBand | None],
    *,
    n_gpu_layers: int | None,
    tensor_split: Sequence[float] = (),
    depth: int = 0,
    prompt: int = 0,
    n_ubatch: int = 512,
    prefill_flops: float = 0.0,
    cache_type_k: str = CACHE_TYPE,
    cache_type_v: str = CACHE_TYPE,
) -> Split:
    per_layer, output = split_of(spec, members, n_gpu_layers, tensor_split)
    decode = chain_time(
        spec, members, per_layer, output, depth=depth, cache_type_k=cache_type_k, cache_type_v=cache_type_v
    )
    return Split(
        members=tuple(members),
        per_layer=per_layer,
        output=output,
        decode=decode,
        band=expected_time(decode, bands, members),
        prefill_floor_s=prefill_floor(
            spec, members, per_layer, output, prefill_flops, prompt=prompt, n_ubatch=n_ubatch, depth=depth
        ),
        pace=dominant(decode, members),
        graph_resend=graph_resend_s(decode, members),
        experts_on_host=experts_on_host_s(spec, decode, members),
        prefill_expected_s=prefill_expected(spec, members, per_layer, output, prompt=prompt, n_ubatch=n_ubatch),
        prompt=prompt,
    )

"""A model split over machines with llama.cpp's RPC backend: the remote devices (declared as
profiles with a link, or found and measured through llama.cpp's RPC client), and the
prediction over the split that `predict --rpc-device`, `profile --rpc` and `check` judge by."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ggprof.errors import BadInputError, NoBandwidthError
from ggprof.figures import Figure
from ggprof.machine.device import Device, EfficiencyBand
from ggprof.machine.host import describe_host
from ggprof.machine.links import Link, named_link, parse_link
from ggprof.machine.profiles import ProfileDB
from ggprof.machine.rpc import RpcServer, find_library, hello, probe_server
from ggprof.machine.target import DeviceChoice, device_from_profile, resolve_target
from ggprof.model.spec import ModelSpec
from ggprof.physics.roofline import PredictInputs, Prediction
from ggprof.physics.rpc import Member
from ggprof.physics.split import predict_over
from ggprof.pipelines.extensions import Extensions

if TYPE_CHECKING:
    from ggprof.bench.results import BenchParams
    from ggprof.engines import Engine
    from ggprof.machine.facts import HostFacts

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True, kw_only=True)
class RpcChoice:
    """`--rpc HOST:PORT,...`, `--rpc-device PROFILE[@LINK]` (repeatable), `--tensor-split A,B`."""

    endpoints: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    tensor_split: tuple[float, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.endpoints or self.devices)


@dataclass(frozen=True, kw_only=True)
class RemoteSpec:
    """`--rpc-device PROFILE[@LINK]`: what one remote device is and how it is connected."""

    profile_id: str | None  # None: this host's own device (an rpc-server on this machine)
    link: Link | None  # None: measured (with --rpc) or unknown


def parse_remote(text: str, profiles: ProfileDB) -> RemoteSpec:
    """`rtx-3060@2.5GbE`, `this-host@localhost`, `mi50-32gb@1.2GB/s,0.1ms`, `rtx-3060` (link measured)."""
    device, _, link = text.partition("@")
    device = device.strip()
    if not device:
        raise BadInputError(f"--rpc-device {text[:80]!r}: give PROFILE[@LINK], e.g. rtx-3060@2.5GbE")
    profile_id = None if device in {"this-host", "host"} else device
    if profile_id is not None:
        profiles.get(profile_id)  # a clear error for an unknown profile
    return RemoteSpec(profile_id=profile_id, link=parse_link(link) if link else None)


def remote_members(
    specs: Sequence[RemoteSpec],
    servers: Sequence[RpcServer],
    profiles: ProfileDB,
    host_cpu: Device | None,
) -> tuple[Member, ...]:
    """One member per remote device: servers found with --rpc (in order), or the declared
    devices alone (planning). A declared link wins over a measured one: the run is judged
    against what the user says the network is."""
    count = len(servers) or len(specs)
    if servers and specs and len(specs) not in (1, len(servers)):
        raise BadInputError(f"--rpc-device: give one for each of the {len(servers)} --rpc servers, or one for all")
    out = []
    for i in range(count):
        spec = specs[i] if len(specs) > 1 else (specs[0] if specs else None)
        server = servers[i] if servers else None
        label = server.endpoint if server else f"remote {i + 1}"
        device = _device(spec, server, profiles, host_cpu)
        link = (spec.link if spec else None) or (server.link if server else None)
        if link is None and server is not None and server.endpoint.rpartition(":")[0] in LOCAL_HOSTS:
            link = named_link("localhost")
        free = server.devices[0].free_bytes if server and server.devices else None
        if device is None or link is None:
            what = "the device" if device is None else "the link"
            raise BadInputError(
                f"{label}: {what} behind this rpc-server is not known: pass --rpc-device PROFILE@LINK "
                "(e.g. rtx-3060@2.5GbE; `this-host` for an rpc-server on this machine)"
            )
        out.append(Member(label=label, device=device, link=link, free_bytes=free))
    return tuple(out)


def _device(
    spec: RemoteSpec | None, server: RpcServer | None, profiles: ProfileDB, host_cpu: Device | None
) -> Device | None:
    if spec is not None and spec.profile_id is not None:
        return device_from_profile(profiles.get(spec.profile_id))
    local = server is not None and server.endpoint.rpartition(":")[0] in LOCAL_HOSTS
    if (spec is not None or local) and host_cpu is not None:
        return host_cpu  # an rpc-server on this machine runs ggml's CPU backend on this host
    return None


def band_for(ext: Extensions, device: Device, spec: ModelSpec, warnings: list[str]) -> EfficiencyBand | None:
    """A device's band from its backend plugin (None: no plugin knows it; a plugin that fails
    is named in `warnings`)."""
    backend = ext.backends.get(device.backend)
    if backend is None:
        return None
    try:
        band: EfficiencyBand = backend.efficiency_band(spec, device)
        return band
    except Exception as e:  # a backend plugin's bug: the split has no band, the ceilings stand
        warnings.append(f"the {backend.name} backend plugin failed computing its band: {type(e).__name__}: {e}")
        return None


def predict_split(
    spec: ModelSpec,
    host_cpu: Device,
    remote: Sequence[Member],
    inputs: PredictInputs,
    ext: Extensions,
    *,
    local_gpu: Device | None = None,
    tensor_split: Sequence[float] = (),
) -> Prediction:
    """The prediction for `spec` over the main host (its CPU, and a local GPU after the RPC
    devices, as llama.cpp orders them) and the remote members: each device's band from its
    backend plugin, the split itself from physics (ggprof.physics.rpc.predict_over)."""
    members = [Member(label="this host", device=host_cpu), *remote]
    if local_gpu is not None:
        members.append(Member(label="this host", device=local_gpu))
    warnings: list[str] = []
    bands = [band_for(ext, m.device, spec, warnings) for m in members]
    p = predict_over(spec, members, bands, inputs, tensor_split=tensor_split)
    return replace(p, warnings=tuple(warnings)) if warnings else p


def probe_servers(endpoints: Sequence[str], near: Path | None = None, measure: bool = True) -> tuple[RpcServer, ...]:
    """Each rpc-server greeted and (with `measure`) its link measured by llama.cpp's client,
    when its library is here."""
    library = find_library(near) if measure else None
    # every HELLO at once (each bounded as a whole), then each link measured alone: transfers
    # to several servers at once would share this host's network
    with ThreadPoolExecutor(max_workers=min(len(endpoints), 16) or 1) as pool:
        versions = list(pool.map(hello, endpoints))
    return tuple(probe_server(e, library, version=v) for e, v in zip(endpoints, versions, strict=True))


@dataclass(frozen=True, kw_only=True)
class SplitSetup:
    """The machines of a split: the main host (its CPU; a GPU --device is a local device after
    the RPC devices, as llama.cpp orders them) and the remote members."""

    host_cpu: Device
    remote: tuple[Member, ...]
    local_gpu: Device | None
    description: str

    def chain(self) -> list[Member]:
        """The members in llama.cpp's device order, the main host's CPU first."""
        chain = [Member(label="this host", device=self.host_cpu), *self.remote]
        if self.local_gpu is not None:
            chain.append(Member(label="this host", device=self.local_gpu))
        return chain


def split_setup(choice: DeviceChoice, ext: Extensions, rpc: RpcChoice) -> SplitSetup:
    """The split `--rpc`/`--rpc-device` describe, with this host (or `choice`) as the main host."""
    host = describe_host(ext.backends.values(), ext.profiles, measure=False)
    target = resolve_target(choice, profiles=ext.profiles, host=host) if not choice.needs_host else None
    host_cpu = host.cpu
    if target is not None and not target.device.is_discrete_gpu:
        host_cpu = target.device
    if host_cpu is None:
        raise NoBandwidthError("the main host's CPU is not known: pass --device ID")
    remote = split_members(rpc, probe_servers(rpc.endpoints), ext.profiles, host.cpu)
    local_gpu = target.device if target is not None and target.device.is_discrete_gpu else None
    main = f"main host {target.description}" if target else "main host: this host"
    links = ", ".join(f"{m.device.name} at {m.label} over {m.link.name if m.link else '?'}" for m in remote)
    return SplitSetup(host_cpu=host_cpu, remote=remote, local_gpu=local_gpu, description=f"{main}; RPC: {links}")


def split_members(
    choice: RpcChoice, servers: Sequence[RpcServer], profiles: ProfileDB, host_cpu: Device | None
) -> tuple[Member, ...]:
    specs = [parse_remote(d, profiles) for d in choice.devices]
    return remote_members(specs, servers, profiles, host_cpu)


def is_local(member: Member) -> bool:
    return member.label.rpartition(":")[0] in LOCAL_HOSTS


def measure_local_devices(
    spec: ModelSpec, params: BenchParams, engine: Engine, facts: HostFacts, members: Sequence[Member]
) -> tuple[Member, ...]:
    """An rpc-server on this host runs ggml's CPU backend here: decode the same model here without
    RPC (same engine, same threads) and give those members that measured speed."""
    local = [i for i, m in enumerate(members) if is_local(m) and m.device.backend == "cpu"]
    if not local:
        return tuple(members)
    alone = replace(params, rpc=(), tensor_split=(), n_depth=(0,), probe_threads=None, n_gpu_layers=0)
    result = engine.run(spec, alone, facts)
    row, pp = result.row("tg", 0), result.row("pp", 0)
    if row is None or not row.avg_ts:
        return tuple(members)
    speed = Figure(
        row.avg_ts * spec.decode_bytes_per_token,
        "measured",
        f"this host decoding the model alone without RPC at {params.n_threads} threads: tg{row.n_gen} "
        f"{row.avg_ts:.3g} tok/s (an rpc-server with other -t runs at another speed)",
    )
    prompt = (
        Figure(pp.avg_ts, "measured", f"this host's pp{pp.n_prompt} without RPC: {pp.avg_ts:.3g} tok/s")
        if pp is not None and pp.avg_ts
        else None
    )
    return tuple(
        replace(m, measured=speed, measured_prefill=prompt) if i in local else m for i, m in enumerate(members)
    )

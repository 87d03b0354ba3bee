"""Which device a command reasons about: this host, a profile (`--device ID`), or user-given
figures (`--bandwidth`, `--flops`). Every figure keeps its source."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ggprof.errors import BadInputError, NoBandwidthError
from ggprof.figures import Figure
from ggprof.machine.cache import fingerprint
from ggprof.machine.device import Device, with_memory
from ggprof.machine.host import HostReport
from ggprof.machine.links import MAX_LINK_CHARS, parse_link
from ggprof.machine.profiles import Profile, ProfileDB
from ggprof.runfacts import MAX_SPLIT_DEVICES, device_list
from ggprof.runfacts.fact import DEVICE_NAME
from ggprof.units import clean_name


@dataclass(frozen=True, kw_only=True)
class DeviceChoice:
    """What the user asked for: a profile id and/or figures that override it (parsed at the CLI)."""

    device_id: str | None = None
    bandwidth: Figure | None = None  # bytes/s
    flops: Figure | None = None  # FLOP/s
    profile_ids: tuple[str, ...] = ()  # `--device a,b`: several GPUs sharing the model, in order
    devices: tuple[str, ...] = ()  # `--device CUDA0,CUDA1` (-dev): llama.cpp's device names
    device_profiles: tuple[tuple[str, str], ...] = ()  # --device-profile: (device or "*", profile id)

    @property
    def needs_host(self) -> bool:
        """Without a profile or a bandwidth, the device is this host's."""
        no_gpus = all(d == "none" for d in self.devices) and not self.device_profiles
        return self.device_id is None and self.bandwidth is None and no_gpus

    def describe(self) -> str:
        if len(self.profile_ids) > 1:
            return ",".join(self.profile_ids)
        if self.devices or self.device_profiles:
            named = dict(self.device_profiles)
            if not self.devices:
                return "each row's devices, " + ",".join(f"{d}={p}" for d, p in self.device_profiles).replace(
                    "*=", "all "
                )
            return ",".join(f"{d}={named.get(d, named.get('*', '?'))}" for d in self.devices)
        if self.device_id:
            return self.device_id
        return self.bandwidth.detail if self.bandwidth else "this host"


@dataclass(frozen=True, kw_only=True)
class Target:
    device: Device
    cpu: Device | None  # the host CPU, for layers not offloaded (None when unknown)
    description: str  # where the device and its figures came from, in words
    host_fingerprint: str | None = None  # the device is this host's (its cached figures' key)
    # several GPUs sharing the model, in llama.cpp's order: (its device name, the device)
    gpus: tuple[tuple[str, Device], ...] = ()


def device_from_profile(p: Profile) -> Device:
    peak, vector, int_dot = p.flops_figures()
    return Device(
        id=p.id,
        name=p.name,
        backend=p.backends[0],
        memory_bytes=p.memory_bytes,
        memory_source=f"profile {p.id}" if p.memory_gb else None,
        bandwidth=Figure(p.bandwidth_bytes_per_s, "profile", p.id),
        peak_flops=peak,
        vector_flops=vector,
        int_dot_ops=int_dot,
        profile_id=p.id,
        unified_memory=p.kind == "soc" or bool(p.integrated),
        link=host_link(p),
        architecture=p.architecture,
        device_class=p.device_class,
    )


# A discrete GPU's link to its host when its profile does not give one: PCIe 4.0 x16 (16 GT/s x
# 128b/130b = 1.969 GB/s a lane, one direction; PCI-SIG PCIe 4.0 base specification)
DEFAULT_HOST_LINK_GBS = 31.5


def host_link(p: Profile) -> Figure | None:
    """A discrete GPU's link to its host RAM: its profile's, else PCIe 4.0 x16 (labelled)."""
    if p.kind != "gpu" or p.integrated:
        return None
    if p.host_link_gbs:
        return Figure(p.host_link_gbs * 1e9, "profile", f"{p.id}: {p.sources.get('host_link_gbs', 'host link')}")
    return Figure(DEFAULT_HOST_LINK_GBS * 1e9, "theoretical", "PCIe 4.0 x16 assumed (the profile names no link)")


def parse_device(text: str, is_profile: Callable[[str], bool]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """--device's value as (profile ids, llama.cpp device names): `rtx-3090`, `rtx-3090,rtx-3060`
    (several GPUs), or llama.cpp's device list (`CUDA0,CUDA1`, `Vulkan0`, `RPC0[host:5052]`,
    `none`). A list every name of which is a profile is profiles, even where llama.cpp would
    read it as devices; ValueError for a mix."""
    items = tuple(i.strip() for i in text.split(",")) if text.strip() else ()
    if not items or any(not i for i in items) or len(items) > MAX_SPLIT_DEVICES:
        raise ValueError(f"{clean_name(text, 60)!r} is not a profile id or a llama.cpp device list (CUDA0,CUDA1)")
    if device_list(text) and not all(is_profile(i) for i in items):
        return (), device_list(text) or ()
    if any(DEVICE_NAME.fullmatch(i) for i in items) and not all(is_profile(i) for i in items):
        raise ValueError(
            f"{clean_name(text, 60)!r} mixes profiles and llama.cpp devices: give profiles (rtx-3090,rtx-3060), or "
            "devices (CUDA0,CUDA1) with --device-profile CUDA0=rtx-3090,CUDA1=rtx-3060"
        )
    return items, ()


def gpus_of(choice: DeviceChoice, profiles: ProfileDB, devices: tuple[str, ...] = ()) -> tuple[tuple[str, Device], ...]:
    """The GPUs sharing the model, each with llama.cpp's name for it: `devices` (a run's -dev, or
    --device's llama.cpp list), each with its --device-profile (or the profile at its place in
    --device a,b), else --device's profiles named as llama.cpp numbers a backend's devices
    (CUDA0, CUDA1). () for one device or none."""
    names = tuple(d for d in (devices or choice.devices) if d != "none")
    if not names:
        if len(choice.profile_ids) < 2:
            return ()
        found = [device_from_profile(profiles.get(p)) for p in choice.profile_ids]
        counts: dict[str, int] = {}
        out = []
        for d in found:
            prefix = BACKEND_DEVICE_PREFIX.get(d.backend, d.backend.upper())
            out.append((f"{prefix}{counts.get(prefix, 0)}", d))
            counts[prefix] = counts.get(prefix, 0) + 1
        return tuple(out)
    mapped = dict(choice.device_profiles)
    chosen = []
    for i, name in enumerate(names):
        profile = mapped.get(name) or (choice.profile_ids[i] if len(choice.profile_ids) == len(names) else None)
        profile = profile or mapped.get("*") or (choice.profile_ids[0] if len(choice.profile_ids) == 1 else None)
        if profile is None:
            raise BadInputError(
                f"which device is {name}? give --device-profile {name}=PROFILE (`ggprof profiles` lists them)"
            )
        profile, at, link = profile.partition("@")
        device = device_from_profile(profiles.get(profile))
        if at:
            if not name.startswith("RPC["):
                raise BadInputError(
                    f"--device-profile {name}={profile}@{link[:MAX_LINK_CHARS]}: a network link is an RPC device's "
                    "(RPC[host:port]=PROFILE@LINK)"
                )
            device = replace(device, network=parse_link(link))
        chosen.append((name, device))
    return tuple(chosen)


# llama.cpp's device names by backend (ggml_backend_dev_name: "CUDA0", "ROCm0", "Vulkan0", "SYCL0", "MTL0")
BACKEND_DEVICE_PREFIX = {"cuda": "CUDA", "rocm": "ROCm", "vulkan": "Vulkan", "sycl": "SYCL", "metal": "MTL"}


def resolve_target(
    choice: DeviceChoice,
    *,
    profiles: ProfileDB,
    host: HostReport | None,
    backend: str | None = None,
    devices: tuple[str, ...] = (),
) -> Target:
    """The device to reason about. Without --device/--bandwidth: this host's device of
    `backend` (default: its first GPU, else its CPU), with its cached measurement when
    there is one. `host` (when given) also supplies the CPU for layers not offloaded. Several
    GPUs (--device a,b; a llama.cpp device list, or a run's `devices`, with their profiles) are
    the target's `gpus`, the first its device."""
    gpus = gpus_of(choice, profiles, devices)
    if len(gpus) > 1:
        cpu = host.cpu if host is not None else None
        named = ", ".join(f"{label} = profile {d.profile_id}" for label, d in gpus)
        return Target(device=gpus[0][1], cpu=cpu, description=named, gpus=gpus)
    if gpus:  # one llama.cpp device: its profile's
        choice = replace(choice, device_id=gpus[0][1].profile_id, devices=())
    elif any(d == "none" for d in (devices or choice.devices)) and choice.device_id is None:
        choice, backend = replace(choice, devices=()), "cpu"  # -dev none: every layer on the CPU
    if choice.device_id is not None:
        device = device_from_profile(profiles.get(choice.device_id))
        description = f"profile {choice.device_id}"
    elif choice.bandwidth is None:
        if host is None:
            raise NoBandwidthError("no bandwidth is known: pass --device ID or --bandwidth GB/s")
        device, description = host_device(host, backend)
    else:
        device = Device(id="user", name="user-given device", backend=backend or "cpu")
        description = "user-given figures"
    if choice.bandwidth is not None:
        device = replace(device, bandwidth=choice.bandwidth)
    if choice.flops is not None:  # the user's peak is the ceiling: no build moves it to other units
        device = replace(device, peak_flops=choice.flops, vector_flops=None, int_dot_ops=None)
    if backend is not None:
        device = replace(device, backend=backend)
    if device.bandwidth is None:
        raise NoBandwidthError(
            f"no bandwidth is known for {device.name!r}: run `ggprof host` to measure it, "
            "or pass --device ID or --bandwidth GB/s"
        )
    cpu = host.cpu if host is not None and device.is_discrete_gpu else None
    here = fingerprint(host.facts) if host is not None and choice.needs_host else None
    return Target(device=device, cpu=cpu, description=description, host_fingerprint=here)


def host_device(report: HostReport, backend: str | None = None) -> tuple[Device, str]:
    """This host's device of `backend` (default: its first GPU, else its CPU), in words."""
    if backend is not None:
        device = report.device_of(backend)
        if device is None:
            raise NoBandwidthError(
                f"no bandwidth is known for a {backend} device: none was detected on this host; "
                "pass --device ID or --bandwidth GB/s"
            )
    else:
        gpus = [d for d in report.devices if d.backend != "cpu"]
        device = gpus[0] if gpus else report.cpu
    if device is None:
        raise NoBandwidthError(
            "no bandwidth is known: no device detected on this host; pass --device ID or --bandwidth"
        )
    return device, describe_host_device(report, device)


def describe_host_device(report: HostReport, device: Device) -> str:
    fig = device.bandwidth
    if fig is not None and fig.source == "measured" and report.measured_at:
        if not report.from_cache:
            return f"this host ({device.id}), bandwidth {fig.describe()} (measured now)"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(report.measured_at))
        return f"this host ({device.id}), bandwidth measured {when} (cached)"
    if fig is not None:
        return f"this host ({device.id}), bandwidth {fig.describe()} (not measured: run `ggprof host`)"
    return f"this host ({device.id})"


def parse_tflops(text: str) -> Figure:
    """--flops: TFLOP/s as a plain number -> a user-given FLOP/s figure."""
    try:
        value = float(text)
    except ValueError:
        raise BadInputError(f"cannot read --flops {text!r}: give TFLOP/s as a number, e.g. 82.6") from None
    if not 0 < value <= MAX_TFLOPS:
        raise BadInputError(f"--flops {text!r} TFLOP/s is outside 0 .. {MAX_TFLOPS:g}: check the units")
    return Figure(value * 1e12, "user", f"--flops {text}")


MAX_TFLOPS = 100_000.0  # 100 PFLOP/s: nothing a GGUF runs on comes close


def with_spill(target: Target, spill: str | None) -> Target:
    """The target with how its CUDA GPUs' driver serves an allocation over their memory (`spill`:
    physics.placement.SPILLS), each GPU of a split too; another backend's device keeps none, as no
    other driver spills so."""
    if spill is None:
        return target

    def told(d: Device) -> Device:
        return replace(d, spill=spill) if d.is_discrete_gpu and d.backend == "cuda" else d

    return replace(target, device=told(target.device), gpus=tuple((n, told(d)) for n, d in target.gpus))


def with_memories(
    target: Target, ram_bytes: int | None, gpu_bytes: int | None, ram_bandwidth: Figure | None = None
) -> Target:
    """The target with the user's RAM and GPU memory sizes (--memory/--ram, --gpu-memory) and the
    RAM's bandwidth (--ram-bandwidth): on a discrete GPU the RAM is its host's, which holds what
    is not offloaded; elsewhere the device's own memory is the RAM. A given figure wins over the
    host's measured one."""
    device, cpu = target.device, target.cpu
    if not device.is_discrete_gpu:
        device = with_memory(device, ram_bytes, "--memory")
        if ram_bandwidth is not None and device.backend == "cpu":
            device = replace(device, bandwidth=ram_bandwidth)
        return replace(target, device=device)
    device = with_memory(device, gpu_bytes, "--gpu-memory")
    if cpu is None and (ram_bytes is not None or ram_bandwidth is not None):
        cpu = Device(id="ram", name="host RAM", backend="cpu")
    if cpu is not None:
        cpu = with_memory(cpu, ram_bytes, "--memory")
        cpu = replace(cpu, bandwidth=ram_bandwidth) if ram_bandwidth is not None else cpu
    return replace(target, device=device, cpu=cpu)

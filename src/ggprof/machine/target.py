"""Which device a command reasons about: this host, a profile (`--device ID`), or user-given
figures (`--bandwidth`, `--flops`). Every figure keeps its source."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ggprof.errors import BadInputError, NoBandwidthError
from ggprof.figures import Figure
from ggprof.machine.cache import fingerprint
from ggprof.machine.device import Device, with_memory
from ggprof.machine.host import HostReport
from ggprof.machine.profiles import Profile, ProfileDB


@dataclass(frozen=True, kw_only=True)
class DeviceChoice:
    """What the user asked for: a profile id and/or figures that override it (parsed at the CLI)."""

    device_id: str | None = None
    bandwidth: Figure | None = None  # bytes/s
    flops: Figure | None = None  # FLOP/s

    @property
    def needs_host(self) -> bool:
        """Without a profile or a bandwidth, the device is this host's."""
        return self.device_id is None and self.bandwidth is None

    def describe(self) -> str:
        if self.device_id:
            return self.device_id
        return self.bandwidth.detail if self.bandwidth else "this host"


@dataclass(frozen=True, kw_only=True)
class Target:
    device: Device
    cpu: Device | None  # the host CPU, for layers not offloaded (None when unknown)
    description: str  # where the device and its figures came from, in words
    host_fingerprint: str | None = None  # the device is this host's (its cached figures' key)


def device_from_profile(p: Profile) -> Device:
    peak, vector, int_dot = p.flops_figures()
    return Device(
        id=p.id,
        name=p.name,
        backend=p.backends[0],
        memory_bytes=int(p.memory_gb * 1e9) if p.memory_gb else None,
        memory_source=f"profile {p.id}" if p.memory_gb else None,
        bandwidth=Figure(p.bandwidth_bytes_per_s, "profile", p.id),
        peak_flops=peak,
        vector_flops=vector,
        int_dot_ops=int_dot,
        profile_id=p.id,
        unified_memory=p.kind == "soc",
        architecture=p.architecture,
        device_class=p.device_class,
    )


def resolve_target(
    choice: DeviceChoice, *, profiles: ProfileDB, host: HostReport | None, backend: str | None = None
) -> Target:
    """The device to reason about. Without --device/--bandwidth: this host's device of
    `backend` (default: its first GPU, else its CPU), with its cached measurement when
    there is one. `host` (when given) also supplies the CPU for layers not offloaded."""
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

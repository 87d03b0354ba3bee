"""Which device a command reasons about: this host, a profile (`--device ID`), or user-given
figures (`--bandwidth`, `--flops`). Every figure keeps its source."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ggprof.backend import Device, EfficiencyBand
from ggprof.errors import BadInputError
from ggprof.figures import Figure
from ggprof.model import ModelSpec
from ggprof.profiles import Profile, get_profile
from ggprof.units import parse_bandwidth

MAX_TFLOPS = 100_000.0  # 100 PFLOP/s: nothing a GGUF runs on comes close


@dataclass(frozen=True)
class Target:
    device: Device
    cpu: Device | None  # the host CPU, for layers not offloaded (None when unknown)
    description: str  # where the device and its figures came from, in words


def device_from_profile(p: Profile) -> Device:
    backend = p.backends[0]
    return Device(
        id=p.id, name=p.name, backend=backend,
        memory_bytes=int(p.memory_gb * 1e9) if p.memory_gb else None,
        memory_source=f"profile {p.id}" if p.memory_gb else None,
        bandwidth=Figure(p.bandwidth_bytes_per_s, "profile", p.id),
        peak_flops=Figure(p.peak_flops, "profile", p.id) if p.peak_flops else None,
        profile_id=p.id, unified_memory=p.kind == "soc",
    )  # fmt: skip


def parse_flops(text: str) -> float:
    """TFLOP/s as a plain number -> FLOP/s."""
    try:
        value = float(text)
    except ValueError:
        raise BadInputError(f"cannot read --flops {text!r}: give TFLOP/s as a number, e.g. 82.6") from None
    if not 0 < value <= MAX_TFLOPS:
        raise BadInputError(f"--flops {text!r} TFLOP/s is outside 0 .. {MAX_TFLOPS:g}: check the units")
    return value * 1e12


def resolve_target(
    device_id: str | None = None,
    bandwidth: str | None = None,
    flops: str | None = None,
    backend: str | None = None,
    need_host_cpu: bool = False,
) -> Target:
    """The device to reason about. Without --device/--bandwidth: this host, with its cached
    measurement when there is one, else its theoretical or profile figure."""
    host_cpu = None
    if device_id is None or need_host_cpu:
        host_cpu, host_device, host_note = _this_host(backend if bandwidth is None else None)
    if device_id is not None:
        device = device_from_profile(get_profile(device_id))
        description = f"profile {device_id}"
    elif bandwidth is None:
        device, description = host_device, host_note
    else:
        device = Device("user", "user-given device", backend or "cpu", None, None, None, None)
        description = "user-given figures"
    if bandwidth is not None:
        try:
            value = parse_bandwidth(bandwidth)
        except ValueError as e:
            raise BadInputError(str(e)) from None
        device = replace(device, bandwidth=Figure(value, "user", f"--bandwidth {bandwidth}"))
    if flops is not None:
        device = replace(device, peak_flops=Figure(parse_flops(flops), "user", f"--flops {flops}"))
    if backend is not None:
        device = replace(device, backend=backend)
    if device.bandwidth is None:
        raise BadInputError(
            f"no bandwidth is known for {device.name!r}: run `ggprof host` to measure it, "
            "or pass --device ID or --bandwidth GB/s"
        )
    return Target(device, host_cpu if device.backend != "cpu" else None, description)


def _this_host(backend: str | None = None) -> tuple[Device | None, Device, str]:
    """This host's CPU, and its device of `backend` (default: its first GPU, else its CPU)."""
    from ggprof.host import describe_host

    report = describe_host(measure=False)
    cpu = report.cpu
    if backend is not None:
        device = next((d for d in report.devices if d.backend == backend), None)
        if device is None:
            raise BadInputError(
                f"no bandwidth is known for a {backend} device: none was detected on this host; "
                "pass --device ID or --bandwidth GB/s"
            )
    else:
        gpus = [d for d in report.devices if d.backend != "cpu"]
        device = gpus[0] if gpus else cpu
    if device is None:
        raise BadInputError("no bandwidth is known: no device detected on this host; pass --device ID or --bandwidth")
    fig = device.bandwidth
    if fig is not None and fig.source == "measured" and report.measured_at:
        import time

        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(report.measured_at))
        note = f"this host ({device.id}), bandwidth measured {when} (cached)"
    elif fig is not None:
        note = f"this host ({device.id}), bandwidth {fig.describe()} (not measured: run `ggprof host`)"
    else:
        note = f"this host ({device.id})"
    return cpu, device, note


def efficiency_band(model: ModelSpec | None, device: Device) -> EfficiencyBand | None:
    """The band the device's backend plugin gives; None for a backend no plugin knows."""
    from ggprof.plugins import backends

    b = backends().get(device.backend)
    return b.efficiency_band(model, device) if b else None

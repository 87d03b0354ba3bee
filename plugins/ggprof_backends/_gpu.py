"""Shared by the GPU plugins: turn a detected name into a Device, filled from its profile."""

from __future__ import annotations

from ggprof.backend import Device
from ggprof.figures import Figure
from ggprof.profiles import match_profile


def gpu_device(
    backend: str,
    index: int,
    name: str,
    memory_bytes: int | None,
    bandwidth: Figure | None = None,
    gpu_cores: int | None = None,
    unified_memory: bool = False,
    memory_available_bytes: int | None = None,
    notes: tuple[str, ...] = (),
) -> Device:
    """A device with its own figures first, profile figures (labelled) where it has none."""
    profile, ambiguity = match_profile(name, gpu_cores, kinds=("gpu", "soc"))
    all_notes = notes + ((ambiguity,) if ambiguity else ())
    if bandwidth is None and profile is not None:
        bandwidth = Figure(profile.bandwidth_bytes_per_s, "profile", profile.id)
    peak = Figure(profile.peak_flops, "profile", profile.id) if profile and profile.peak_flops else None
    memory_source = "os" if memory_bytes else None
    if memory_bytes is None and profile is not None and profile.memory_gb:
        memory_bytes, memory_source = int(profile.memory_gb * 1e9), f"profile {profile.id}"
    return Device(
        id=f"{backend}:{index}",
        name=name,
        backend=backend,
        memory_bytes=memory_bytes,
        memory_source=memory_source,
        bandwidth=bandwidth,
        peak_flops=peak,
        profile_id=profile.id if profile else None,
        unified_memory=unified_memory,
        memory_available_bytes=memory_available_bytes,
        notes=all_notes,
    )

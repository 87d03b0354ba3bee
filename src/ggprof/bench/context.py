"""RunContext: the circumstances of a measured run, which the verdicts need to judge it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ggprof.machine.device import BuildFacts
from ggprof.units import clean_name

if TYPE_CHECKING:
    from ggprof.machine.facts import HostFacts
    from ggprof.machine.load import Contention

UNKNOWN_PLACEMENT = "unknown"  # backends_used when the engine cannot tell where a run ran (a remote server)


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What was true while a run was measured (or what a report says about it)."""

    backends_used: tuple[str, ...]  # llama.cpp backends that held layers: ("cpu",), ("cuda", "cpu")
    engine: str = "python"  # what ran llama.cpp: python, llama-bench, server (ggprof.engines)
    build_commit: str | None = None  # llama.cpp's commit and build number, when the engine says
    build_number: int | None = None
    matrix_cores: str | None = None  # what llama.cpp's Vulkan banner said of them (none, KHR_coopmat, NV_coopmat2)
    int_dot: bool | None = None  # what that banner said of int8 dot products (`int dot: 1`)
    vulkan_driver: str | None = None  # the driver that banner names (radv, AMD open-source driver, NVIDIA)
    rocblas_use_hipblaslt: str | None = None  # ROCm: the run's ROCBLAS_USE_HIPBLASLT ("1", "0", "unset")
    sycl_f16: bool | None = None  # SYCL: whether the build had GGML_SYCL_F16 (its stderr's `Build with Macros`)
    sycl_reorder: bool | None = None  # SYCL: whether the run reordered quantized weights (GGML_SYCL_ENABLE_OPT)
    flash_attn: bool | None = None  # whether the run used flash attention (None: llama.cpp's `auto`, or not known)
    n_ubatch: int | None = None  # the physical batch a prompt went through the model in (-ub, at most -b)
    gpu_info: str = ""  # the GPU(s) the engine reports (llama-bench's gpu_info)
    gpu_requested: str | None = None  # the GPU the user asked for (-ngl, --device), whether or not it ran
    gpu_requested_backend: str | None = None  # its llama.cpp backend
    server_slots: int | None = None  # a server's parallel slots
    other_requests: int | None = None  # a server's slots busy with others' requests when the run started
    cpu_model: str | None = None
    n_threads: int | None = None
    physical_cores: int | None = None
    efficiency_cores: int | None = None
    usable_cores: int | None = None  # physical cores this process may use (affinity set, cgroup quota)
    cores_limited_by: str | None = None  # what sets them: "physical cores", "CPU affinity", "cgroup quota"
    n_gpu_layers_requested: int | None = None
    n_gpu_layers_offloaded: int | None = None
    n_layers: int | None = None
    system_info: str = ""  # llama_print_system_info()
    simd_compiled: tuple[str, ...] = ()  # features llama.cpp was built with (AVX2 = 1 ...)
    backends_compiled: tuple[str, ...] = ()
    gpu_offload_supported: bool | None = None
    llama_cpp_python_version: str | None = None
    cpu_load_before_percent: float | None = None
    # other processes' CPU use while the run measured, percent of the CPUs it may use (its affinity set)
    cpu_load_during_percent: float | None = None
    ram_available_before_bytes: int | None = None
    ram_available_after_bytes: int | None = None
    swap_used_before_bytes: int | None = None
    swap_used_after_bytes: int | None = None
    page_cache_fraction_before: float | None = None  # model file pages already in RAM before load
    governor: str | None = None
    cpu_freq_max_mhz: float | None = None
    cpu_freq_before_mhz: float | None = None
    cpu_freq_after_mhz: float | None = None  # read right after the run: a throttled clock shows here
    repack: bool | None = None  # llama.cpp's extra (repacking) buffer types in use
    # speculative decoding: how the run drafted (ggprof.runfacts.DRAFTING, from a server's command
    # line), and the drafted and accepted tokens its timings counted over the decode
    drafting: tuple[tuple[str, Any], ...] = ()
    draft_n: int | None = None
    draft_n_accepted: int | None = None
    draft_steps: int | None = None  # the verify steps those tokens came in
    notes: tuple[str, ...] = field(default=())

    @property
    def build(self) -> BuildFacts | None:
        """What the engine saw of the build: its number, Vulkan banner, rocBLAS setting and SYCL's
        GGML_SYCL_F16 and reorder optimizations, and the run's flash attention (None: nothing)."""
        build = BuildFacts(
            number=self.build_number,
            matrix_cores=self.matrix_cores,
            int_dot=self.int_dot,
            vulkan_driver=self.vulkan_driver,
            rocblas_use_hipblaslt=self.rocblas_use_hipblaslt,
            sycl_f16=self.sycl_f16,
            sycl_reorder=self.sycl_reorder,
            flash_attn=self.flash_attn,
            n_ubatch=self.n_ubatch,
        )
        return build if build else None

    @property
    def contention(self) -> Contention | None:
        """Other processes' CPU time while the run measured, against the cores its threads left
        free (None: not measured, or the run's threads or cores not known)."""
        from ggprof.machine.load import Contention

        cores = self.usable_cores or self.physical_cores
        if self.cpu_load_during_percent is None or not cores or not self.n_threads:
            return None
        return Contention(others_percent=self.cpu_load_during_percent, cores=cores, threads=self.n_threads)


ROCBLAS_HIPBLASLT_ENV = "ROCBLAS_USE_HIPBLASLT"  # rocBLAS's switch to hand its GEMMs to hipBLASLt


def rocblas_use_hipblaslt(backends: tuple[str, ...]) -> str | None:
    """A ROCm run's ROCBLAS_USE_HIPBLASLT as the engine's child inherits it ("unset" where it is
    not set; None for a run without ROCm): its prompt speed can hang on it."""
    if "rocm" not in backends:
        return None
    value = os.environ.get(ROCBLAS_HIPBLASLT_ENV)
    return "unset" if value is None else clean_name(value, 20)


def host_cores(facts: HostFacts) -> dict[str, Any]:
    """The RunContext fields of this host's cores, for a run on this host (one home for which
    the engines record): the machine's, its efficiency cores, and those this process may use."""
    return {
        "physical_cores": facts.physical_cores,
        "efficiency_cores": facts.efficiency_cores,
        "usable_cores": facts.usable_cores,
        "cores_limited_by": facts.cpus.limited_by if facts.cpus else None,
    }

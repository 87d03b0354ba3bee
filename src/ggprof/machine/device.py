"""Devices: plain data about a memory pool and the compute next to it, with each figure's source.

What a backend's detection returns, what `--device ID` resolves to, and what the roofline
math in ggprof.physics.roofline takes. No behaviour beyond small derived properties.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from dataclasses import dataclass, field, replace

from ggprof.figures import Figure
from ggprof.machine.links import Link
from ggprof.machine.profiles import VECTOR_FP16_PER_FP32

MATRIX_CORES = ("none", "KHR_coopmat", "NV_coopmat2")  # what ggml_vulkan's banner says of them
HIPBLASLT_SETTINGS = ("1", "0", "unset")  # a ROCm run's ROCBLAS_USE_HIPBLASLT, as BuildFacts records it
# Builds before December 2024 predate the Vulkan backend's reworked matrix-vector kernels
# (llama.cpp PRs #10665, #10991; the same RX 5700 XT: 37.8 tok/s in PR #5835, 2024-03, and
# 65.2 in PR #13324, 2025-05) and its matrix-core kernels (VK_KHR_cooperative_matrix, PR
# #10597, merged 2024-12-07; VK_NV_cooperative_matrix2, PR #10206, the same week); b4200 is
# that month's build (b3999 on 2024-10-31 and b5315 on 2025-05-08 in the dataset: about 7
# builds a day). A build between b4200 and the merge counts as unknown, never as without.
OLD_BUILD_NUMBER = 4200
OLD_BUILD_DATE = "2024-12"
# When builds were made, to date a build known only by its number: (build, the date a public
# report of it was written: the build is that old or a little older), linearly between them.
# b3999: the r/LocalLLaMA efficiency table (2024-10-31); b4327: lhl's llm-tracker.info notes
# (vault commit 15e8c54, 2024-12-17); b4696: geerlingguy/ai-benchmarks #20 (2025-02-12);
# b5315: llama.cpp PR #13326 (2025-05-08); b5589: PR #14001 (2025-06-04); b6645:
# geerlingguy/ai-benchmarks #25 (2025-09-30); b7474: geerlingguy/ai-benchmarks #46
# (2025-12-18); b8038: visorcraft/strix-halo-llm-perf (2026-02-13); b9174: maeddesg/vulkanforge's
# benchmarks wiki (2026-06-10), the newest build dated: BUILD_AGE_FROM.
BUILD_DATES = (
    (3999, "2024-10-31"),
    (4327, "2024-12-17"),
    (4696, "2025-02-12"),
    (5315, "2025-05-08"),
    (5589, "2025-06-04"),
    (6645, "2025-09-30"),
    (7474, "2025-12-18"),
    (8038, "2026-02-13"),
    (9174, "2026-06-10"),
)
# A build's age: the years from its date (a build before December 2024 counts from
# OLD_BUILD_DATE: what came before is the `old build` step) to the newest dated build; a newer
# build, or one not dated, is 0 (taken as current).
BUILD_AGE_FROM = BUILD_DATES[-1][0]  # the build number ages count to
# llama.cpp's build number counts its git commits; a build made without its git history (a
# source tarball, the copy vendored in llama-cpp-python) reports 0 or 1. Builds before b1015
# (August 2023, the GGUF format's arrival) cannot load a GGUF file: a lower number says nothing.
FIRST_GGUF_BUILD = 1015
# Vulkan's integer dot-product matrix kernels (MMQ: the prompt's activations quantized to q8_1
# and multiplied on the chip's int8 dot-product units, where the device has them and its matrix
# cores are not used): llama.cpp PR #12135 for the legacy quants (q4_0 family: Q4_0, Q4_1, Q5_0,
# Q5_1; and Q8_0), PR #16536 for the k-quants. By weight family, (the last build known to be
# without them, the first known to have them): b4696 (2025-02-12: its banner has no `int dot`
# field yet, geerlingguy/ai-benchmarks #20; #12135 was still in review on 2025-03-02) and b5315
# (2025-05-08: by 2025-04-02 downstream builds of llama.cpp had the DP4A kernels,
# LostRuins/koboldcpp #1459); b6645 (2025-09-30, geerlingguy/ai-benchmarks #25; #16536 was in
# review until 2025-10-28) and b7189 (late November 2025, llama.cpp issue #17628; #16536 was in
# builds by 2025-11-07, LostRuins/koboldcpp #1826). A build between the two is not known either
# way; other families (f16, i-quants) have no such kernels.
INT_DOT_BUILDS = {"q4_0": (4696, 5315), "q8_0": (4696, 5315), "k": (6645, 7189)}
# The weight families llama.cpp's HIP backend multiplies with its MMQ kernels: the prompt's
# activations quantized to q8_1 and multiplied in int8 dot products (ggml-cuda/mmq.cu,
# ggml_cuda_should_use_mmq: quantized types, always on AMD chips other than CDNA, RDNA 3 and 4
# by shape; on Vega 10, which has no dot4, only for MoE weights), on the chip's dot-product
# instruction where it has one (common.cuh, ggml_cuda_dp4a: v_dot4 on RDNA 2, CDNA and Vega 20).
# F16 weights go to rocBLAS on the vector units.
HIP_MMQ_FAMILIES = ("q4_0", "q8_0", "k", "iq")


@dataclass(frozen=True, kw_only=True)
class BuildFacts:
    """What is known of the llama.cpp build a result was measured with (a report's build line,
    llama-bench's build_number, a Vulkan device banner): the speed fits' build terms use them."""

    number: int | None = None  # llama.cpp's build number (b5315)
    date: str | None = None  # ISO date of the build (or of the result, when only that is known)
    matrix_cores: str | None = None  # Vulkan's banner: none, KHR_coopmat, NV_coopmat2
    int_dot: bool | None = None  # Vulkan's banner: `int dot: 1` (the driver's int8 dot products are fast)
    vulkan_driver: str | None = None  # Vulkan's banner: the driver's name (radv, AMD open-source driver, NVIDIA)
    # ROCm: the ROCBLAS_USE_HIPBLASLT the run had ("1", "0", or "unset"): whether rocBLAS's
    # matrix multiplications went to hipBLASLt
    rocblas_use_hipblaslt: str | None = None
    # SYCL: whether the build had GGML_SYCL_F16 (its log's `Build with Macros` says): only then
    # are a prompt's quantized weights multiplied in FP16 on the XMX units, else in FP32
    sycl_f16: bool | None = None
    # SYCL: whether the run reordered quantized weights for its decode kernels (its log's
    # `GGML_SYCL_ENABLE_OPT: 1`, or on older builds `GGML_SYCL_DISABLE_OPT: 0`)
    sycl_reorder: bool | None = None
    # whether the run used flash attention (llama-bench's -fa 1, a log's `flash_attn = 1`; None for
    # llama.cpp's `auto` or not known): on ROCm builds of August 2025 without rocWMMA's kernels it
    # slowed prompts
    flash_attn: bool | None = None
    # the physical batch the run's prompt went through the model in (llama-bench's and llama.cpp's
    # -ub, at most its -b: a log's `n_ubatch`); llama.cpp's default is 512
    n_ubatch: int | None = None

    def __bool__(self) -> bool:
        facts = (
            self.number,
            self.date,
            self.matrix_cores,
            self.int_dot,
            self.vulkan_driver,
            self.rocblas_use_hipblaslt,
            self.sycl_f16,
            self.sycl_reorder,
            self.flash_attn,
            self.n_ubatch,
        )
        return any(v is not None for v in facts)

    @property
    def known_number(self) -> int | None:
        """The build number where it dates the build (None below FIRST_GGUF_BUILD: a build
        without its git history)."""
        return self.number if self.number is not None and self.number >= FIRST_GGUF_BUILD else None

    @property
    def old(self) -> bool:
        """Before OLD_BUILD_* (by its number, else its date); not known counts as current."""
        if self.known_number is not None:
            return self.known_number < OLD_BUILD_NUMBER
        return self.date is not None and self.date < OLD_BUILD_DATE

    @property
    def built_on(self) -> dt.date | None:
        """When the build was made: by its number (BUILD_DATES, linearly between them), else its
        date ("2025-05" is taken as the 15th); None where neither dates it (a number outside
        BUILD_DATES: `old` and `age_years` say what is known)."""
        number = self.known_number
        if number is not None:
            for (n0, a), (n1, b) in itertools.pairwise(_BUILD_DAYS):
                if n0 <= number < n1:
                    return a + (b - a) * ((number - n0) / (n1 - n0))
            return None
        return _day(self.date) if self.date else None

    @property
    def age_years(self) -> float | None:
        """Years from the build (OLD_BUILD_DATE at the earliest) to BUILD_AGE_FROM, 0 for a newer
        one; None where the build is not dated."""
        if self.known_number is not None and self.known_number >= BUILD_AGE_FROM:
            return 0.0
        built = _OLD_BUILD_DAY if self.old else self.built_on
        if built is None:
            return None
        return max(0.0, (_BUILD_DAYS[-1][1] - max(built, _OLD_BUILD_DAY)).days / 365.25)

    def uses_matrix_cores(self, backend: str) -> bool | None:
        """Whether the build's matrix multiplications ran on the chip's matrix units (tensor
        cores, XMX, WMMA) where it has them. Vulkan: its banner says, or a build before the
        coopmat kernels had none; otherwise not known (None). SYCL: only a build with
        GGML_SYCL_F16 multiplies quantized weights in FP16 on the XMX units (ggml-sycl.cpp,
        ggml_sycl_op_mul_mat_sycl; FP32 on the vector units otherwise); not known without it
        (None). llama.cpp's CUDA, ROCm and Metal kernels use whatever matrix units the chip has
        (True)."""
        if backend == "sycl":
            return self.sycl_f16
        if backend != "vulkan":
            return True
        if self.matrix_cores is not None:
            return self.matrix_cores != "none"
        return False if self.old else None

    def vulkan_int_dot(self, family: str) -> bool | None:
        """Whether a Vulkan build ran a prompt's matrix multiplications of weight `family` (ggprof.
        physics.expected.family) as int8 dot products (INT_DOT_BUILDS), where the chip has the
        units and its matrix cores were not used: its banner's `int dot: 0`, a build before the
        family's kernels or a family without them: no; `int dot: 1` on a build known to have
        them: yes; otherwise not known (None)."""
        builds = INT_DOT_BUILDS.get(family)
        if builds is None or self.int_dot is False or self.old:
            return False
        last_without, first_with = builds
        number = self.known_number
        if number is not None and number <= last_without:
            return False
        return True if self.int_dot and number is not None and number >= first_with else None


_BUILD_DAYS = tuple((n, dt.date.fromisoformat(d)) for n, d in BUILD_DATES)
_OLD_BUILD_DAY = dt.date.fromisoformat(OLD_BUILD_DATE + "-01")


def _day(text: str) -> dt.date | None:
    """An ISO date, "2025-05-08" or "2025-05" (taken as the 15th) or "2025" (July 1st); None
    for anything else."""
    m = re.fullmatch(r"(\d{4})(?:-(\d{2}))?(?:-(\d{2}))?", text)
    if m is None:
        return None
    year, month, day = (int(g) if g else 0 for g in m.groups())
    try:
        return dt.date(year, month or 7, day or (15 if month else 1))
    except ValueError:
        return None


@dataclass(frozen=True, kw_only=True)
class Device:
    """A memory pool and the compute next to it: a CPU with its RAM, a GPU with its VRAM."""

    id: str
    name: str
    backend: str
    memory_bytes: int | None = None
    memory_source: str | None = None
    bandwidth: Figure | None = None  # bytes/s
    peak_flops: Figure | None = None  # FLOP/s: the chip's highest dense peak (its matrix units where it has them)
    vector_flops: Figure | None = None  # FLOP/s without matrix units (a build that does not use them)
    int_dot_ops: Figure | None = None  # int8 ops/s of its dot-product units, where faster than its vector units
    profile_id: str | None = None
    unified_memory: bool = False
    llc_bytes: int | None = None
    memory_available_bytes: int | None = None
    notes: tuple[str, ...] = ()
    architecture: str | None = None  # from its profile: the chip generation the speed fits group by
    device_class: str | None = None  # from its profile: vendor and integrated/discrete/datacenter (nvidia discrete)
    build: BuildFacts | None = None  # the build a reported result ran on, where the report says
    link: Figure | None = None  # bytes/s between a discrete GPU and its host's RAM (PCIe), one direction
    # a device behind an rpc-server (llama.cpp's RPC[host:port]): its machine's network link to
    # the main host, where given (--device-profile RPC[host:port]=PROFILE@LINK)
    network: Link | None = None
    bandwidth_low: Figure | None = None  # where only its class is known: the class's slowest bandwidth
    # how its driver serves an allocation over its memory (physics.placement: SPILLS), where told
    spill: str | None = None

    @property
    def matrix_units_faster(self) -> bool:
        """Whether its matrix units outpace its vector units: which of them a build used moves
        its prefill ceiling."""
        vector, peak = self.vector_flops, self.peak_flops
        return vector is not None and (peak is None or vector.value < peak.value)

    @property
    def bandwidth_bytes_per_s(self) -> float | None:
        return self.bandwidth.value if self.bandwidth else None

    @property
    def is_discrete_gpu(self) -> bool:
        """An accelerator with its own memory (layers not offloaded stay in host RAM)."""
        return self.backend != "cpu" and not self.unified_memory


@dataclass(frozen=True, kw_only=True)
class Detection:
    """What one backend found: devices, or the reason it found none."""

    backend: str
    devices: list[Device] = field(default_factory=list)
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class EfficiencyBand:
    """The fraction of the decode bandwidth ceiling llama.cpp reaches on a backend, and why.
    `judged` False: an expectation only (too few measurements behind it to call a speed below
    it suspicious), shown as what to expect, never a verdict's threshold."""

    low: float
    high: float
    source: str
    judged: bool = True


@dataclass(frozen=True, kw_only=True)
class ExpectedSpeed:
    """The decode speed a backend's model expects, and what that rests on."""

    low_tok_s: float
    high_tok_s: float
    basis: str


# The backends whose builds without the matrix units multiply a prompt's quantized weights in
# FP32 (the vector units at the FP32 rate, not packed FP16's): SYCL without GGML_SYCL_F16
# (ggml-sycl.cpp, ggml_sycl_op_mul_mat_sycl). Vulkan's shaders without matrix cores run FP16.
FP32_MATMUL_BACKENDS = ("sycl",)


def unmatrixed_flops(device: Device) -> Figure | None:
    """What the device reaches where its build leaves the matrix units idle: its vector units,
    at the FP32 rate on FP32_MATMUL_BACKENDS."""
    vector = device.vector_flops
    if vector is None or device.backend not in FP32_MATMUL_BACKENDS:
        return vector
    return replace(vector, value=vector.value / VECTOR_FP16_PER_FP32, detail=f"{vector.detail} at the FP32 rate")


def with_build(device: Device, build: BuildFacts | None) -> Device:
    """The device as a result on `build` saw it: the build recorded, and its compute peak
    the vector units' where the build did not use the matrix units (a Vulkan banner saying
    `matrix cores: none`, a build before Vulkan's coopmat kernels)."""
    if not build:
        return device
    device = replace(device, build=build)
    vector = unmatrixed_flops(device)
    if build.uses_matrix_cores(device.backend) is False and vector is not None and device.matrix_units_faster:
        device = replace(device, peak_flops=replace(vector, detail=f"{vector.detail} (the build used no matrix cores)"))
    return device


def int_dot_ceiling(device: Device, family: str) -> tuple[Figure, bool | None] | None:
    """Where a prompt on `family` weights may have run on the device's int8 dot-product units,
    faster than the ceiling its build gives it otherwise (its vector units: no matrix cores, or
    a build that did not use them): (their rate, whether the build is known to have used them:
    True, or None where not known). None where they set no ceiling. ROCm: llama.cpp's HIP
    matrix kernels for quantized weights (HIP_MMQ_FAMILIES) always run on them; Vulkan: by its
    banner and build (BuildFacts.vulkan_int_dot)."""
    dot, peak = device.int_dot_ops, device.peak_flops
    if device.backend not in ("vulkan", "rocm") or dot is None or (peak is not None and dot.value <= peak.value):
        return None
    if device.backend == "rocm":
        if family not in HIP_MMQ_FAMILIES:
            return None
        return replace(dot, detail=f"{dot.detail} (llama.cpp's HIP kernels run {family} weights on them)"), True
    used = (device.build or BuildFacts()).vulkan_int_dot(family)
    if used is False:
        return None
    why = "the build ran them" if used else "the build may have run them"
    return replace(dot, detail=f"{dot.detail} ({why} on {family} weights)"), used


def with_memory(device: Device, memory_bytes: int | None, source: str) -> Device:
    """The device with a user-given memory size (it also counts as free: nothing else is known)."""
    if memory_bytes is None:
        return device
    return replace(device, memory_bytes=memory_bytes, memory_available_bytes=memory_bytes, memory_source=source)

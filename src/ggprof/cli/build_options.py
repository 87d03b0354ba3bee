"""What a report says of the llama.cpp build behind a number (`check`'s build options): its
build number, the ggml_vulkan banner's words, rocBLAS's and SYCL's settings, flash attention
and the physical batch, taken together as one BuildChoice and checked against the backend."""

from __future__ import annotations

import functools
from dataclasses import astuple, dataclass
from typing import Any

import click

from ggprof.cli.options import ON_OFF, fact_option, on_off, parse_build_number, parse_vulkan_driver, switch_given
from ggprof.machine.device import HIPBLASLT_SETTINGS, MATRIX_CORES, BuildFacts


@dataclass(frozen=True)
class BuildChoice:
    """The build facts a report gave (None: not given)."""

    build_number: int | None
    matrix_cores: str | None
    int_dot: str | None
    vulkan_driver: str | None
    hipblaslt: str | None
    sycl_f16: str | None
    sycl_reorder: bool | None
    flash_attn: bool | None
    n_ubatch: int | None

    @property
    def given(self) -> bool:
        return any(x is not None for x in astuple(self))

    def facts(self, backend: str | None) -> BuildFacts | None:
        """As BuildFacts (None: nothing given); a backend's own setting given for another backend is
        a usage error naming the backend it belongs to."""
        vulkan = (
            ("--matrix-cores", self.matrix_cores),
            ("--int-dot", self.int_dot),
            ("--vulkan-driver", self.vulkan_driver),
        )
        for name, value in vulkan:
            if value is not None and backend != "vulkan":
                raise click.UsageError(f"{name} is what a ggml_vulkan banner says: give it with --backend vulkan")
        if self.hipblaslt is not None and backend != "rocm":
            raise click.UsageError("--rocblas-use-hipblaslt is rocBLAS's setting: give it with --backend rocm")
        for name, given in (
            ("--sycl-f16", self.sycl_f16 is not None),
            ("--sycl-reorder", self.sycl_reorder is not None),
        ):
            if given and backend != "sycl":
                raise click.UsageError(f"{name} is a SYCL build's setting: give it with --backend sycl")
        build = BuildFacts(
            number=self.build_number,
            matrix_cores=next(
                (m for m in MATRIX_CORES if self.matrix_cores and m.lower() == self.matrix_cores.lower()), None
            ),
            int_dot=None if self.int_dot is None else self.int_dot == "1",
            vulkan_driver=self.vulkan_driver,
            rocblas_use_hipblaslt=self.hipblaslt,
            sycl_f16=None if self.sycl_f16 is None else self.sycl_f16 == "yes",
            sycl_reorder=self.sycl_reorder,
            flash_attn=self.flash_attn,
            n_ubatch=self.n_ubatch,
        )
        return build if build else None


_FIELDS = tuple(BuildChoice.__dataclass_fields__)


def build_options(f: Any) -> Any:
    """`check`'s build options, given to the command as one `reported_build: BuildChoice`."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["reported_build"] = BuildChoice(**{n: kwargs.pop(n) for n in _FIELDS})
        return f(*args, **kwargs)

    for decorator in reversed(_DECORATORS):
        wrapper = decorator(wrapper)
    return wrapper


_DECORATORS = [
    click.option(
        "--build",
        "build_number",
        metavar="BUILD",
        callback=parse_build_number,
        help=(
            "The report's llama.cpp build (5315 or b5315): its age sets the prompt band (Vulkan, ROCm), "
            "and builds before b4200 are judged by their era."
        ),
    ),
    click.option(
        "--matrix-cores",
        type=click.Choice(MATRIX_CORES, case_sensitive=False),
        help="What the report's ggml_vulkan banner says of matrix cores (with --backend vulkan): the prefill ceiling.",
    ),
    click.option(
        "--int-dot",
        type=click.Choice(("0", "1")),
        help="What the report's ggml_vulkan banner says of int dot (with --backend vulkan; with --build, "
        "whether its int8 dot-product kernels set the prefill ceiling).",
    ),
    click.option(
        "--vulkan-driver",
        metavar="NAME",
        callback=parse_vulkan_driver,
        help="The driver the report's ggml_vulkan banner names, its last parenthesis (with --backend vulkan): "
        "radv, NVIDIA, Honeykrisp, AMD open-source driver (AMDVLK); a slow prompt names a driver known to be slow.",
    ),
    click.option(
        "--rocblas-use-hipblaslt",
        "hipblaslt",
        type=click.Choice(HIPBLASLT_SETTINGS),
        help="The report's ROCBLAS_USE_HIPBLASLT (with --backend rocm): a slow prompt names rocBLAS without hipBLASLt.",
    ),
    click.option(
        "--sycl-f16",
        type=click.Choice(("yes", "no")),
        help="What the report's SYCL log says of GGML_SYCL_F16 (with --backend sycl): the prefill ceiling "
        "(the XMX units with it, the vector units without).",
    ),
    fact_option(
        "flash_attn",
        default=None,
        callback=switch_given,
        help="Whether the reported run used flash attention (llama-bench's -fa 1, a log's `flash_attn = 1`): "
        "on ROCm, a slow prompt with it on names a build without rocWMMA's kernels as a cause to check.",
    ),
    fact_option(
        "n_ubatch",
        default=None,
        help="The reported run's physical batch (llama-bench's and llama.cpp's -ub, at most its -b; a log's "
        "`n_ubatch`): a slow prompt below 512 names it, with how much speed public runs lost at that size; "
        "512 or more rules it out.",
    ),
    click.option(
        "--sycl-reorder",
        type=ON_OFF,
        callback=on_off,
        help="Whether the report's SYCL run reordered quantized weights (with --backend sycl; its log's "
        "`GGML_SYCL_ENABLE_OPT: 1`, or `GGML_SYCL_DISABLE_OPT: 0` on older builds, is on): a slow decode with "
        "them off names it.",
    ),
]

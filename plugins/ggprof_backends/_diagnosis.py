"""The thresholds the built-in backends' diagnoses use: when a fact of the run's context is
named as a likely cause of a slow result. Each is a cause to check, not a verdict; each says
where its number comes from."""

from __future__ import annotations

# Repetitions varying more than this: noise is named as a cause. Honest runs kept for
# calibration vary by 0.5-4.4% (docs/calibration-xeon16-cpu-2026-11-29.jsonl) and at most 11%
# on a 2-core VM (docs/calibration-threads-2026-11-29-epyc.jsonl): above 10% something else ran.
NOISY_REPETITIONS_CV = 0.10
# Other processes' share of the host during a GPU run named as a cause: a GPU's kernel launches
# wait for a host more than half busy. (During a CPU run: RunContext.contention, the share beyond
# the cores the run's threads left free, ggprof.machine.load.CONTENDED_SHARE.)
OTHER_LOAD_GPU_HOST_PERCENT = 50.0
# Swap growing by more than this during the run: weights were read back from disk. A quiet run
# swaps nothing (swap_used_after_bytes 0 in every run kept in docs/); 64 MiB is more than the
# kernel moves for other reasons in a minute.
SWAP_GROWTH_BYTES = 64 * 2**20
# A cold page cache explains a slow first repetition when less than half the file was cached and
# the first repetition ran under 3/4 of the others' speed (reading from disk, not from memory).
COLD_CACHE_FRACTION = 0.5
COLD_FIRST_REPETITION = 0.75
# The clock after the run under 3/4 of its maximum: throttled or a power-saving governor (a
# turbo step is 10-20%; a throttle halves it).
THROTTLED_CLOCK_FRACTION = 0.75
# Doubling the threads gained less than this: more threads did not help (a dense model's
# decode gains 1.6-2.0x where cores are free: the parallel efficiencies in cpu.py).
THREADS_MIN_GAIN = 1.15
# Prompt speed on one chip with one build fact changed, the pairs in
# benchmarks/data/build-effects.jsonl (a Radeon 8060S, gfx1151, llama 2 7B Q4_0 pp512; each pair
# differs in that fact alone; benchmarks/calibrate.py prints them; tests/test_build_effects.py
# checks these figures against the file). rocBLAS without hipBLASLt (ROCBLAS_USE_HIPBLASLT=0
# with ROCm 6.4.3, or unset on builds of 2025-08) ran at the first ratio of the same run with
# it, the median of 8 pairs; with ROCm 6.4.4 and 7 at the second (12 pairs).
HIPBLASLT_OFF_PREFILL_OLD_ROCM = 0.34
HIPBLASLT_OFF_PREFILL_NEW_ROCM = 0.88
# The AMDVLK driver (its banner: "AMD open-source driver") against Mesa's RADV on the same build:
# at b9187 it ran prompts at this ratio; at b6111-b6735 it was 1.3-1.5x faster (the last build
# measured ahead is the second figure: on builds up to it, AMDVLK is no cause of a slow prompt).
AMDVLK_PREFILL_VS_RADV = 0.26
AMDVLK_AHEAD_UNTIL_BUILD = 6735
# Asahi Linux's Vulkan driver (its banner: "Honeykrisp") against Metal on the same chip, llama 2 7B
# Q4_0 pp512 on llama.cpp's scoreboards (benchmarks/data/llama-cpp-results.jsonl: the M1, M2 and
# M2 Pro under Honeykrisp on builds of 2025-08 to 2025-11, each beside its chip's top-bin Metal
# result; tests/test_build_effects.py checks these against the file): prompts ran at these
# ratios, where the M3 Ultra through MoltenVK ran at 0.76.
HONEYKRISP_PREFILL_VS_METAL = (0.18, 0.32)
# SYCL's reorder optimizations (quantized weights laid out for its decode kernels: llama.cpp PR
# #12035, opened 2025-02-23, for Q4_0; Q4_K and Q6_K followed in May-June 2025, Q5_K and Q8_0 in
# April-May 2026). Llama 2 7B Q4_0 decode without and with them on each GPU, tok/s, as the PR and
# llama.cpp's SYCL notes (docs/backend/SYCL.md, "2025.2") give them. b4696 (2025-02-12) is the
# last build known to be without them.
SYCL_REORDER_DECODE_TOK_S = {
    "Arc A770": (42, 55),
    "Flex 170": (39, 50),
    "Data Center GPU Max 1550": (39, 73),
    "Meteor Lake iGPU": (13, 16),
    "Arrow Lake-H iGPU": (14, 17),
}
SYCL_NO_REORDER_UNTIL_BUILD = 4696
# Flash attention on a ROCm build without rocWMMA's kernels (GGML_HIP_ROCWMMA_FATTN), the pairs in
# benchmarks/data/build-effects.jsonl (tests/test_build_effects.py checks them): on the builds of
# August 2025 (b6077-b6182) a Radeon 8060S ran prompts with it on at this ratio of the same run
# with it off (hipBLASLt on; a build with rocWMMA's kernels gained 1.12x instead); from b6609
# (2025-09) the build without them gained as much. The last build measured slow is the second figure.
FLASH_ATTN_NO_ROCWMMA_PREFILL = 0.69
FLASH_ATTN_NO_ROCWMMA_UNTIL_BUILD = 6182
# A prompt run in physical batches (-ub) smaller than llama.cpp's default 512, as a share of the
# same build's prompt speed at 512: the lowest and highest share at each size over public
# llama-bench runs (benchmarks/data/ubatch-effects.jsonl: an RTX 4090 on CUDA with Q4_0, Q4_K_S
# and IQ4_XS weights, an RX 6800, a Radeon Instinct MI50 and an Instinct MI100 on ROCm, from
# llama.cpp's pull requests #7676, #7860, #8278, #8416, #27841 and #14949; tests/test_ubatch.py
# checks these against the file). A smaller batch reads every weight again for fewer tokens and
# gives the matrix kernels thinner tiles; the fastest chip loses the most.
UBATCH_PREFILL_SHARE = {16: (0.19, 0.38), 32: (0.33, 0.57), 64: (0.52, 0.68), 128: (0.72, 0.84), 256: (0.91, 0.99)}
UBATCH_DEVICES = "an RTX 4090, an RX 6800, an MI50 and an MI100"
# llama.cpp's CUDA backend picks its tensor-core (MMA) kernels by compute capability: a GPU of an
# architecture with tensor cores that has none (Turing's GTX 16xx report 7.5 like an RTX 20xx) runs
# them emulated. A fork that picks the plain kernels for them read the same GTX 1660 Ti's prompts
# 2.9x-4.2x faster (R1-distill-7B Q4_K_S pp512: 168 -> 690 tok/s; TheCascadian/Oddly-llama.cpp,
# local-tune/UNIFIED.md, "Change 1 detail"). A GPU lacks matrix units where its peak is within this
# factor of its vector units' rate (a GTX 1660 Ti: 10.9 against 10.8 TFLOPS; an RTX 2080: 80.5 against 20.2).
EMULATED_MMA_ARCHITECTURES = ("turing",)
EMULATED_MMA_PREFILL_GAIN = (2.9, 4.2)
MATRIX_UNITS_OVER_VECTOR = 1.5

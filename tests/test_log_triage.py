"""`ggprof check --log` on real logs: public ones pasted in llama.cpp, Ollama and related issues
(tests/data/logs/SOURCES.md names each one's thread), and this machine's own runs. The facts
each log holds were read off it by hand; where the thread found the cause, it is the first one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import in_process

LOGS = Path(__file__).parent / "data" / "logs"
MiB = 1 << 20
GiB = 1 << 30


def checked(name: str | Path, *args: str) -> tuple[int, dict[str, Any]]:
    r = in_process("check", "--log", str(LOGS / name if isinstance(name, str) else name), "--json", *args)
    assert r.stderr == "" or "Traceback" not in r.stderr
    return r.exit_code, json.loads(r.stdout)


def facts(name: str, run: int = 0, *args: str) -> dict[str, Any]:
    found: dict[str, Any] = checked(name, *args)[1]["runs"][run]["facts"]
    return found


def speeds(d: dict[str, Any]) -> list[tuple[str, int | None]]:
    return [(m["kind"], m["n_tokens"]) for m in d["measurements"]]


def rate(d: dict[str, Any], i: int) -> float:
    return float(d["measurements"][i]["tok_s"])


def causes(d: dict[str, Any], run: int = 0) -> list[str]:
    return [c["code"] for c in d["runs"][run]["causes"]]


def test_every_log_is_read_without_an_internal_error() -> None:
    """Every file of tests/data: the logs, and the recorded answers and outputs beside them."""
    names = sorted(p.name for p in LOGS.glob("*.txt"))
    assert len(names) >= 30
    from ggprof.verdict.finding import EXIT

    for path in sorted(p for p in LOGS.parent.rglob("*") if p.is_file()):
        name = path.name
        judged = in_process("check", "--log", str(path), "--json")
        text = in_process("check", "--log", str(path))
        assert judged.stdout.startswith("{") and text.stdout.startswith("ggprof check --log"), name
        assert "Traceback" not in judged.stderr + text.stdout + text.stderr, name
        # the exit status is the verdict's, in either format
        verdict = json.loads(judged.stdout)["verdict"]
        assert judged.exit_code == text.exit_code == int(EXIT[verdict]), (name, verdict, text.stderr)


# -- llama.cpp's own printers -------------------------------------------------------------------
def test_cuda_full_offload_kv_on_the_gpu() -> None:
    _, d = checked("llamacpp-9881-cuda-full-offload.txt")
    f, run = d["facts"], d["runs"][0]
    assert (f["backend"], f["layers_offloaded"], f["layers_total"], f["n_ctx"]) == ("cuda", 33, 33, 8192)
    assert run["kv_buffers_bytes"] == {"CUDA0": 1024 * MiB}
    assert run["model_buffers_bytes"]["CUDA0"] == int(4155.99 * MiB)
    assert run["facts"]["cache_type_k"] == "f16"
    assert d["measurements"] == [] and causes(d) == []
    assert any("any speed" in m for m in run["missing"])


def test_cpu_timings_with_threads_and_sampling() -> None:
    _, d = checked("llamacpp-2237-cpu-xeon-f16.txt")
    f = d["facts"]
    assert (f["threads"], f["hardware_threads"]) == (56, 112)
    assert speeds(d) == [("prefill", 271), ("decode", 510)]
    assert rate(d, 0) == pytest.approx(43.05)
    assert rate(d, 1) == pytest.approx(4.43)
    # decode starts after the 271-token prompt: judged at its average depth
    assert d["measurements"][1]["depth"] == 271 + 510 // 2
    assert d["verdict"] == "unknown"  # nothing of the model in the log: not even dense or not
    assert any("mixture of experts" in m for m in d["runs"][0]["missing"])


def test_a_second_command_is_a_second_run() -> None:
    _, d = checked("llamacpp-8263-metal-two-runs.txt")
    assert len(d["runs"]) == 2
    assert speeds(d) == [("decode", 128)]  # the 0-token prompt line is no speed
    assert rate(d, 0) == pytest.approx(1.07)
    second = d["runs"][1]["facts"]
    assert (second["build"], second["n_gpu_layers_requested"]) == ("b3285 (a27152b6)", 0)


def test_old_timings_without_rates_and_a_comparison() -> None:
    _, d = checked("llamacpp-python-1786-old-timings.txt")
    assert speeds(d) == [("prefill", 1294), ("decode", 64), ("prefill", 1245), ("decode", 110)]
    # no rate printed: the tokens over the time
    assert rate(d, 0) == pytest.approx(1294 / 146712.89e-3, rel=1e-6)
    assert rate(d, 2) == pytest.approx(1245 / 10762.28e-3, rel=1e-6)
    assert any(c.startswith("prefill:") and "13.1x apart" in c for c in d["comparison"])


def test_cli_and_server_timings_of_one_prompt() -> None:
    _, d = checked("llamacpp-9013-cli-and-server.txt")
    assert speeds(d) == [("prefill", 49), ("decode", 178), ("prefill", 51), ("decode", 275)]
    assert [m["source"] for m in d["measurements"]] == ["llama.cpp timings"] * 2 + ["llama-server"] * 2
    assert rate(d, 3) == pytest.approx(11.94)
    # the server's decode follows its 51-token prompt
    assert d["measurements"][3]["depth"] == 51 + 275 // 2


def test_server_progress_lines_with_timestamps() -> None:
    _, d = checked("lemonade-129-server-progress.txt")
    assert speeds(d) == [("decode", 24297)]
    assert rate(d, 0) == pytest.approx(30.90)
    _, d = checked("toshllm-47-server-progress-gemma4.txt")
    assert speeds(d) == [("decode", 726)] and rate(d, 0) == pytest.approx(9.45)


def test_loader_key_values_and_file_name_only() -> None:
    f = facts("llamacpp-python-1123-phi2-loader.txt")
    assert (f["architecture"], f["n_embd"], f["n_layers"], f["n_heads"], f["n_kv_heads"], f["n_ff"]) == (
        "phi2",
        2560,
        32,
        32,
        32,
        10240,
    )
    assert f["n_ctx_train"] == 2048
    assert f["model_file"] == "ggml-model-f32_q4_0.gguf"  # never the reporter's folders


def test_llama_cpp_python_metadata_and_a_tiny_prompt() -> None:
    _, d = checked("pytldr-3-cuda-llama2-13b.txt")
    f = d["facts"]
    assert (f["architecture"], f["n_layers"], f["n_embd"], f["n_heads"], f["n_ff"], f["model_name"]) == (
        "llama",
        40,
        5120,
        40,
        13824,
        "LLaMA v2",
    )
    m = d["measurements"][0]
    assert (m["kind"], m["n_tokens"], m["verdict"]) == ("prefill", 15, "unknown")
    assert "too small a batch" in m["not_judged"]


def test_meta_shape_lines() -> None:
    f = facts("llamacpp-python-1853-intel-meta.txt")
    assert (f["n_layers"], f["n_heads"], f["n_kv_heads"], f["n_ff"], f["n_experts"]) == (32, 32, 32, 11008, 0)
    run = checked("llamacpp-python-1853-intel-meta.txt")[1]["runs"][0]
    assert run["sources"]["n_ff"]["line"] == 17


def test_print_info_size_type_and_tensor_types() -> None:
    _, d = checked("geerling-706-rx7600xt-llama32-3b.txt")
    f, run = d["facts"], d["runs"][0]
    assert (f["quant"], f["model_size_bytes"]) == ("Q4_K - Medium", int(1.87 * GiB))
    assert (f["architecture"], f["n_layers"], f["n_embd"], f["n_heads"], f["n_kv_heads"]) == ("llama", 28, 3072, 24, 8)
    assert f["n_ctx_train"] == 131072
    assert run["tensor_types"] == {"F32": 58, "Q4_K": 168, "Q6_K": 29}


def test_old_ggjt_loader_and_a_gpu_never_used() -> None:
    _, d = checked("llamacpp-2641-a100-ggjt-no-offload.txt")
    f, run = d["facts"], d["runs"][0]
    assert (f["build"], f["quant"], f["n_layers"], f["n_embd"], f["n_vocab"], f["n_ctx"]) == (
        "b992 (0919a0f)",
        "Q4_1",
        32,
        4096,
        32000,
        512,
    )
    assert f["model_type"] == "7B" and f["model_size_bytes"] is None  # `model size = 7B` is a type
    assert run["devices"][0]["name"] == "NVIDIA A100-SXM4-80GB" and run["devices"][0]["compute"] == "8.0"
    assert causes(d) == ["NO_NGL"]


def test_decimal_commas_and_inf() -> None:
    _, d = checked("llamacpp-3422-rocm-decimal-comma.txt")
    assert speeds(d) == [("decode", 512)]  # `0,00 ms / 1 tokens (inf tokens per second)` is no speed
    assert rate(d, 0) == pytest.approx(82.40)
    assert d["facts"]["n_gpu_layers_requested"] == 84


def test_weights_left_in_ram_with_every_layer_offloaded() -> None:
    _, d = checked("ik-llama-450-deepseek-cpu-buffers.txt")
    run = d["runs"][0]
    assert run["model_buffers_bytes"]["CPU"] == int(392428.85 * MiB) + int(938.98 * MiB)
    assert (d["facts"]["layers_offloaded"], d["facts"]["flash_attn"]) == (62, "on")
    assert causes(d) == ["WEIGHTS_IN_RAM"]


# -- Ollama -------------------------------------------------------------------------------------
def test_ollama_partial_offload_is_the_cause() -> None:
    """ollama/ollama#10833: "Inference running on CPU": 5 of 37 layers on the GPU."""
    _, d = checked("ollama-10833-partial-offload-5-of-37.txt")
    f = d["facts"]
    assert (f["backend"], f["layers_offloaded"], f["layers_total"], f["n_ctx"]) == ("cuda", 5, 37, 32768)
    assert d["runs"][0]["model_buffers_bytes"] == {"CUDA0": int(511.43 * MiB), "CPU_Mapped": 3565 * MiB}
    assert causes(d)[0] == "PARTIAL_OFFLOAD"


def test_ollama_offload_line_memory_shortfall() -> None:
    """ollama/ollama#11819: after an update one of 49 layers stayed on the CPU."""
    _, d = checked("ollama-11819-offload-48-of-49.txt")
    f = d["facts"]
    assert (f["layers_offloaded"], f["layers_total"], f["n_gpu_layers_requested"], f["threads"], f["n_ctx"]) == (
        48,
        49,
        49,
        6,
        2048,
    )
    assert f["backend"] == "cuda"
    assert causes(d)[0] == "PARTIAL_OFFLOAD"
    assert "11.0 GiB" in d["runs"][0]["causes"][0]["title"] and "10.9 GiB" in d["runs"][0]["causes"][0]["title"]


def test_ollama_ps_split_and_two_versions_compared() -> None:
    """ollama/ollama#10746: 0.7.0 at 13 tok/s, 0.6.8 at 36; the thread found 11%/89% CPU/GPU."""
    _, d = checked("ollama-10746-two-versions-gemma3-27b.txt")
    assert speeds(d) == [("decode", 74), ("decode", 63)]
    assert rate(d, 0) == pytest.approx(13.08)
    assert rate(d, 1) == pytest.approx(36.02)
    assert causes(d)[0] == "PARTIAL_OFFLOAD"
    assert any(c.startswith("decode:") and "2.8x apart" in c for c in d["comparison"])


def test_ollama_verbose_go_durations() -> None:
    _, d = checked("llm-ollama-32-verbose.txt")
    assert speeds(d) == [("prefill", 13), ("decode", 1133)]
    assert rate(d, 1) == pytest.approx(8.87)
    _, d = checked("ollama-1806-verbose-mistral.txt")
    assert rate(d, 1) == pytest.approx(24.61)
    _, d = checked("ollama-7911-verbose-truncated.txt")  # cut off before the eval rate
    assert speeds(d) == [("prefill", 16)]


def test_ollama_journal_prefixes_and_old_vram_lines() -> None:
    f = facts("ollama-814-rocm-old-vram.txt")
    assert (f["backend"], f["layers_offloaded"], f["layers_total"], f["n_ctx"]) == ("rocm", 43, 43, 4096)
    f = facts("ollama-18373-journal-gpt-oss-120b.txt")
    assert (f["model_params"], f["model_type"], f["n_vocab"]) == (116_830_000_000, "120B", 201088)


def test_a_mixture_of_experts_without_its_expert_lines_is_not_judged_as_dense() -> None:
    _, d = checked("llamacpp-5206-metal-mixtral-meta.txt", "--device", "apple-m2-ultra")
    f = d["facts"]
    assert (f["quant"], f["model_params"], f["model_size_bytes"]) == ("Q4_K - Medium", 46_700_000_000, int(24.62 * GiB))
    assert d["runs"][0]["model"]["decode_bytes_per_token"] is None
    assert any("mixture of experts" in m for m in d["runs"][0]["missing"])


# -- devices ------------------------------------------------------------------------------------
def test_vulkan_device_lines_old_and_new() -> None:
    run = checked("llamacpp-5486-vulkan-rx6600m-fp16.txt")[1]["runs"][0]
    dev = run["devices"][0]
    assert (dev["name"], dev["backend"], dev["uma"], dev["fp16"]) == ("AMD Radeon RX 6600M", "vulkan", False, True)
    f = run["facts"]
    assert (f["build"], f["n_gpu_layers_requested"], f["n_layers"], f["n_embd"], f["n_ff"]) == (
        "b2145 (6c00a066)",
        23,
        22,
        2048,
        5632,
    )
    assert f["model_file"] == "tinyllama-1.1b-chat-v1.0.fp16.gguf"
    run = checked("llamacpp-13217-vulkan-780m-server.txt")[1]["runs"][0]
    dev = run["devices"][0]
    assert (dev["name"], dev["uma"], dev["int_dot"], dev["matrix_cores"]) == (
        "AMD Radeon 780M Graphics",
        True,
        True,
        "KHR_coopmat",
    )
    assert (run["facts"]["build"], run["facts"]["threads"], run["facts"]["hardware_threads"]) == (
        "b5233 (ceda28ef)",
        8,
        16,
    )
    assert run["device"].startswith("profile radeon-780m")
    text = in_process("check", "--log", str(LOGS / "llamacpp-13217-vulkan-780m-server.txt")).stdout
    assert "matrix cores KHR_coopmat, int dot 1, driver AMD proprietary driver" in text  # the banner in words
    run = checked("koboldcpp-666-vulkan-vega8-json.txt")[1]["runs"][0]
    assert run["devices"][0]["name"] == "AMD Radeon Vega 8 Graphics" and run["devices"][0]["uma"] is True
    assert (run["facts"]["build"], run["facts"]["threads"], run["facts"]["hardware_threads"]) == (
        "b2014 (2256f36b)",
        4,
        4,
    )


def test_a_generic_chip_name_is_matched_by_its_gfx_target() -> None:
    """llama.cpp#20142: RADV calls a Ryzen AI Max+ 395's GPU `AMD Radeon Graphics (RADV GFX1151)`;
    its gfx target names the profile (ROCm's device lines give it as `gfx1151 (0x1151)`), and the
    banner's last parenthesis is its driver."""
    run = checked("llamacpp-20142-vulkan-strix-halo-generic-name.txt", "--backend", "vulkan")[1]["runs"][0]
    dev = run["devices"][0]
    assert (dev["name"], dev["driver"], dev["matrix_cores"]) == (
        "AMD Radeon Graphics (RADV GFX1151)",
        "radv",
        "KHR_coopmat",
    )
    assert run["device"].startswith("profile ryzen-ai-max-395, matched from the log's 'AMD Radeon Graphics")
    # ROCm's line: the name alone matches nothing; its prompt, 88 tok/s on an 8B Q4_K_M, is judged
    # on the chip and names rocBLAS without hipBLASLt among the causes (a log does not show it)
    _, d = checked("eliranwong-strix-halo-rocm-generic-name.txt")
    run = d["runs"][0]
    assert (run["devices"][0]["name"], run["devices"][0]["compute"]) == ("AMD Radeon Graphics", "gfx1151")
    assert run["device"].startswith("profile ryzen-ai-max-395, matched from the log's 'AMD Radeon Graphics (gfx1151)'")
    prefill = next(m for m in d["measurements"] if m["kind"] == "prefill")
    finding = next(f for f in prefill["findings"] if f["code"] == "PREFILL_BELOW_BAND")
    assert any(c.startswith("rocBLAS without hipBLASLt (ROCBLAS_USE_HIPBLASLT not 1") for c in finding["causes"])


def test_rocm_and_cuda_device_lines() -> None:
    run = checked("llamacpp-8186-rocm-7900xtx-qwen2.txt")[1]["runs"][0]
    assert (run["devices"][0]["name"], run["devices"][0]["backend"], run["devices"][0]["compute"]) == (
        "Radeon RX 7900 XTX",
        "rocm",
        "11.0",
    )
    f = run["facts"]
    assert (f["quant"], f["model_params"], f["model_size_bytes"], f["model_name"]) == (
        "Q6_K",
        7_620_000_000,
        int(5.82 * GiB),
        "qwen2-7b-instruct",
    )
    run = checked("llamacpp-22748-cuda-laptop-server.txt")[1]["runs"][0]
    dev = run["devices"][0]
    assert (dev["name"], dev["compute"], dev["memory_bytes"]) == (
        "NVIDIA GeForce RTX 5060 Laptop GPU",
        "12.0",
        8150 * MiB,
    )
    assert (run["facts"]["build"], run["facts"]["threads"]) == ("b9049 (2496f9c14)", 10)
    run = checked("llamacpp-12346-two-cuda-devices.txt")[1]["runs"][0]
    assert [(d["name"], d["compute"]) for d in run["devices"]] == [
        ("NVIDIA GeForce RTX 4090", "8.9"),
        ("NVIDIA GeForce GTX 1080 Ti", "6.1"),
    ]
    f = facts("rocm-5104-qwen-full-offload.txt")
    assert (f["backend"], f["layers_offloaded"], f["n_ctx"]) == ("rocm", 41, 4096)
    f = facts("ik-llama-333-a6000-glm4.txt")
    assert (f["backend"], f["layers_offloaded"], f["device_names"]) == ("cuda", 62, ["NVIDIA RTX A6000"])


def test_sycl_device_tables_and_lists() -> None:
    run = checked("llamacpp-6036-sycl-a770-table.txt")[1]["runs"][0]
    dev = run["devices"][0]
    assert (dev["name"], dev["backend"], dev["memory_bytes"], dev["compute"]) == (
        "Intel(R) Arc(TM) A770 Graphics",
        "sycl",
        16225243136,
        "1.3",
    )
    assert (run["facts"]["build"], run["facts"]["n_gpu_layers_requested"]) == ("b2416 (16c31f6)", 33)
    run = checked("ollama-2458-sycl-four-devices.txt")[1]["runs"][0]
    assert [d["name"] for d in run["devices"]][:3] == [
        "Intel(R) Arc(TM) A770 Graphics",
        "Intel(R) FPGA Emulation Device",
        "Intel(R) Arc(TM) A770 Graphics",
    ]
    f = facts("llamacpp-9505-sycl-two-devices-offload.txt")
    assert (f["backend"], f["layers_offloaded"], f["layers_total"]) == ("sycl", 33, 33)


def test_a_build_without_gpu_offload_is_the_cause() -> None:
    """llama.cpp#9153 and #9343: `--gpu-layers` ignored by a build without GPU offload."""
    _, d = checked("llamacpp-9153-not-compiled-with-gpu.txt")
    f = d["facts"]
    assert (f["backend"], f["n_gpu_layers_requested"], f["threads"], f["build"], f["architecture"]) == (
        "cpu",
        30,
        2,
        "b3618 (3ba780e2)",
        "phi3",
    )
    assert causes(d)[0] == "NO_GPU_BACKEND"
    _, d = checked("llamacpp-9343-vulkan-llava-no-offload.txt")
    assert d["facts"]["device_names"] == ["NVIDIA GeForce RTX 4060 Laptop GPU"]
    assert causes(d)[0] == "NO_GPU_BACKEND"


def test_no_ngl_named_when_the_build_is_said() -> None:
    """llama.cpp#6750: a ROCm build at 11.9 tok/s; the first answer: the command has no -ngl."""
    _, d = checked("llamacpp-6750-rocm-no-ngl.txt", "--backend", "rocm")
    assert causes(d)[0] == "NO_NGL"
    assert rate(d, 1) == pytest.approx(11.93)


# -- judged ---------------------------------------------------------------------------------------
def test_llama_bench_table_judged_on_the_named_device() -> None:
    """llama.cpp#5480's table of an M2 Air, judged with --device: the honest tg128/tg256 are
    plausible; the estimate from the table's size is named as one."""
    _, d = checked("llamacpp-5480-llama-bench-metal-m2-air.txt", "--device", "apple-m2-8c")
    f = d["facts"]
    assert (f["backend"], f["quant"], f["model_params"], f["model_size_bytes"]) == (
        "metal",
        "Q4_0",
        7_240_000_000,
        int(3.83 * GiB),
    )
    assert speeds(d)[3:5] == [("decode", 128), ("decode", 256)]
    assert [m["verdict"] for m in d["measurements"][3:5]] == ["plausible", "plausible"]
    assert d["runs"][0]["model"]["source"] == "the log"


def test_ollama_engine_lines_and_partial_offloads() -> None:
    _, d = checked("ollama-11640-new-engine-no-offload.txt")
    run = d["runs"][0]
    assert (d["facts"]["layers_offloaded"], d["facts"]["layers_total"]) == (0, 31)
    assert run["model_buffers_bytes"] == {"CPU": int(5.6 * GiB)}
    assert run["devices"][0]["name"] == "NVIDIA GeForce RTX 3050 Laptop GPU"
    assert causes(d)[0] == "CPU_FALLBACK"
    _, d = checked("ollama-8393-partial-31-of-33.txt")
    assert (d["facts"]["backend"], d["facts"]["layers_offloaded"], d["facts"]["layers_total"]) == ("cuda", 31, 33)
    assert causes(d)[0] == "PARTIAL_OFFLOAD"
    _, d = checked("ollama-4531-ps-partial-70b.txt")
    assert causes(d)[0] == "PARTIAL_OFFLOAD" and "42%" in d["runs"][0]["causes"][0]["title"]


def test_zero_layers_offloaded_behind_localai_prefixes() -> None:
    _, d = checked("localai-1570-zero-layers-offloaded.txt")
    f = d["facts"]
    assert (f["backend"], f["layers_offloaded"], f["layers_total"], f["n_ctx"]) == ("cpu", 0, 41, 4096)
    assert causes(d)[0] == "CPU_FALLBACK"


def test_speculative_decoding_is_not_judged_against_a_per_token_ceiling() -> None:
    _, d = checked("club3090-1140-speculative-server.txt", "--backend", "cuda", "--device", "rtx-5090")
    decode = [m for m in d["measurements"] if m["kind"] == "decode"]
    assert [m["tok_s"] for m in decode] == [pytest.approx(37.44)]  # the printed rate: n - 1 tokens timed
    assert decode[0]["verdict"] == "unknown" and "speculative decoding" in decode[0]["not_judged"]


def test_two_programs_on_one_model_compared() -> None:
    """llama.cpp#12237: Ollama's prefill 512 tok/s against llama-server's 111 at -ngl 30."""
    _, d = checked("llamacpp-12237-ollama-vs-server-rtx3060.txt")
    assert len(d["runs"]) == 2
    assert speeds(d) == [("prefill", 1119), ("decode", 9), ("prefill", 971), ("decode", 19)]
    assert (d["runs"][1]["facts"]["n_gpu_layers_requested"], d["runs"][1]["facts"]["threads"]) == (30, 12)
    assert any(c.startswith("prefill: 512.1 tok/s") and "4.6x apart" in c for c in d["comparison"])


# -- bad input ------------------------------------------------------------------------------------
def test_bad_logs_get_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "model.gguf"
    binary.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(range(256)) * 40)
    for path, words in (
        (binary, "binary data"),
        (tmp_path / "missing.txt", "no such file"),
        (tmp_path, "is a directory"),
    ):
        r = in_process("check", "--log", str(path))
        assert r.exit_code == 2 and r.stdout == ""
        assert r.stderr.startswith("Error: ") and words in r.stderr and r.stderr.count("\n") == 1
    r = in_process("check", "--log", str(LOGS / "powerinfer-188-one-speed.txt"), "--tg", "5")
    assert r.exit_code == 2 and "--log reads its speeds" in r.stderr


def test_a_log_with_nothing_in_it_says_what_is_missing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("")
    prose = tmp_path / "prose.md"
    prose.write_text("# My run is slow\n\nIt was fast yesterday. Any idea?\n\n```\n```\n")
    for p in (empty, prose):
        code, d = checked(p)
        assert code == 0 and d["verdict"] == "unknown" and d["measurements"] == []
        assert any("any speed" in m for m in d["runs"][0]["missing"])


def test_escapes_controls_and_mojibake_are_cleaned(tmp_path: Path) -> None:
    from support import clean_output

    log = tmp_path / "colour.log"
    log.write_bytes(
        b"\x1b[32mllama_perf_context_print:        eval time =    1000.00 ms /   100 runs   "
        b"(   10.00 ms per token,   100.00 tokens per second)\x1b[0m\xe2\x80\xae\x07\n"
        b"| model | size | params | backend | ngl | test | t/s |\n"
        b"| --- | ---: | ---: | --- | --: | ---: | ---: |\n"
        b"| llama 7B Q4_0 | 3.56 GiB | 6.74 B | CUDA | 99 | tg128 | 130.50 \xc3\x82\xc2\xb1 0.50 |\n"
        b"ggml_cuda_init: found 1 CUDA devices:\n"
        b"  Device 0: NVIDIA GeForce RTX 4090\x1b]0;title\x07, compute capability 8.9, VMM: yes\n"
    )
    r = in_process("check", "--log", str(log))
    assert clean_output(r.stdout) and "\u202e" not in r.stdout
    code, d = checked(log)
    # both speeds sit far below what a 3.56 GiB model decodes at on an RTX 4090 (its profile,
    # matched from the cleaned device line): the line was read through its escapes
    assert r.exit_code == code == 3 and [m["verdict"] for m in d["measurements"]] == ["suspicious"] * 2
    assert [(m["kind"], m["tok_s"]) for m in d["measurements"]] == [("decode", 100.0), ("decode", 130.5)]
    assert d["measurements"][1]["source"] == "llama-bench"
    assert d["runs"][0]["devices"][0]["name"] == "NVIDIA GeForce RTX 4090"


def test_absurd_facts_are_not_read_and_nothing_timed_is_no_speed(tmp_path: Path) -> None:
    """Facts no model has are left out; a timing of 0 tokens or of no time is llama.cpp's own print of
    nothing timed (its rate nan or inf), no speed. (A speed no run can have is refused: test_hostile_inputs.)"""
    log = tmp_path / "absurd.log"
    log.write_text(
        "llm_load_print_meta: n_layer          = 99999999999\n"
        "llm_load_print_meta: model size       = 999999999999999 TiB (4.5 BPW)\n"
        "llm_load_tensors: offloaded 5/99999999999999999999 layers to GPU\n"
        "llama_print_timings: prompt eval time =       0.00 ms /     0 tokens (     nan ms per token,      nan tokens "
        "per second)\n"
        "llama_print_timings: prompt eval time =       0,00 ms /     1 tokens (    0,00 ms per token,      inf tokens "
        "per second)\n"
    )
    code, d = checked(log)
    assert code == 0 and d["measurements"] == []
    f = d["facts"]
    assert f["n_layers"] is None and f["model_size_bytes"] is None and f["layers_total"] is None


def test_over_long_lines_and_a_long_log_are_bounded(tmp_path: Path) -> None:
    from ggprof.logs.text import MAX_LINE_CHARS, MAX_LOG_BYTES

    log = tmp_path / "long.log"
    timing = (
        b"llama_perf_context_print:        eval time =    1000.00 ms /   100 runs   "
        b"(   10.00 ms per token,   100.00 tokens per second)\n"
    )
    filler = b"srv  log_server_r: request: POST /completion 127.0.0.1 200\n"
    with open(log, "wb") as f:
        f.write(b"x" * (50 * MAX_LINE_CHARS) + b"\n" + timing)  # one line far longer than any log line
        f.write(filler * (MAX_LOG_BYTES // len(filler) + 1000))
        f.write(timing.replace(b"100.00 tokens", b"50.00 tokens").replace(b"1000.00 ms", b"2000.00 ms"))
    assert log.stat().st_size > MAX_LOG_BYTES
    _, d = checked(log)
    assert d["truncated"] is True and d["bytes_skipped"] is not None and d["lines_cut"] >= 1
    assert [m["tok_s"] for m in d["measurements"]] == [100.0, 50.0]  # the first line's speed and the last's


def test_standard_input(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    text = (LOGS / "ollama-1806-verbose-mistral.txt").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    r = in_process("check", "--log", "-", "--json")
    d = json.loads(r.stdout)
    assert d["log"] == "standard input" and [m["tok_s"] for m in d["measurements"]][-1] == pytest.approx(24.61)


# -- this machine's own runs (tests/data/logs/record_own_logs.py) -----------------------------------
def test_own_llama_cpp_python_log_read_and_judged(gemma_path: Path) -> None:
    name = "own-llama-cpp-python-gemma3-270m-cpu.txt"
    code, d = checked(name, "--bandwidth", "0.1")  # a 0.4 tok/s ceiling for the 247 MB a token reads
    f, run = d["facts"], d["runs"][0]
    assert (f["architecture"], f["n_layers"], f["n_embd"], f["n_heads"], f["n_kv_heads"], f["n_ff"]) == (
        "gemma3",
        18,
        640,
        4,
        1,
        2048,
    )
    assert (f["n_vocab"], f["quant"], f["model_size_bytes"], f["model_params"]) == (
        262144,
        "Q4_K - Medium",
        int(235.16 * MiB),
        268_100_000,
    )
    assert (f["n_ctx"], f["flash_attn"], f["backend"], f["model_file"]) == (
        512,
        "off",  # the log's `flash_attn = disabled`, as llama.cpp's -fa spells it today
        "cpu",
        "gemma-3-270m-q4_k_m.gguf",
    )
    # the context's other lines, read through the run-fact table (`n_ctx_seq = 512`, `n_seq_max = 1`,
    # `kv_unified = false`)
    assert (f["n_ctx_slot"], f["n_slots"], f["kv_unified"], f["n_ubatch"], f["n_batch"]) == (512, 1, False, 512, 512)
    assert run["kv_buffers_bytes"] == {"CPU": int(1.5 * MiB) + int(7.5 * MiB)}  # the full and the sliding-window cache
    assert [(m["kind"], m["n_tokens"], m["tok_s"]) for m in d["measurements"]] == [
        ("prefill", 90, 485.50),
        ("decode", 23, 39.34),
    ]
    decode = d["measurements"][1]
    assert code == 4 and decode["verdict"] == "impossible"
    assert decode["findings"][0]["code"] == "DECODE_ABOVE_CEILING"
    # the estimate from the log's lines against the real header: a tied model, every byte read
    from ggprof.model.spec import load_model

    real = load_model(gemma_path).decode_bytes_per_token
    assert run["model"]["decode_bytes_per_token"] == pytest.approx(real, rel=0.03)
    _, beside = checked(name, str(gemma_path), "--bandwidth", "0.1")
    assert beside["runs"][0]["model"]["source"] == gemma_path.name
    assert beside["runs"][0]["model"]["decode_bytes_per_token"] == real


def test_own_server_log_prompt_evaluated_again(gemma_path: Path) -> None:
    name = "own-llama-server-gemma3-270m-cpu.txt"
    code, d = checked(name)
    assert [(m["kind"], m["n_tokens"], m["tok_s"]) for m in d["measurements"]] == [
        ("prefill", 401, 533.99),
        ("decode", 32, 39.02),
        ("prefill", 401, 542.59),
        ("decode", 32, 39.12),
    ]
    assert causes(d)[0] == "PROMPT_REPROCESSING" and d["runs"][0]["causes"][0]["lines"] == [19]
    assert code == 0 and d["verdict"] == "unknown"  # the server prints no model lines at this verbosity
    code, d = checked(name, str(gemma_path), "--backend", "cpu", "--bandwidth", "0.1")
    assert code == 4 and {m["verdict"] for m in d["measurements"] if m["kind"] == "decode"} == {"impossible"}
    # each decode starts after its 401-token prompt
    assert [m["depth"] for m in d["measurements"] if m["kind"] == "decode"] == [401 + 16, 401 + 16]


def test_own_llama_bench_table() -> None:
    code, d = checked("own-llama-bench-gemma3-270m-cpu.txt", "--bandwidth", "0.1")
    f = d["facts"]
    assert (f["architecture"], f["quant"], f["model_size_bytes"], f["model_params"], f["threads"], f["build"]) == (
        "gemma3",
        "Q4_K - Medium",
        int(235.16 * MiB),
        268_100_000,
        2,
        "b1 (0c1e570)",
    )
    assert [(m["kind"], m["n_tokens"], m["tok_s"]) for m in d["measurements"]] == [
        ("prefill", 64, 535.67),
        ("decode", 16, 42.64),
    ]
    # gemma3 ties its output layer to the embedding: every byte of the file is read, no range
    lo, hi = d["runs"][0]["model"]["decode_bytes_range"]
    assert lo == hi == int(235.16 * MiB)
    assert code == 4 and d["measurements"][1]["verdict"] == "impossible"


def test_server_answers_pasted_as_json() -> None:
    """The recorded answers of tests/data/servers: Ollama's final /api/generate object (259 tokens
    in 4,232.71 ms) and llama-server's `timings` (its own rate: it times n - 1 tokens)."""
    _, d = checked(LOGS.parent / "servers" / "ollama-generate-stream.jsonl")
    assert [(m["kind"], m["n_tokens"]) for m in d["measurements"]] == [("prefill", 26), ("decode", 259)]
    assert rate(d, 1) == pytest.approx(259 / 4.23271, rel=1e-6)
    _, d = checked(LOGS.parent / "servers" / "llama-server-completion-stream.txt")
    assert rate(d, 1) == pytest.approx(0.3080341466119324)


def test_llama_bench_json_pasted_as_a_log(gemma_path: Path) -> None:
    code, d = checked(LOGS.parent / "llama-bench-gemma3-270m.json", "--bandwidth", "0.1")
    f = d["facts"]
    assert d["formats"] == ["llama-bench JSON"]
    assert (f["model_file"], f["backend"], f["quant"], f["threads"]) == (
        "gemma-3-270m-q4_k_m.gguf",
        "cpu",
        "Q4_K - Medium",
        2,
    )
    assert [m["kind"] for m in d["measurements"]] == ["prefill", "decode"]
    assert code == 4 and d["measurements"][1]["verdict"] == "impossible"


def test_more_device_lines_and_printers() -> None:
    run = checked("llama-cpp-rs-64-metal-m1-max.txt")[1]["runs"][0]
    assert [(d["name"], d["backend"], d["uma"]) for d in run["devices"]] == [("Apple M1 Max", "metal", True)]
    assert run["kv_buffers_bytes"] == {"Metal": 2048 * MiB} and run["facts"]["backend"] == "metal"
    assert run["device"].startswith("profile apple-m1-max")
    run = checked("ollama-3158-two-rocm-devices.txt")[1]["runs"][0]
    assert [d["name"] for d in run["devices"]] == ["Radeon RX 7900 XTX"] * 2
    assert (run["facts"]["backend"], run["facts"]["n_gpu_layers_requested"]) == ("rocm", 33)
    assert run["device"].startswith("profile rx-7900-xtx")
    _, d = checked("ollama-11420-rocm-engine-15-of-49.txt")
    assert d["runs"][0]["model_buffers_bytes"] == {"ROCm0": int(19.0 * GiB), "CPU": int(43.8 * GiB)}
    assert (d["facts"]["backend"], d["facts"]["layers_offloaded"], d["facts"]["layers_total"]) == ("rocm", 15, 49)
    assert causes(d)[0] == "PARTIAL_OFFLOAD"
    run = checked("lmstudio-900-debug-log-cpu-only.txt")[1]["runs"][0]
    assert (run["facts"]["backend"], run["facts"]["layers_offloaded"], run["facts"]["n_ctx"]) == ("cpu", 0, 131072)


def test_a_mixture_of_experts_from_its_key_values() -> None:
    """ollama/ollama#5708: Mixtral's loader lines (8 experts, 2 used): the layout holds the
    parameters it has (46.7 B), a token reads the two experts' share."""
    _, d = checked("ollama-5708-mixtral-kv-lines.txt")
    f, model = d["facts"], d["runs"][0]["model"]
    assert (f["architecture"], f["n_layers"], f["n_experts"], f["n_experts_used"], f["n_ff"]) == (
        "llama",
        32,
        8,
        2,
        14336,
    )
    assert any("46.70 B parameters" in a for a in model["assumptions"])
    # about 12.9 B active weights at Q4_K's 4.5 bits: 7.3 GB, far from the 26 GB of the whole file
    assert 6.5e9 < model["decode_bytes_per_token"] < 8e9


# -- fuzz: lines of every printer, their numbers and names replaced --------------------------------
def _templates() -> list[str]:
    """Every line of the logs above that a printer's line starts with (a sample per file)."""
    out: list[str] = []
    for path in sorted(LOGS.glob("*.txt")):
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
        out += lines[:: max(len(lines) // 8, 1)]
    return out


def test_fuzzed_log_lines_are_a_verdict_or_one_line(tmp_path: Path) -> None:
    import itertools
    import re

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from support import clean_output

    from ggprof.verdict.finding import EXIT

    templates = _templates()
    numbers = st.one_of(
        st.integers(min_value=-(10**30), max_value=10**30).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(str),
        st.sampled_from(["0", "-1", "1e400", "nan", "inf", "99999999999999999999", "0,00", "1.2.3", ""]),
    )
    # no control characters: text so full of them is binary data, refused in one line (tested above)
    junk = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)

    def cycled(values: list[str]) -> Callable[[re.Match[str]], str]:
        """A replacement that gives `values` in turn, round and round."""
        it = itertools.cycle(values)
        return lambda _: next(it)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        st.lists(
            st.tuples(st.sampled_from(templates), st.lists(numbers, min_size=8, max_size=8), junk),
            min_size=1,
            max_size=25,
        )
    )
    def check(picked: list[tuple[str, list[str], str]]) -> None:
        lines = []
        for template, values, extra in picked:
            lines.append(re.sub(r"\d+(?:[.,]\d+)?", cycled(values), template) + extra)
        log = tmp_path / "fuzz.log"
        log.write_text("\n".join(lines), errors="surrogatepass")
        judged = in_process("check", "--log", str(log), "--device", "rtx-4090", "--json")
        text = in_process("check", "--log", str(log), "--device", "rtx-4090")
        assert "Traceback" not in judged.stderr + text.stderr and clean_output(text.stdout)
        if judged.exit_code == 2:  # a speed's figure no run can have (1e400 ms, -1 tokens): refused with its line
            assert text.exit_code == 2 and judged.stdout == text.stdout == "" and judged.stderr == text.stderr
            assert re.match(r"Error: fuzz\.log: line \d+: ", text.stderr) and text.stderr.count("\n") == 1
            return
        # otherwise a text log is read whatever its lines say: its exit status is its verdict's, in both formats
        verdict = json.loads(judged.stdout)["verdict"]
        assert judged.exit_code == text.exit_code == int(EXIT[verdict]), (verdict, text.stderr)

    check()


def test_a_gpu_named_for_a_cpu_run_is_not_its_memory() -> None:
    """llama.cpp#9153 ran on the CPU (a build without GPU offload): --device rtx-4090 is not
    the bandwidth its weights were read at."""
    _, d = checked("llamacpp-9153-not-compiled-with-gpu.txt", "--device", "rtx-4090")
    run = d["runs"][0]
    assert run["device"] == "none" and any("is a GPU, but the run was on the CPU" in m for m in run["missing"])


@pytest.mark.parametrize(
    ("name", "on"),
    [
        ("ik-llama-450-deepseek-cpu-buffers.txt", True),  # `flash_attn = 1`
        ("llamacpp-9881-cuda-full-offload.txt", False),  # `flash_attn = 0`
        ("ipex-llm-quickstart-sycl-a770-disable-opt.txt", False),  # `flash_attn    = 0`
    ],
)
def test_a_logs_flash_attention_reaches_the_build_facts(name: str, on: bool) -> None:
    """The context line's flash attention is carried to what the bands and causes read (a ROCm
    prompt with it on names rocWMMA's kernels as a cause to check)."""
    from ggprof.bench.context import RunContext
    from ggprof.logs.parse import parse_lines
    from ggprof.logs.text import read_log
    from ggprof.pipelines.logcheck import build_facts

    (run, *_) = parse_lines(read_log(str(LOGS / name)).lines).runs
    build = build_facts(run, "rocm", RunContext(backends_used=("rocm",)))
    assert build is not None and build.flash_attn is on


@pytest.mark.parametrize(
    ("lines", "on"),
    [
        # llama-context.cpp from September 2025: `-fa auto` resolved on its own line
        (["llama_context: flash_attn    = auto", "llama_context: Flash Attention was auto, set to enabled"], True),
        (["llama_context: flash_attn    = auto", "sched_reserve: Flash Attention was auto, set to disabled"], False),
        # today's (`%s: %s enabled` / `%s: %s not supported, set to disabled`, the probe named Flash Attention)
        (["llama_context: flash_attn            = auto", "sched_reserve: Flash Attention enabled"], True),
        (["llama_context: flash_attn = auto", "sched_reserve: Flash Attention not supported, set to disabled"], False),
        (["llama_context: flash_attn            = enabled"], True),
        (["llama_context: flash_attn            = auto"], None),  # never resolved: not known
        # a draft model's context resolves later: the first (the model's) stands
        (["llama_context: flash_attn    = auto", "sched_reserve: Flash Attention was auto, set to disabled",
          "sched_reserve: Flash Attention was auto, set to enabled"], False),
    ],
)  # fmt: skip
def test_flash_attention_auto_is_read_as_llama_cpp_resolved_it(lines: list[str], on: bool | None) -> None:
    from ggprof.bench.context import RunContext
    from ggprof.logs.parse import parse_lines
    from ggprof.logs.text import Line
    from ggprof.pipelines.logcheck import build_facts

    text = ["llama_model_loader: - kv   0:                       general.architecture str              = llama", *lines]
    (run, *_) = parse_lines(Line(i + 1, t) for i, t in enumerate(text)).runs
    build = build_facts(run, "rocm", RunContext(backends_used=("rocm",)))
    assert (build.flash_attn if build is not None else None) is on

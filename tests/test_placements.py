"""Where the weights live: experts kept in RAM (`-ncmoe N`, llama.cpp's --n-cpu-moe), each
figure computed by hand from the model's shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ggufs import Shape, write_model
from support import in_process

from ggprof.figures import Figure
from ggprof.machine.device import Device, EfficiencyBand
from ggprof.model.spec import load_model
from ggprof.physics.roofline import PredictInputs, predict

BAND = EfficiencyBand(low=0.5, high=0.9, source="test")
# A small MoE: 4 layers, 8 experts of which 2 are used a token, Q8_0 (34 bytes per 32 weights)
MOE = Shape(n_layers=4, n_embd=256, n_heads=8, n_ff=512, vocab=1000, n_experts=8, n_experts_used=2)
EXPERT_BYTES_A_LAYER = 3 * 256 * 512 * 8 * 34 // 32  # gate, up and down: n_embd x n_ff x n_experts each
READ_A_TOKEN_A_LAYER = EXPERT_BYTES_A_LAYER * 2 // 8  # the 2 experts a token uses of 8
GPU_BW, CPU_BW = 1000e9, 50e9


def _devices() -> tuple[Device, Device]:
    gpu = Device(
        id="gpu",
        name="gpu",
        backend="cuda",
        memory_bytes=24 * 10**9,
        memory_source="user",
        bandwidth=Figure(GPU_BW, "user"),
    )
    cpu = Device(
        id="cpu",
        name="cpu",
        backend="cpu",
        memory_bytes=64 * 10**9,
        memory_source="os",
        bandwidth=Figure(CPU_BW, "measured"),
        memory_available_bytes=60 * 10**9,
    )
    return gpu, cpu


def test_experts_of_the_first_layers_are_read_from_ram(tmp_path: Path) -> None:
    spec = load_model(write_model(tmp_path / "moe.gguf", MOE)[0])
    gpu, cpu = _devices()
    all_on_gpu = predict(spec, gpu, PredictInputs(n_gpu_layers=-1), BAND, cpu=cpu)
    assert all_on_gpu.placement.experts_in_ram_decode_bytes == 0
    for n in (1, 2, 4):
        p = predict(spec, gpu, PredictInputs(n_gpu_layers=-1, n_cpu_moe=n), BAND, cpu=cpu)
        in_ram = n * READ_A_TOKEN_A_LAYER
        assert p.placement.experts_in_ram_decode_bytes == in_ram
        assert p.placement.cpu_decode_bytes == in_ram  # the rest, input embedding's row aside, stays on the GPU
        on_gpu = spec.decode_bytes_per_token - in_ram
        assert p.decode_seconds_per_token == pytest.approx(on_gpu / GPU_BW + in_ram / CPU_BW)
        assert p.placement.cpu_weight_bytes >= n * EXPERT_BYTES_A_LAYER  # all its experts' bytes live in RAM
        assert any(rule.startswith("experts in RAM (-ncmoe)") for rule in p.rules)
    beyond = predict(spec, gpu, PredictInputs(n_gpu_layers=-1, n_cpu_moe=99), BAND, cpu=cpu)  # every layer's
    assert beyond.placement.experts_in_ram_decode_bytes == 4 * READ_A_TOKEN_A_LAYER


def test_a_dense_model_has_no_experts_to_keep_in_ram(tmp_path: Path) -> None:
    spec = load_model(write_model(tmp_path / "dense.gguf", Shape(n_layers=4, n_embd=256, n_ff=512))[0])
    gpu, cpu = _devices()
    p = predict(spec, gpu, PredictInputs(n_gpu_layers=-1, n_cpu_moe=4), BAND, cpu=cpu)
    assert p.placement.experts_in_ram_decode_bytes == 0 and p.placement.cpu_decode_bytes == 0


def test_a_llama_bench_row_with_n_cpu_moe_is_judged_on_its_placement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama-bench's JSON states `n_cpu_moe`: the row is judged against the ceiling with those
    experts read from RAM, at the bandwidth given for this host's CPU (a seeded cache)."""
    model = write_model(tmp_path / "moe.gguf", MOE)[0]
    spec = load_model(model)
    on_gpu = spec.decode_bytes_per_token - 4 * READ_A_TOKEN_A_LAYER
    ceiling = 1 / (
        on_gpu / 1008e9 + 4 * READ_A_TOKEN_A_LAYER / _seed_cpu(tmp_path, CPU_BW, monkeypatch)
    )  # RTX 4090: 1008 GB/s
    row = {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "backends": "CUDA", "n_gpu_layers": 99, "n_cpu_moe": 4}
    rows = [row | {"avg_ts": ceiling * 1.3, "stddev_ts": 1.0}]  # above the ceiling with the experts in RAM
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    r = in_process("check", str(model), "--llama-bench", str(tmp_path / "rows.json"), "--device", "rtx-4090", "--json")
    assert r.exit_code == 4, r.stdout + r.stderr
    predicted = json.loads(r.stdout)["predictions"][0]
    assert predicted["decode_ceiling_tok_s"] == pytest.approx(ceiling, rel=1e-6)
    # the same speed with every expert on the GPU is far under that placement's ceiling
    (tmp_path / "rows.json").write_text(json.dumps([{**rows[0], "n_cpu_moe": 0}]))
    r = in_process("check", str(model), "--llama-bench", str(tmp_path / "rows.json"), "--device", "rtx-4090", "--json")
    assert json.loads(r.stdout)["predictions"][0]["decode_ceiling_tok_s"] == pytest.approx(
        1 / (spec.decode_bytes_per_token / 1008e9), rel=1e-6
    )


def test_check_takes_llama_cpps_spelling_of_experts_in_ram(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_model(tmp_path / "moe.gguf", MOE)[0]
    _seed_cpu(tmp_path, CPU_BW, monkeypatch)
    spec = load_model(model)
    on_gpu = spec.decode_bytes_per_token - 2 * READ_A_TOKEN_A_LAYER
    for flag in ("-ncmoe", "--n-cpu-moe"):
        r = in_process("check", str(model), "--tg", "10", "--device", "rtx-4090", "-ngl", "99", flag, "2", "--json")
        assert r.exit_code == 3, r.stderr  # far under its placement's band: slow, not refused
        p = json.loads(r.stdout)["predictions"][0]
        assert p["decode_ceiling_tok_s"] == pytest.approx(1 / (on_gpu / 1008e9 + 2 * READ_A_TOKEN_A_LAYER / CPU_BW))
        assert p["offload"]["cpu_weight_bytes"] >= 2 * EXPERT_BYTES_A_LAYER
        assert any(rule.startswith("experts in RAM (-ncmoe)") for rule in p["rules"])
    every = 1 / ((spec.decode_bytes_per_token - 4 * READ_A_TOKEN_A_LAYER) / 1008e9 + 4 * READ_A_TOKEN_A_LAYER / CPU_BW)
    for flag in ("-cmoe", "--cpu-moe"):  # llama-server's switch: every layer's experts
        r = in_process("check", str(model), "--tg", "10", "--device", "rtx-4090", "-ngl", "99", flag, "--json")
        assert json.loads(r.stdout)["predictions"][0]["decode_ceiling_tok_s"] == pytest.approx(every), flag
    bad = in_process("check", str(model), "--tg", "10", "--device", "rtx-4090", "-ncmoe", "-1")
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: Invalid value for '-ncmoe'")


def _seed_cpu(tmp_path: Path, bytes_per_s: float, monkeypatch: pytest.MonkeyPatch) -> float:
    """This host's CPU measured at `bytes_per_s` (a cache the commands read as a measurement)."""
    from ggprof.machine import cache
    from ggprof.machine.facts import gather_facts
    from ggprof.machine.measurements import BandwidthMeasurement, KernelResult, SgemmMeasurement

    monkeypatch.setenv("GGPROF_CACHE_DIR", str(tmp_path / "cache"))
    reads = KernelResult("read", (bytes_per_s,) * 5)
    seeded = BandwidthMeasurement(
        read=reads, copy=reads, triad=reads, threads=1, array_bytes=64 << 20, repetitions=5, elapsed_s=1.0
    )
    cache.save(gather_facts(), seeded, SgemmMeasurement(1e11, 256, (1e11,)))
    return bytes_per_s


def test_kv_kept_in_ram_is_read_at_the_cpus_bandwidth(tmp_path: Path) -> None:
    """-nkvo (--no-kv-offload): the weights on the GPU, every layer's KV cache in RAM."""
    spec = load_model(write_model(tmp_path / "dense.gguf", Shape(n_layers=4, n_embd=256, n_heads=8, n_ff=512))[0])
    gpu, cpu = _devices()
    depth = 4096
    kv = 4 * 2 * (2 * 32 * 2) * depth  # 4 layers, K and V of 2 KV heads x head dim 32, f16, at depth 4,096
    assert spec.kv_bytes_at(depth) == kv
    p = predict(spec, gpu, PredictInputs(n_gpu_layers=-1, depth=depth, ctx=depth, no_kv_offload=True), BAND, cpu=cpu)
    weights_on_gpu = p.placement.gpu_decode_bytes
    assert p.decode_seconds_per_token == pytest.approx(weights_on_gpu / GPU_BW + kv / CPU_BW)
    assert any(rule.startswith("KV in RAM (-nkvo)") for rule in p.rules)
    on_gpu = predict(spec, gpu, PredictInputs(n_gpu_layers=-1, depth=depth, ctx=depth), BAND, cpu=cpu)
    assert on_gpu.decode_seconds_per_token == pytest.approx((weights_on_gpu + kv) / GPU_BW)


def test_a_pasted_logs_command_line_places_the_experts(tmp_path: Path) -> None:
    """A llama-server log pasted under its command line (`-ngl 99 -ncmoe 4`, llama.cpp's
    spelling, or --n-cpu-moe=4) on an RTX 4090 (its device line): its decode is judged with
    those experts read from the RAM given (--device ddr5-6000-dual, 96 GB/s in its profile), as
    `check -ncmoe 4` judges it; the same log without -ncmoe, with every expert on the GPU;
    without the RAM's bandwidth, not judged, and the log's missing facts say what to give."""
    model = write_model(tmp_path / "moe.gguf", MOE)[0]
    spec = load_model(model)
    body = (
        "ggml_cuda_init: found 1 CUDA devices:\n"
        "  Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes\n"
        "slot print_timing: id  0 | task 0 |        eval time =    1000.00 ms /   128 tokens "
        "(    7.81 ms per token,   128.00 tokens per second)\n"
    )
    kv = spec.kv_bytes_at(64)  # 128 tokens decoded from an empty context: judged at depth 64, KV on the GPU
    on_gpu = spec.decode_bytes_per_token - 4 * READ_A_TOKEN_A_LAYER + kv
    placed = 1 / (on_gpu / 1008e9 + 4 * READ_A_TOKEN_A_LAYER / 96e9)
    cases = (
        ("-ngl 99 -ncmoe 4", placed),
        ("-ngl 99 --n-cpu-moe=4", placed),
        ("-ngl 99", 1 / ((spec.decode_bytes_per_token + kv) / 1008e9)),
    )
    log = tmp_path / "server.txt"
    for flags, ceiling in cases:
        log.write_text(f"$ llama-server -m moe.gguf {flags} -c 4096\n{body}")
        r = in_process("check", str(model), "--log", str(log), "--device", "ddr5-6000-dual", "--json")
        assert r.stdout, r.stderr
        decode = next(m for m in json.loads(r.stdout)["measurements"] if m["kind"] == "decode")
        assert decode["decode_ceiling_tok_s"] == pytest.approx(ceiling, rel=1e-6), flags
    log.write_text(f"$ llama-server -m moe.gguf -ngl 99 -ncmoe 4\n{body}")
    r = in_process("check", str(model), "--log", str(log), "--json")
    d = json.loads(r.stdout)
    decode = next(m for m in d["measurements"] if m["kind"] == "decode")
    assert decode["verdict"] == "unknown" and "the experts of -ncmoe 4" in decode["not_judged"]
    assert any(m.startswith("the system RAM's bandwidth for the experts of -ncmoe 4") for m in d["runs"][0]["missing"])


def test_override_tensor_places_what_its_patterns_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`-ot PATTERN=BUFFER` (--override-tensor): a tensor whose name a pattern is found in goes
    to that buffer, the first matching pattern winning (llama.cpp's order); a CPU buffer is RAM.
    `exps=CPU` keeps every layer's experts in RAM as -cmoe does; a pattern of two blocks, two."""
    model = write_model(tmp_path / "moe.gguf", MOE)[0]
    cpu_bw = _seed_cpu(tmp_path, CPU_BW, monkeypatch)
    total = load_model(model).decode_bytes_per_token

    def ceiling(n_layers_in_ram: int) -> float:
        in_ram = n_layers_in_ram * READ_A_TOKEN_A_LAYER
        return 1 / ((total - in_ram) / 1008e9 + in_ram / cpu_bw)

    cases = (
        (["-ot", "exps=CPU"], 4),
        (["--override-tensor", r"blk\.[01]\.ffn_.*_exps=CPU"], 2),
        (["-ot", r"blk\.0\.=CUDA0", "-ot", "exps=CPU"], 3),  # block 0 matched first: its experts stay
        (["-ot", r"blk\.0\.=CUDA0,exps=CPU"], 3),  # one -ot, pairs separated by commas
    )
    for flags, in_ram in cases:
        r = in_process("check", str(model), "--tg", "10", "--device", "rtx-4090", "-ngl", "99", *flags, "--json")
        p = json.loads(r.stdout)["predictions"][0]
        assert p["decode_ceiling_tok_s"] == pytest.approx(ceiling(in_ram)), flags
        assert any(rule.startswith("tensors in RAM (-ot)") for rule in p["rules"]), flags
    bad = in_process("check", str(model), "--tg", "10", "--device", "rtx-4090", "-ot", "(exps=CPU")
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: Invalid value for '-ot'"), bad.stderr
    # a pasted log's command line, quoted as a shell takes it, and a llama-bench JSON row
    log = tmp_path / "server.txt"
    log.write_text(
        "$ llama-server -m moe.gguf -ngl 99 -ot 'blk\\.[01]\\.ffn_.*_exps=CPU'\n"
        "slot print_timing: id  0 | task 0 |        eval time =    1000.00 ms /   128 tokens "
        "(    7.81 ms per token,   128.00 tokens per second)\n"
    )
    kv = load_model(model).kv_bytes_at(64)  # judged at depth 64, the KV on the GPU; the RAM at --bandwidth 96
    given = ("--device", "rtx-4090", "--bandwidth", "96", "--backend", "cuda", "--json")
    r = in_process("check", str(model), "--log", str(log), *given)
    decode = next(m for m in json.loads(r.stdout)["measurements"] if m["kind"] == "decode")
    in_ram = 2 * READ_A_TOKEN_A_LAYER
    assert decode["decode_ceiling_tok_s"] == pytest.approx(1 / ((total - in_ram + kv) / 1008e9 + in_ram / 96e9))
    row = {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "backends": "CUDA", "n_gpu_layers": 99}
    rows = [row | {"avg_ts": 100.0, "stddev_ts": 1.0, "tensor_buft_overrides": "exps=CPU"}]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    r = in_process("check", str(model), "--llama-bench", str(tmp_path / "rows.json"), "--device", "rtx-4090", "--json")
    assert json.loads(r.stdout)["predictions"][0]["decode_ceiling_tok_s"] == pytest.approx(ceiling(4), rel=1e-6)


def test_a_public_llama_bench_log_with_ncmoe_is_judged_on_its_placement(tmp_path: Path) -> None:
    """schedcp's RTX 5090 log (`llama-bench -ncmoe 64` on gpt-oss-120b: every layer's experts in RAM,
    its build's table without an n_cpu_moe column): the command line places the experts, the decode
    (16.34 tok/s) is judged against that placement with the RAM's bandwidth given, each memory's
    part shown with its source, and the table's `ngl 99` rules out "no -ngl given"."""
    from ggufs import GPT_OSS_120B

    log = Path(__file__).parent / "data" / "logs" / "schedcp-5090-gpt-oss-120b-ncmoe64.txt"
    model = write_model(tmp_path / "gpt-oss-120b-mxfp4.gguf", GPT_OSS_120B)[0]
    r = in_process("check", str(model), "--log", str(log), "--json")  # no RAM bandwidth: not judged
    (run,) = json.loads(r.stdout)["runs"]
    assert any("-ncmoe 64" in m and "--bandwidth" in m for m in run["missing"]), run["missing"]
    r = in_process("check", str(model), "--log", str(log), "--bandwidth", "80", "--json")
    (run,) = json.loads(r.stdout)["runs"]
    decode = next(m for m in run["measurements"] if m["kind"] == "decode")
    assert decode["tok_s"] == pytest.approx(16.34) and decode["verdict"] == "plausible"
    evidence = decode["findings"][0]["evidence"]
    parts = [e for e in evidence if e.startswith("placement: ")]
    assert "rtx-5090" in parts[0] and "[profile: rtx-5090]" in parts[0]
    assert "experts of -ncmoe 64" in parts[1] and "80.0 GB/s [user: --bandwidth 80]" in parts[1]
    ms = [float(p.split("= ")[1].split(" ms")[0]) for p in parts[:2]]
    assert sum(ms) == pytest.approx(1e3 / decode["decode_ceiling_tok_s"], rel=0.01)  # the floor is their sum
    # every routed expert in RAM: that part is most of a token's time
    assert ms[1] > 10 * ms[0]
    assert all(c["code"] != "NO_NGL" for c in run.get("causes", [])), run.get("causes")
    r = in_process("check", "--log", str(log))
    assert "the command gives no -ngl" not in r.stdout


def test_a_real_cuda_fit_log_is_judged_on_what_fit_chose() -> None:
    """A real llama-completion log on an H200 (tests/data/cuda-h200, recorded on a lent machine):
    `--fit on --fit-target 141349` left 1,280 MiB of the GPU usable, so --fit kept 17 layers on it
    with the experts of 11 of them in RAM (its `-lv 4` lines). check --log shows that placement as
    --fit set it, and judges the decode (200 tok/s) on it: with the RAM's bandwidth given, the
    experts in RAM set a ceiling far below the one every weight on the GPU would give; without it,
    the decode is not judged and the RAM's bandwidth is named as missing."""
    log = Path(__file__).parent / "data" / "cuda-h200" / "run1-2-completion-moe-fit-target-lv4.txt"
    r = in_process("check", "--log", str(log), "--json")
    (run,) = json.loads(r.stdout)["runs"]
    assert run["placement"]["flags"].startswith("-ngl 17 -ot ") and "as --fit set it" in run["placement"]["source"]
    decode = next(m for m in run["measurements"] if m["kind"] == "decode")
    assert decode["verdict"] == "unknown" and any("RAM's bandwidth" in m for m in run["missing"])
    r = in_process("check", "--log", str(log), "--bandwidth", "100", "--json")
    (run,) = json.loads(r.stdout)["runs"]
    decode = next(m for m in run["measurements"] if m["kind"] == "decode")
    assert decode["tok_s"] == pytest.approx(200.02) and decode["verdict"] == "plausible"
    # all 571 MB of a token at the H200's 4,800 GB/s would allow ~8,000 tok/s; the experts in RAM at
    # 100 GB/s hold it under 1,000
    assert decode["decode_ceiling_tok_s"] < 1000
    parts = [e for e in decode["findings"][0]["evidence"] if e.startswith("placement: ")]
    assert "in RAM" in parts[1] and "[user: --bandwidth 100]" in parts[1]

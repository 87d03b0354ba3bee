#!/usr/bin/env bash
# Record an NVIDIA machine's facts as test data for the CUDA plugin, build llama-cpp-python
# with CUDA there, and profile synthetic models fully offloaded (-ngl 99).
#
# Run from the repository root on a machine with an NVIDIA GPU and no network. It expects,
# under .whl/: the ggprof wheel (`pip wheel --no-deps . -w .whl`), the wheels of ggprof's
# pure-Python dependencies that machine lacks (gguf, platformdirs, diskcache), and a
# llama-cpp-python sdist with vendor/llama.cpp/{models,docs,benches} removed (to travel).
# Writes at most 8 files into $OUT (default ./device-out).
. "$(dirname "$0")/device_setup.sh"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
{ uname -a; nvcc --version | tail -2; python3 --version; nproc; free -g | head -2; } >>"$LOG" 2>&1

log "record the GPU facts"
nvidia-smi -q >"$OUT/nvidia-smi-q.txt" 2>&1
nvidia-smi --query-gpu=index,name,memory.total,memory.free,clocks.max.memory --format=csv,noheader,nounits >"$OUT/nvidia-smi-query.csv" 2>&1
python3 - >"$OUT/nvml.json" 2>>"$LOG" <<'EOF'
import json, subprocess, pynvml as n
n.nvmlInit()
rows = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    def get(f, *a):
        try:
            v = f(h, *a)
            return v.decode() if isinstance(v, bytes) else v
        except Exception as e:  # record what NVML refuses too
            return f"error: {e}"
    mem = get(n.nvmlDeviceGetMemoryInfo)
    rows.append({
        "index": i, "name": get(n.nvmlDeviceGetName),
        "memory_total_bytes": getattr(mem, "total", None), "memory_free_bytes": getattr(mem, "free", None),
        "max_clock_mem_mhz": get(n.nvmlDeviceGetMaxClockInfo, n.NVML_CLOCK_MEM),
        "max_clock_sm_mhz": get(n.nvmlDeviceGetMaxClockInfo, n.NVML_CLOCK_SM),
        "memory_bus_width_bits": get(n.nvmlDeviceGetMemoryBusWidth),
        "cuda_compute_capability": get(n.nvmlDeviceGetCudaComputeCapability),
        "multiprocessor_count": get(n.nvmlDeviceGetNumGpuCores) if hasattr(n, "nvmlDeviceGetNumGpuCores") else None,
        "power_limit_mw": get(n.nvmlDeviceGetPowerManagementLimit),
        "pcie_max_gen": get(n.nvmlDeviceGetMaxPcieLinkGeneration),
        "pcie_max_width": get(n.nvmlDeviceGetMaxPcieLinkWidth),
    })
out = {"driver": n.nvmlSystemGetDriverVersion(), "nvml": n.nvmlSystemGetNVMLVersion(),
       "cuda_driver": n.nvmlSystemGetCudaDriverVersion_v2(), "devices": rows,
       "query_extra": subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.max.sm,clocks.max.memory,power.limit,pcie.link.gen.max,pcie.link.width.max,compute_cap", "--format=csv"], capture_output=True, text=True).stdout}
print(json.dumps(out, indent=1, default=str))
EOF
python3 -m ggprof host --json >"$OUT/host.json" 2>>"$LOG"
log "host: rc=$?"

log "build llama-cpp-python with CUDA (sm_90)"
mkdir -p /tmp/src && tar xzf .whl/llama_cpp_python-*-slim.tar.gz -C /tmp/src
(
  export CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_NCCL=OFF -DLLAVA_BUILD=OFF -DGGML_NATIVE=ON"
  export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
  timeout "${BUILD_TIMEOUT_S:-400}" python3 -m pip install --no-index --no-deps --no-build-isolation --no-compile \
    --target /tmp/site /tmp/src/llama_cpp_python-* -v >/tmp/build.log 2>&1
  echo "build rc=$?" >>/tmp/build.log
) &
BUILD=$!

log "write the synthetic models while it builds"
mkdir -p /tmp/m
for spec in 8b:q4_0 1b:q4_0 tiny:q4_0 small:q4_0 3b:q4_0 8b:q8_0 8b:f16; do
  python3 -m ggprof synth --shape "${spec%%:*}" --quant "${spec##*:}" -o "/tmp/m/${spec%%:*}-${spec##*:}.gguf" >/dev/null 2>>"$LOG"
done
log "models: $(ls /tmp/m | tr '\n' ' ')"
wait $BUILD
tail -n 25 /tmp/build.log >>"$LOG"
log "built"
python3 -c "import llama_cpp; print('gpu offload:', llama_cpp.llama_supports_gpu_offload())" >>"$LOG" 2>&1

for run in "8b-q4_0" "1b-q4_0" "tiny-q4_0" "8b-q8_0" "3b-q4_0" "small-q4_0" "8b-f16" "8b-q4_0 -d 0,4096"; do
  [ $(($(date +%s) - T0)) -gt "${STOP_AFTER_S:-540}" ] && { log "out of time before $run"; break; }
  set -- $run
  model=/tmp/m/$1.gguf
  shift
  log "profile $model $*"
  timeout 80 python3 -m ggprof profile "$model" -ngl 99 -p 512 -n 128 -r 3 --json --no-save "$@" \
    >/tmp/p.json 2>>"$LOG"
  log "rc=$?"
  python3 -c "import json,sys; print(json.dumps(json.load(open('/tmp/p.json'))))" >>"$OUT/profiles.jsonl" 2>>"$LOG"
done
log "done"

#!/usr/bin/env bash
# Records real llama.cpp CUDA outputs about weight placement (MoE experts in RAM or VRAM,
# --fit's choices, per-device buffer sizes, the memory breakdown) on one GPU, as test data.
#
# Run on the GPU machine from the repository root:   bash .devrec/record.sh
# with .devrec/ holding: this script, bin.tar.xz (llama.cpp's programs built elsewhere for CUDA,
# sm_90), llama.cpp-src.tar.xz (the same source, a fallback build here when those programs
# cannot run), gguf-*.whl, py/ggufs.py and py/ggprof/model/layout.py (the project's GGUF writer).
# Every file is written under $OUT as soon as it exists: meta.txt, logs.txt, bench.jsonl,
# bench_stderr.txt.
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
META=$OUT/meta.txt LOGS=$OUT/logs.txt BENCH=$OUT/bench.jsonl BERR=$OUT/bench_stderr.txt
: >"$META"; : >"$LOGS"; : >"$BENCH"; : >"$BERR"
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
note() { echo "$*" | tee -a "$META"; }
# Every step's time limit is cut to what is left before DEADLINE (seconds after the start), so the
# script ends on its own before the device call's limit; a step with under 10 s left is skipped.
DEADLINE=${RECORD_DEADLINE:-500}
cap() { local left=$((DEADLINE - $(el))); [ "$1" -lt "$left" ] && echo "$1" || echo "$left"; }
# run_to FILE SECONDS CMD...: the exact command line, then its stdout and stderr, then its status
run_to() {
    local f=$1 t
    t=$(cap "$2")
    shift 2
    if [ "$t" -lt 10 ]; then echo "===== skipped (deadline): $*" >>"$f"; return 99; fi
    { echo; echo "===== [t+$(el)s] \$ $(printf '%q ' "$@")"; } >>"$f"
    timeout -k 5 "$t" "$@" >>"$f" 2>&1 </dev/null
    local rc=$?
    echo "===== rc=$rc [t+$(el)s]" >>"$f"
    return $rc
}

note "## date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ)"
note "## uname: $(uname -srm)"
note "## cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) x $(nproc)"
note "## memory: $(free -m | awk '/Mem:/{print $2 " MiB total, " $7 " MiB available"}')"
{ echo "## nvidia-smi"; timeout 20 nvidia-smi; echo "## nvidia-smi --query-gpu"
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,memory.free,pcie.link.gen.current,pcie.link.width.current,clocks.max.sm,clocks.max.mem --format=csv
  echo "## nvcc"; timeout 20 nvcc --version | tail -2; echo "## python3: $(python3 -V 2>&1)"; } >>"$META" 2>&1

# -- the gguf package (pure python) and the project's writer ------------------------------------
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$D"/gguf-*.whl >>"$META" 2>&1
export PYTHONPATH=/tmp/site:$D/py

# -- llama.cpp's programs: the carried build, else one built here --------------------------------
BIN=/tmp/lcbuild/bin
BUILT=carried
tar -C / -xJf "$D/bin.tar.xz" 2>>"$META"
# the CUDA libraries the carried build needs: cuBLAS and the runtime (13.x), the driver's libcuda
LIBDIRS=""
for lib in libcublas.so.13 libcublasLt.so.13 libcudart.so.13; do
    f=$(ls /usr/local/cuda/lib64/$lib /usr/local/cuda*/lib64/$lib /usr/local/cuda*/lib/$lib /usr/local/cuda*/targets/x86_64-linux/lib/$lib \
        /opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib/$lib /usr/local/lib/python3*/dist-packages/nvidia/cu13/lib/$lib 2>/dev/null | head -1)
    [ -z "$f" ] && f=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
    [ -z "$f" ] && f=$(find / -xdev -name "$lib" 2>/dev/null | head -1)
    note "## $lib: ${f:-not found}"
    [ -n "$f" ] && LIBDIRS=$LIBDIRS:$(dirname "$f")
done
export LD_LIBRARY_PATH=$BIN$LIBDIRS:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
note "## LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
{ echo "## ldd libggml-cuda.so (missing)"; ldd $BIN/libggml-cuda.so | grep -i 'not found'; } >>"$META" 2>&1
# RECORD_SMOKE=1: a rehearsal on a machine without a GPU (tiny models, no fallback build)
SMOKE=${RECORD_SMOKE:-0}
if ! timeout 60 $BIN/llama-completion --list-devices 2>>"$META" | tee -a "$META" | grep -q 'CUDA0' && [ "$SMOKE" = 0 ]; then
    note "## the carried programs see no CUDA device: building from source here (FA off, to save time)"
    BUILT=here
    mkdir -p /tmp/lcsrc && tar -C /tmp/lcsrc -xJf "$D/llama.cpp-src.tar.xz"
    b0=$(date +%s)
    (cd /tmp/lcsrc && cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
        -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_COMMIT=0c1e570 -DLLAMA_BUILD_NUMBER=1 >/tmp/cmake.log 2>&1 &&
        cmake --build build -j 16 --target llama-bench llama-server llama-completion llama-fit-params >>/tmp/cmake.log 2>&1)
    note "## build here: rc=$? in $(($(date +%s) - b0)) s"
    tail -30 /tmp/cmake.log >>"$META"
    BIN=/tmp/lcsrc/build/bin
    export LD_LIBRARY_PATH=$BIN:${LD_LIBRARY_PATH}
    timeout 60 $BIN/llama-completion --list-devices >>"$META" 2>&1
fi
note "## programs: $BUILT ($BIN)"
{ echo "## llama-bench --version"; timeout 30 $BIN/llama-bench --version; } >>"$META" 2>&1

# -- synthetic models, written with tests/ggufs.py: headers by its write_model, then data --------
M=/tmp/devrec-models
mkdir -p $M
cat >/tmp/fill.py <<'EOF'
"""Write the two test models: the header by tests/ggufs.py's write_model (Q8_0), then real data
over its sparse data section: Q8_0 blocks of random int8 with a scale giving weights of std
1/sqrt(row length); norms 1.0; the MoE router N(0, 1/row length) so tokens spread over experts."""
import sys, time
from dataclasses import replace
from pathlib import Path
import numpy as np
import gguf
from ggufs import Shape, write_model

out = Path(sys.argv[1])
VOCAB = 32000
# What llama.cpp needs beyond tests/ggufs.py's header to run the model: rope, the norm epsilon and
# a SentencePiece vocabulary with byte tokens, as src/ggprof/model/synth.py writes them.
TOKENS = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
TOKENS += [f"\u2581t{i}" for i in range(VOCAB - len(TOKENS))]
RUNNABLE = {
    "llama.rope.dimension_count": 128, "llama.rope.freq_base": 10000.0,
    "llama.attention.layer_norm_rms_epsilon": 1e-5,
    "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": TOKENS,
    "tokenizer.ggml.scores": [-float(i) for i in range(VOCAB)],
    "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 256 + [1] * (VOCAB - 259),
    "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
    "tokenizer.ggml.add_bos_token": True,
}
MOE = Shape(n_layers=16, n_embd=2048, n_heads=16, n_kv_heads=4, n_ff=768, vocab=VOCAB, context=32768,
            n_experts=32, n_experts_used=4, name="synthetic MoE 16x(32 experts of 768, top 4) Q8_0",
            tokens=False, extra=RUNNABLE)
DENSE = Shape(n_layers=20, n_embd=2048, n_heads=16, n_kv_heads=4, n_ff=8192, vocab=VOCAB, context=32768,
              name="synthetic dense 20 layers of 2048 Q8_0", tokens=False, extra=RUNNABLE)
if len(sys.argv) > 2 and sys.argv[2] == "1":  # the smoke test: the same kinds, tiny
    MOE = replace(MOE, n_embd=256, n_heads=2, n_kv_heads=1, n_ff=128, n_experts=8, n_experts_used=2)
    DENSE = replace(DENSE, n_embd=256, n_heads=2, n_kv_heads=1, n_ff=512)
rng = np.random.default_rng(0)
POOL = rng.integers(-127, 128, size=(1 << 20, 32), dtype=np.int8)  # 1 Mi blocks of quants, reused
BLOCK = np.dtype([("d", "<f2"), ("qs", "i1", 32)])
for name, shape in (("moe.gguf", MOE), ("dense.gguf", DENSE)):
    t0 = time.time()
    path = write_model(out / name, shape)[0]
    r = gguf.GGUFReader(path)
    with open(path, "r+b") as fh:
        for t in r.tensors:
            fh.seek(t.data_offset)
            row = int(t.shape[0])  # ggml ne[0]: the row length
            if t.tensor_type == gguf.GGMLQuantizationType.F32:
                n = int(np.prod(t.shape))
                if "gate_inp" in t.name:
                    fh.write((rng.standard_normal(n) / np.sqrt(row)).astype(np.float32).tobytes())
                else:
                    fh.write(np.ones(n, np.float32).tobytes())
                continue
            assert t.tensor_type == gguf.GGMLQuantizationType.Q8_0, t.tensor_type
            nblocks = int(t.n_bytes) // BLOCK.itemsize
            scale = np.float16(1.0 / (73.3 * np.sqrt(row)))  # int8 uniform in [-127,127]: std 73.3
            start = int(rng.integers(0, len(POOL)))
            done = 0
            while done < nblocks:
                k = min(nblocks - done, len(POOL) - start)
                b = np.empty(k, BLOCK)
                b["d"] = scale
                b["qs"] = POOL[start:start + k]
                fh.write(b.tobytes())
                done += k
                start = 0
    size = path.stat().st_size
    print(f"{name}: {shape.name}; n_layers={shape.n_layers} n_embd={shape.n_embd} n_heads={shape.n_heads} "
          f"n_kv_heads={shape.n_kv_heads} n_ff={shape.n_ff} n_experts={shape.n_experts} "
          f"n_experts_used={shape.n_experts_used} vocab={shape.vocab} context={shape.context} "
          f"tensors={len(r.tensors)} file={size} bytes ({size / 2**30:.3f} GiB), written in {time.time() - t0:.1f} s")
EOF
note "## models [t+$(el)s]"
timeout 120 python3 /tmp/fill.py $M $SMOKE 2>&1 | tee -a "$META"
ls -l $M >>"$META"
MOE=$M/moe.gguf DENSE=$M/dense.gguf
NL=16 HALF=8 DHALF=10

# A CPU with AMX: on the machine that prepared this script, this llama.cpp's AMX path crashed on
# Q8_0 weights (SIGSEGV in ggml_backend_amx_mul_mat in a native build, SIGILL with the
# sapphirerapids variant); if a CPU-only run fails here too, that variant is set aside and the
# next best CPU variant loads.
if grep -q amx_int8 /proc/cpuinfo; then
    if ! run_to "$META" 60 $BIN/llama-bench -m $DENSE -ngl 0 -p 16 -n 2 -r 1 --no-warmup -o jsonl; then
        if [ -f $BIN/libggml-cpu-sapphirerapids.so ]; then
            mv $BIN/libggml-cpu-sapphirerapids.so /tmp/
            note "## AMX: the CPU-only test failed; libggml-cpu-sapphirerapids.so set aside"
            run_to "$META" 60 $BIN/llama-bench -m $DENSE -ngl 0 -p 16 -n 2 -r 1 --no-warmup -o jsonl
        fi
    fi
fi

# --fit's margin: leave about 1280 MiB of the free memory a CUDA process sees (as llama.cpp reports it)
FREE=$(timeout 60 $BIN/llama-completion --list-devices 2>/dev/null | sed -n 's/.*CUDA0:.* \([0-9]*\) MiB free).*/\1/p' | head -1)
[ -z "$FREE" ] && FREE=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
[ -z "$FREE" ] && FREE=4096  # no GPU (the smoke test)
USABLE=1280
TARGET=$((FREE - USABLE))
note "## free MiB seen by llama.cpp: $FREE; --fit-target $TARGET (leaves $USABLE MiB) [t+$(el)s]"


PROMPT="The placement of weights in memory decides how fast a model runs. The experts of a mixture live"
# This build logs --fit's reasoning, the buffer sizes and the memory breakdown at trace level:
# -lv 4 shows them (the default, 3, does not: one run at the end shows what the default prints).
LV="-lv 4"
# llama-server's client: wait for /health, one completion, print its timings
cat >/tmp/client.py <<'PYEOF'
import json, sys, time, urllib.request
for _ in range(120):
    try:
        if urllib.request.urlopen("http://127.0.0.1:18089/health", timeout=2).status == 200:
            break
    except Exception:
        pass
    time.sleep(0.5)
req = urllib.request.Request("http://127.0.0.1:18089/completion", method="POST",
    data=json.dumps({"prompt": sys.argv[1], "n_predict": 32, "seed": 1}).encode(),
    headers={"Content-Type": "application/json"})
body = json.load(urllib.request.urlopen(req, timeout=60))
print("===== client: POST /completion (n_predict 32) -> timings " + json.dumps(body.get("timings")), flush=True)
PYEOF

# llama-bench, JSON lines (every row names its ngl, n_cpu_moe, tensor overrides, ubatch)
bench() {
    local t
    t=$(cap "$BT")
    if [ "$t" -lt 10 ]; then echo "===== skipped (deadline): llama-bench $*" | tee -a "$META" >>"$BERR"; return; fi
    echo "===== [t+$(el)s] \$ $BIN/llama-bench $*" | tee -a "$META" >>"$BERR"
    timeout -k 5 "$t" $BIN/llama-bench "$@" -o jsonl >>"$BENCH" 2>>"$BERR" </dev/null
    echo "===== rc=$? [t+$(el)s]" | tee -a "$META" >>"$BERR"
}

if [ "${RECORD_PART:-1}" = 1 ]; then
# 1. what --fit chooses, printed as arguments
run_to "$LOGS" 60 $BIN/llama-fit-params -m $MOE -fitt $TARGET $LV
# 2. load logs: --fit on with the small margin; then explicit -ngl 99 -ncmoe (--fit at its default)
run_to "$LOGS" 60 $BIN/llama-completion -m $MOE --fit on --fit-target $TARGET -p "$PROMPT" -n 32 -no-cnv --seed 1 $LV
run_to "$LOGS" 60 $BIN/llama-completion -m $MOE -ngl 99 -ncmoe $HALF -p "$PROMPT" -n 32 -no-cnv --seed 1 $LV

# 3. llama-bench
BT=90 bench -m $MOE -ngl 99 -ncmoe 0,4,$HALF,12,$NL -p 512 -n 64 -r 3
BT=40 bench -m $MOE -ngl 99 -ot exps=CPU -p 512 -n 64 -r 3

# 4. llama-server under --fit: one completion, then SIGINT for its memory breakdown
if [ "$(cap 90)" -ge 20 ]; then
    { echo; echo "===== [t+$(el)s] \$ $BIN/llama-server -m $MOE --fit on --fit-target $TARGET --host 127.0.0.1 --port 18089 -np 1 $LV"; } >>"$LOGS"
    timeout -k 5 "$(cap 90)" $BIN/llama-server -m $MOE --fit on --fit-target $TARGET --host 127.0.0.1 --port 18089 -np 1 $LV >>"$LOGS" 2>&1 </dev/null &
    SRV=$!
    timeout "$(cap 75)" python3 /tmp/client.py "$PROMPT" >>"$LOGS" 2>&1
    kill -INT $SRV 2>/dev/null
    wait $SRV
    echo "===== rc=$? (llama-server after SIGINT) [t+$(el)s]" >>"$LOGS"
fi

# 5. the dense model under --fit (layers split), then the rest of the bench
run_to "$LOGS" 60 $BIN/llama-completion -m $DENSE --fit on --fit-target $TARGET -p "$PROMPT" -n 32 -no-cnv --seed 1 $LV
BT=60 bench -m $MOE -ngl 99 -ncmoe $NL,0 -p 512,2048 -ub 128,512,2048 -n 0 -r 3
BT=60 bench -m $DENSE -ngl 0,$DHALF,99 -p 512 -n 64 -r 3
BT=40 bench -m $MOE -fitt $TARGET -p 512 -n 64 -r 3

# 6. what the default verbosity prints of the same --fit run; llama-cli if it runs without a terminal
run_to "$LOGS" 60 $BIN/llama-completion -m $MOE --fit on --fit-target $TARGET -p "$PROMPT" -n 32 -no-cnv --seed 1
run_to "$LOGS" 45 $BIN/llama-cli -m $MOE -ngl 99 -ncmoe $HALF -p "$PROMPT" -n 32 -st --seed 1 $LV
else
# Part 2 (a second device call, RECORD_PART=2): placements given explicitly, --fit off; the model
# read without mmap; llama-server at its default verbosity; benches repeated 5 times.
run_to "$LOGS" 60 $BIN/llama-completion -m $MOE -ngl 99 -ncmoe $HALF --load-mode none -p "$PROMPT" -n 32 -no-cnv --seed 1 $LV
run_to "$LOGS" 60 $BIN/llama-completion -m $MOE --fit off -ngl 99 -ot exps=CPU -p "$PROMPT" -n 32 -no-cnv --seed 1 $LV
run_to "$LOGS" 60 $BIN/llama-completion -m $DENSE --fit off -ngl $DHALF -p "$PROMPT" -n 32 -no-cnv --seed 1 $LV
if [ "$(cap 60)" -ge 20 ]; then
    { echo; echo "===== [t+$(el)s] \$ $BIN/llama-server -m $MOE -ngl 99 -ncmoe $HALF --host 127.0.0.1 --port 18089 -np 1"; } >>"$LOGS"
    timeout -k 5 "$(cap 60)" $BIN/llama-server -m $MOE -ngl 99 -ncmoe $HALF --host 127.0.0.1 --port 18089 -np 1 >>"$LOGS" 2>&1 </dev/null &
    SRV=$!
    timeout "$(cap 50)" python3 /tmp/client.py "$PROMPT" >>"$LOGS" 2>&1
    kill -INT $SRV 2>/dev/null
    wait $SRV
    echo "===== rc=$? (llama-server after SIGINT) [t+$(el)s]" >>"$LOGS"
fi
BT=90 bench -m $MOE -ngl 99 -ncmoe 0,$HALF,$NL -p 512 -n 128 -r 5
BT=40 bench -m $MOE -ngl 99 -ot exps=CPU -p 512 -n 128 -r 5
BT=60 bench -m $MOE -ngl 99 -ncmoe $NL -lm mmap,none -p 512 -n 64 -r 3
BT=60 bench -m $DENSE -ngl $DHALF -p 2048 -ub 128,512,2048 -n 0 -r 3
fi
note "## done [t+$(el)s]"

#!/usr/bin/env bash
# Profile synthetic models on the CPU of a bigger machine (no GPU offload, -ngl 0): does a
# bandwidth-bound CPU run with many cores come out plausible, and how does llama.cpp's
# decode scale from the probe's threads to all the cores?
#
# Run from the repository root on a machine with no network. It expects, under .whl/: the
# ggprof wheel, gguf/platformdirs/diskcache wheels, and a CPU build of llama-cpp-python as a
# wheel (pip caches the one it builds). Writes at most 8 files into $OUT.
. "$(dirname "$0")/device_setup.sh"
{ lscpu; free -g; } >"$OUT/lscpu.txt" 2>&1
python3 -m ggprof host --json >"$OUT/host.json" 2>>"$LOG"
log "host: rc=$?"
mkdir -p /tmp/m
for spec in 8b:q4_0 8b:q8_0 3b:q4_0 1b:q4_0; do
  python3 -m ggprof synth --shape "${spec%%:*}" --quant "${spec##*:}" -o "/tmp/m/${spec%%:*}-${spec##*:}.gguf" >/dev/null 2>>"$LOG"
done
log "models: $(ls /tmp/m | tr '\n' ' ')"
for run in "8b-q4_0" "1b-q4_0" "3b-q4_0" "8b-q8_0" "8b-q4_0 -t 8"; do
  [ $(($(date +%s) - T0)) -gt "${STOP_AFTER_S:-280}" ] && { log "out of time before $run"; break; }
  set -- $run
  model=/tmp/m/$1.gguf
  shift
  log "profile $model -ngl 0 $*"
  timeout 90 python3 -m ggprof profile "$model" -ngl 0 -p 256 -n 64 -r 3 --json --no-save "$@" >/tmp/p.json 2>>"$LOG"
  log "rc=$?"
  python3 -c "import json; print(json.dumps(json.load(open('/tmp/p.json'))))" >>"$OUT/profiles.jsonl" 2>>"$LOG"
done
log "done"

# Sourced by the device_*.sh scripts: $OUT and a timestamped log in it, and the carried
# wheels (.whl/*.whl) installed into /tmp/site for a machine with no network.
set -u
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
T0=$(date +%s)
LOG=$OUT/run.log
log() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$LOG"; }
export PYTHONUNBUFFERED=1

log "install the wheels"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >>"$LOG" 2>&1 || { log "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site

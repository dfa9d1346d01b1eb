#!/usr/bin/env bash
# The GPU kit's entry (copied into the kit as run.sh by make_kit.sh): the
# whole GPU run in one pass, within about 8 minutes, every part bounded by
# its own timeout and run whatever the parts before it did (it never stops
# at the first failure):
#   env        the machine: GPU, driver, libraries the kit's binaries resolve
#   server     the kit's server starts and answers a ping through the kit's
#              libraries (and the zmq stand-in where pyzmq is missing)
#   kernel     cuda_kv_copy_test: the CUDA kernels against the host emulation
#   e2e        test_gpu_cuda.py (ctypes workers) and test_gpu_torch.py (real
#              PyTorch tensors as vLLM makes them; a worker killed mid-store)
#   sanitizer  compute-sanitizer memcheck and racecheck over kernel cases
#   bench      gpu_bench.py: store/retrieve GB/s against cudaMemcpyAsync for
#              Llama-3-8B, a 70B TP-8 rank and MLA
# Results, at most 8 files (what the device returns): summary.txt (one line
# per part: PASS, FAIL, TIMEOUT or NO DEVICE, with seconds), env.txt,
# server.log, kernel.log, e2e.log, sanitizer.log, bench.log, bench.json.
#
#   bash run.sh [RESULTS_DIR]     (default: $OUT where the device tool sets
#                                  it, else ./gpu_kit_results)
# Exit 0 when no part failed or timed out.
set -uo pipefail

KIT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RESULTS="${1:-${OUT:-$PWD/gpu_kit_results}}"
mkdir -p "$RESULTS"
SUMMARY="$RESULTS/summary.txt"
: >"$SUMMARY"
BUDGET_S="${LMC_KIT_BUDGET_S:-480}"
STARTED=$(date +%s)
export PATH="$PATH:/usr/local/cuda/bin"
FAILED=0

elapsed() { echo $(($(date +%s) - STARTED)); }
record() {  # part verdict seconds [note]
  printf '%s: %s (%ss)%s\n' "$1" "$2" "$3" "${4:+ $4}" | tee -a "$SUMMARY"
  case "$2" in FAIL*|TIMEOUT*) FAILED=1 ;; esac
}

# A GPU is there when the driver lists one.
HAVE_GPU=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then HAVE_GPU=1; fi

# The Python that has msgpack and numpy (PyTorch's, on the GPU machine);
# pyzmq is replaced by the kit's ctypes stand-in where it is missing.
PY=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import msgpack, numpy' 2>/dev/null; then
    PY="$(command -v "$candidate")"
    "$candidate" -c 'import torch' 2>/dev/null && break
  fi
done
export PYTHONPATH="$KIT/python${PYTHONPATH:+:$PYTHONPATH}"
# (LMC_KIT_ZMQ_SHIM=1 uses the stand-in anyway: the dry run proves it so.)
if [ -n "$PY" ] && { [ "${LMC_KIT_ZMQ_SHIM:-0}" = 1 ] || ! "$PY" -c 'import zmq' 2>/dev/null; }; then
  export PYTHONPATH="$KIT/python/zmq_shim:$PYTHONPATH"
  export LMC_LIBZMQ="$KIT/lib/libzmq.so.5"
fi
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
export LMCACHE_SERVER_BINARY="$KIT/bin/lmcache-server"
export KIT RESULTS HAVE_GPU PY

# run_part NAME TIMEOUT_S LOG CLASSIFIER COMMAND...: runs COMMAND with its
# output in LOG, bounded by TIMEOUT_S and the budget left; CLASSIFIER (a
# function given the exit status and the log) prints the verdict.
run_part() {
  local name="$1" limit="$2" log="$3" classify="$4"
  shift 4
  local left=$((BUDGET_S - $(elapsed)))
  if [ "$left" -le 10 ]; then
    record "$name" "FAIL: not run, the time budget (${BUDGET_S}s) is spent" 0
    return
  fi
  [ "$limit" -gt "$left" ] && limit="$left"
  local t0 rc
  t0=$(date +%s)
  if declare -F "$1" >/dev/null; then
    # A function of this script: timeout runs programs, so in a bash that has it.
    export -f "$1"
    timeout -k 10 "$limit" bash -c "$1" >>"$log" 2>&1
  else
    timeout -k 10 "$limit" "$@" >>"$log" 2>&1
  fi
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    record "$name" "TIMEOUT after ${limit}s" $(($(date +%s) - t0))
  else
    record "$name" "$("$classify" "$rc" "$log")" $(($(date +%s) - t0))
  fi
}

# Verdicts: a part that ran on no device says NO DEVICE; else PASS or FAIL.
gtest_verdict() {
  local passed skipped
  passed="$(grep -E '^\[  PASSED  \] [0-9]+' "$2" | awk '{n += $4} END {print n + 0}')"
  skipped="$(grep -c '^\[  SKIPPED \]' "$2")"
  if [ "$1" -ne 0 ]; then
    echo "FAIL (exit $1): $(grep -m1 -E 'Failure|FAILED|error' "$2" | cut -c1-200)"
  elif [ "$HAVE_GPU" -eq 0 ] && grep -q 'no CUDA device visible' "$2"; then
    echo "NO DEVICE (the binary started; every case skipped: no CUDA device visible)"
  elif [ "$skipped" -gt 0 ]; then
    # On the GPU machine a skip means the runtime did not see the device.
    echo "FAIL ($skipped cases skipped with a GPU present: $(grep -m1 -A1 'Skipped' "$2" | tail -n1 | cut -c1-150))"
  else
    echo "PASS (${passed:-?} cases)"
  fi
}
pytest_verdict() {  # over every pytest summary line in the log
  local last
  last="$(grep -E '^=*\s*[0-9]+ (passed|failed|skipped|error)' "$2" | sed 's/=//g' | paste -sd';')"
  if [ "$1" -eq 0 ] && [ "$HAVE_GPU" -eq 0 ] && ! grep -qE '[0-9]+ passed' <<<"$last"; then
    echo "NO DEVICE (pytest started: $last)"
  elif [ "$1" -eq 0 ] && ! grep -qE 'skipped' <<<"$last"; then
    echo "PASS ($last)"
  elif [ "$1" -eq 0 ]; then
    echo "FAIL (something skipped on the GPU machine: $last)"
  else
    echo "FAIL (exit $1: $last)"
  fi
}
script_verdict() {  # exit 77 with "SKIPPED: reason" is the project's skip
  if [ "$1" -eq 77 ] && [ "$HAVE_GPU" -eq 0 ]; then
    echo "NO DEVICE ($(grep -m1 -o 'SKIPPED: .*' "$2" | cut -c10-200))"
  elif [ "$1" -eq 0 ]; then
    echo "PASS"
  else
    echo "FAIL (exit $1): $(tail -n1 "$2" | cut -c1-200)"
  fi
}
plain_verdict() { [ "$1" -eq 0 ] && echo PASS || echo "FAIL (exit $1): $(tail -n1 "$2" | cut -c1-200)"; }

# --- env
env_part() {
  echo "== kit"; cat "$KIT/MANIFEST"
  echo "== machine"; uname -a; ldd --version | head -n1; nproc; free -g | head -n2
  echo "== gpu"; nvidia-smi 2>&1 | head -n 20 || echo "no nvidia-smi"
  echo "== python: ${PY:-none}"
  [ -n "$PY" ] && "$PY" -c 'import sys, numpy, msgpack; print(sys.version.split()[0], "numpy", numpy.__version__, "msgpack", msgpack.version)'
  [ -n "$PY" ] && "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -n1
  [ -n "$PY" ] && "$PY" -c 'import zmq; print("zmq from", zmq.__file__)'
  echo "== compute-sanitizer: $(command -v compute-sanitizer || echo none)"
  echo "== libraries the kit's binaries resolve"
  local missing=0
  for elf in "$KIT"/bin/*; do
    echo "-- $(basename "$elf")"; ldd "$elf"
    ldd "$elf" | grep -q 'not found' && missing=1
  done
  [ -n "$PY" ] || { echo "no python3 with msgpack and numpy"; return 1; }
  return "$missing"
}
run_part env 60 "$RESULTS/env.txt" plain_verdict env_part

# --- server: starts, serves a ping through the kit's libraries
server_part() {
  local dir backend=emulated
  dir="$(mktemp -d /tmp/lmc_kit_server.XXXXXX)"
  [ "$HAVE_GPU" -eq 1 ] && backend=cuda
  "$PY" - "$dir" "$backend" <<'EOF'
import os, sys
from mp_client import Client, free_tcp_port, start_server
import zmq
tmp, backend = sys.argv[1], sys.argv[2]
srv = start_server(os.environ["LMCACHE_SERVER_BINARY"], f"ipc://{tmp}/lmc.sock", f"{tmp}/server.log",
                   ["--l1-size-gb", "0.25", "--port", str(free_tcp_port()), "--http-port", "0",
                    "--drain-timeout-seconds", "0", "--gpu-backend", backend])
ctx = zmq.Context()
try:
    c = Client(ctx, srv.url)
    assert c.call("ping", None) is True
    info = c.call("server_info")
    print("served a ping; gpu backend", backend, "; server_info keys:", sorted(info)[:8])
    c.close()
finally:
    ctx.destroy(linger=0)
    rc = srv.stop(timeout=60)
    print(srv.log())
    assert rc == 0, f"the server exited with {rc}"
EOF
}
run_part server 60 "$RESULTS/server.log" plain_verdict server_part

# --- kernel
run_part kernel 120 "$RESULTS/kernel.log" gtest_verdict "$KIT/bin/cuda_kv_copy_test" --gtest_brief=1

# --- e2e: one pytest per file, PyTorch's first (a process that imports
# PyTorch before the zmq stand-in loads PyTorch's own copies of the
# libraries both use)
e2e_part() {
  local rc=0 file
  for file in test_gpu_torch.py test_gpu_cuda.py; do
    "$PY" -m pytest -q -rs -p no:cacheprovider "$KIT/python/$file" || rc=$?
  done
  return "$rc"
}
run_part e2e 200 "$RESULTS/e2e.log" pytest_verdict e2e_part

# --- sanitizer: memcheck over a few cases of every kind, racecheck over fewer
sanitizer_part() {
  if ! command -v compute-sanitizer >/dev/null; then
    echo "SKIPPED: no compute-sanitizer here"
    return 77
  fi
  local rc=0
  compute-sanitizer --tool memcheck --error-exitcode 9 "$KIT/bin/cuda_kv_copy_test" --gtest_brief=1 \
    --gtest_filter='*case1_*:*case5_*:*case10_*:*layout4_*_hs72_*:*hs656*:*groups2*:*pinned*' || rc=$?
  compute-sanitizer --tool racecheck --error-exitcode 9 "$KIT/bin/cuda_kv_copy_test" --gtest_brief=1 \
    --gtest_filter='*case1_*:*groups2*' || rc=$?
  return "$rc"
}
sanitizer_verdict() {
  if [ "$HAVE_GPU" -eq 0 ]; then
    if [ "$1" -eq 77 ]; then echo "NO DEVICE (and no compute-sanitizer)"; return; fi
    gtest_verdict "$1" "$2"
    return
  fi
  if [ "$1" -eq 77 ]; then echo "FAIL (no compute-sanitizer on the GPU machine)"; return; fi
  if grep -q 'Device not supported' "$2"; then
    echo "FAIL (compute-sanitizer: 'Device not supported' on this machine, an environment limit, not a finding)"
  elif [ "$1" -eq 0 ] && grep -q 'ERROR SUMMARY: 0 errors' "$2" && ! grep -qE '(ERROR|RACECHECK) SUMMARY: [1-9]' "$2" &&
       ! grep -q '^\[  SKIPPED \]' "$2"; then
    echo "PASS (memcheck and racecheck: 0 errors, 0 hazards)"
  else
    echo "FAIL (exit $1): $(grep -m1 -E '(ERROR|RACECHECK) SUMMARY: [1-9]|Invalid|Race|SKIPPED' "$2" | cut -c1-200)"
  fi
}
run_part sanitizer 120 "$RESULTS/sanitizer.log" sanitizer_verdict sanitizer_part

# --- bench
run_part bench 150 "$RESULTS/bench.log" script_verdict \
  "$PY" "$KIT/python/gpu_bench.py" --server "$KIT/bin/lmcache-server" --json "$RESULTS/bench.json"

echo "total: $(elapsed)s of a ${BUDGET_S}s budget; results in $RESULTS" | tee -a "$SUMMARY"
exit "$FAILED"

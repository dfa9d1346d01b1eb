#!/usr/bin/env bash
# One entry point for setting up, building, running and testing lmcache-server
# on Debian 12. Installs missing packages with apt (as root, or through sudo).
#
#   tools/dev.sh run [server flags...]   set up, build Release, start lmcache-server
#   tools/dev.sh test                    set up, build, run the whole suite:
#                                        Release (gcc; the tests that never start
#                                        a thread run under ASan), the GPU kit's dry run
#                                        (tools/gpu_kit/), the container image (podman), the
#                                        server-only build (no hiredis), then
#                                        ASan+UBSan with the fuzz targets
#                                        (clang, libFuzzer), then TSan (clang) on the tests
#                                        that start threads or processes; both clang
#                                        builds enforce -Wthread-safety and keep assertions on
#   tools/dev.sh test --fast             Release build and tests only
#                                        Either ends with what was skipped and why; with
#                                        CI=true a skip of something CI installs fails
#   tools/dev.sh build [release|asan|tsan]
#   tools/dev.sh deps                    install the packages only
#   tools/dev.sh metrics-doc             regenerate docs/metrics.md from the stats schema
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="${JOBS:-$(nproc)}"

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libspdlog-dev libcli11-dev
  libxxhash-dev librust-blake3-dev nlohmann-json3-dev libcpp-httplib-dev libssl-dev libucx-dev prometheus-cpp-dev liburing-dev
  libzstd-dev libcurl4-openssl-dev libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev llvm-14 lld
  b3sum iproute2 iptables ucx-utils redis-server libhiredis-dev prometheus python3-yaml patchelf openssl
  etcd-server
  ceph-mon ceph-osd radosgw ceph-common uuid-runtime curl
  python3-zmq python3-msgpack python3-numpy python3-pytest
  chromium
)

# Each line carries the run's elapsed time (m:ss), so a slow stage shows in the log.
log() { printf '\033[1m[dev.sh %d:%02d] %s\033[0m\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

install_deps() {
  local missing=()
  for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Ninja for every tree configured here from scratch (a tree configured with
# another generator keeps it): on 2 cores it schedules the ~340 edges of a
# tree without make's per-target dependency scans and recursive calls.
export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"

# Unity builds (CMAKE_UNITY_BUILD: each target's sources compiled in batches
# of 8, so a batch parses the heavy headers once): about half the compile time
# of a whole tree on 2 cores. LMC_UNITY_BUILD=OFF for a tree you rebuild file
# by file.
UNITY="${LMC_UNITY_BUILD:-ON}"

# Stage times of `test`, printed as a table at its end ("label<TAB>seconds").
STAGES=""
# stage_done LABEL START: records the stage that began at START (in $SECONDS).
stage_done() { [ -z "$STAGES" ] || printf '%s\t%d\n' "$1" $((SECONDS - $2)) >>"$STAGES"; }
# The total is the run's elapsed time: some stages run side by side.
print_stage_times() {
  [ -s "$STAGES" ] || return 0
  log "stage times:"
  awk -F'\t' -v elapsed="$SECONDS" '{ printf "  %-34s %3d:%02d\n", $1, $2 / 60, $2 % 60 }
    END { printf "  %-34s %3d:%02d\n", "total (elapsed)", elapsed / 60, elapsed % 60 }' "$STAGES" >&2
}

# build <flavour>: configures and builds into build/ (release), build-asan/, build-tsan/.
build() {
  local flavour="${1:-release}" dir args=() start=$SECONDS
  case "$flavour" in
    # RELEASE_SINGLE_THREADED=OFF: `test` without --fast, whose ASan tree runs those.
    release) dir="$ROOT/build"
             args=(-DCMAKE_BUILD_TYPE=Release
                   -DLMC_BUILD_SINGLE_THREADED_TESTS="${RELEASE_SINGLE_THREADED:-ON}") ;;
    # Sanitizer builds keep assertions (LMC_DCHECK, Mutex::AssertHeld) on: no NDEBUG.
    # -O1 and line tables only: what the sanitizers' reports need (function,
    # file:line), about a tenth less compile time than -O2 -g and far smaller
    # objects to link.
    asan) dir="$ROOT/build-asan"
          args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only"
                -DLMC_SANITIZE=address,undefined -DLMC_BUILD_FUZZERS=ON
                -DLMC_FUZZ_SECONDS="${LMC_FUZZ_SECONDS:-30}" -DLMC_BUILD_BENCH=OFF
                -DLMC_ENABLE_CUDA=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++) ;;
    tsan) dir="$ROOT/build-tsan"
          args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only"
                -DLMC_SANITIZE=thread -DLMC_BUILD_BENCH=OFF
                -DLMC_ENABLE_CUDA=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++) ;;
    *) echo "unknown build flavour: $flavour (release, asan, tsan)" >&2; exit 2 ;;
  esac
  log "building $flavour in ${dir#"$ROOT"/}"
  cmake -S "$ROOT" -B "$dir" "${args[@]}" -DCMAKE_UNITY_BUILD="$UNITY" >/dev/null
  cmake --build "$dir" -j "$JOBS"
  BUILD_DIR="$dir"
  stage_done "build $flavour" "$start"
}

# The resources ctest shares among the tests' RESOURCE_GROUPS: "shm:N" (a
# test holding up to N GiB of /dev/shm and memory at once), one slot per
# GiB of 4/5 of what both have free, at least the largest test's 6; and
# "cpu" (a test keeping servers busy: cpu:2 for several), one slot more than
# this machine's cores, or one per core in a sanitizer's tree, where every
# server is several times slower (tests/CMakeLists.txt, at its end).
# write_resource_spec FILE [sanitized]
write_resource_spec() {
  local shm_kib mem_kib gib cpu_slots=$(($(nproc) + 1))
  [ "${2:-}" = sanitized ] && cpu_slots=$(nproc)
  shm_kib="$(df -k --output=avail /dev/shm | tail -n1 | tr -d ' ')"
  mem_kib="$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)"
  gib=$(( (shm_kib < mem_kib ? shm_kib : mem_kib) * 4 / 5 / 1048576 ))
  [ "$gib" -ge 6 ] || gib=6
  [ "$cpu_slots" -ge 2 ] || cpu_slots=2
  printf '{"version": {"major": 1, "minor": 0}, "local": [{"shm": [{"id": "dev_shm", "slots": %d}], "cpu": [{"id": "cores", "slots": %d}]}]}\n' \
    "$gib" "$cpu_slots" >"$1"
}

# Every skip of the run, one line each (label, test, reason): see tools/skipped_tests.py.
SKIPS=""

# The failed tests' own output, trimmed to what names the cause: printed
# last, after the skip list, so the tail of a failed run shows why.
FAILURES=""

# run_ctest DIR PARALLEL [ctest args...]: runs one build's suite, PARALLEL
# tests at a time; on a failure, ends the run with the skip list and the
# failing tests' output (the later stages do not run).
run_ctest() {
  local dir="$1" parallel="$2" label="${1#"$ROOT"/}" rc=0 start=$SECONDS
  shift 2
  log "testing $label ($parallel at a time)"
  local sanitized=""
  grep -q '^LMC_SANITIZE:STRING=.' "$dir/CMakeCache.txt" && sanitized=sanitized
  write_resource_spec "$dir/ctest_resources.json" $sanitized
  ctest --test-dir "$dir" --output-on-failure -j "$parallel" \
    --resource-spec-file "$dir/ctest_resources.json" "$@" || rc=$?
  stage_done "test $label" "$start"
  python3 "$ROOT/tools/skipped_tests.py" collect "$label" \
    "$dir/Testing/Temporary/LastTest.log" >>"$SKIPS"
  if [ "$rc" -ne 0 ]; then
    python3 "$ROOT/tools/failed_tests.py" "$label" "$dir/Testing/Temporary/LastTest.log" \
      >>"$FAILURES" || true
    fail_run "ctest in $label exited with $rc"
  fi
}

# Prints the skip list and the failures gathered so far, then exits 1.
fail_run() {
  stop_beside
  print_stage_times
  report_skips || true
  if [ -s "$FAILURES" ]; then
    log "what failed (each test's failure lines, then its last lines):"
    cat "$FAILURES"
  fi
  log "FAILED: $*"
  exit 1
}

# run_script_stage LABEL DESCRIPTION COMMAND...: a stage that is a script
# of its own. Exit 77 ("SKIPPED: <reason>", this machine cannot run it)
# joins the skip list with its reason; any other failure ends the run with
# the script's last lines.
run_script_stage() {
  local label="$1" what="$2" out rc start=$SECONDS
  shift 2
  log "$what"
  out="$(mktemp /tmp/lmcache_stage_out.XXXXXX)"
  set +e
  "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  set -e
  stage_done "$label" "$start"
  if [ "$rc" -eq 77 ]; then
    printf '%s\t%s\t%s\n' "$label" "${1#"$ROOT"/}" \
      "$(sed -n 's/.*SKIPPED: //p' "$out" | head -n1)" >>"$SKIPS"
  elif [ "$rc" -ne 0 ]; then
    { echo "=== FAILED: $what ==="; tail -n 40 "$out"; } >>"$FAILURES"
    rm -f "$out"
    fail_run "$what: ${1#"$ROOT"/} exited with $rc"
  fi
  rm -f "$out"
}

# Prints the skip list; under CI=true a skip of something CI installs is a
# failure (returns 1).
report_skips() {
  local ci_flag=()
  [ "${CI:-}" = "true" ] && ci_flag=(--ci)
  if ! python3 "$ROOT/tools/skipped_tests.py" summary "$SKIPS" "${ci_flag[@]}"; then
    log "FAILED: CI=true and checks were skipped that CI installs what they need for"
    return 1
  fi
}

# Work that compiles beside the stages that leave cores idle: a test stage
# waits on servers, sockets and timeouts (the sanitizer suites used 1.2 to
# 1.75 of 2 cores), and podman's image build on its disk. At the lowest
# priority, so the tests keep every core they ask for; its output goes to a
# file, shown if it fails. One at a time.
BESIDE_PID=""
BESIDE_LOG=""
BESIDE_WHAT=""
# start_beside WHAT COMMAND...: COMMAND may be a function of this script.
start_beside() {
  BESIDE_WHAT="$1"
  shift
  BESIDE_LOG="$(mktemp /tmp/lmcache_beside.XXXXXX)"
  log "$BESIDE_WHAT: beside the next stages, at the lowest priority"
  # In a process group of its own (job control on for this one start), so a
  # failed run or an interrupt ends all of its compilers at once.
  set -m
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    "$@"
  ) >"$BESIDE_LOG" 2>&1 &
  BESIDE_PID=$!
  set +m
}
stop_beside() {
  [ -z "$BESIDE_PID" ] || kill -TERM -- "-$BESIDE_PID" 2>/dev/null || true
  BESIDE_PID=""
}
# finish_beside: waits for it (the wait is a stage of its own); a failure
# ends the run with its last lines.
finish_beside() {
  local rc=0 start=$SECONDS
  wait "$BESIDE_PID" || rc=$?
  stage_done "  (waiting for the build above)" "$start"
  BESIDE_PID=""
  if [ "$rc" -ne 0 ]; then
    { echo "=== FAILED: $BESIDE_WHAT ==="; tail -n 40 "$BESIDE_LOG"; } >>"$FAILURES"
    fail_run "$BESIDE_WHAT exited with $rc"
  fi
  grep -F "[dev.sh" "$BESIDE_LOG" >&2 || true
  tail -n 1 "$BESIDE_LOG" >&2
  rm -f "$BESIDE_LOG"
}
server_only_then_asan() {
  log "server-only build (no resp adapter, no tools)"
  local start=$SECONDS
  "$ROOT/tools/server_only_check.sh"
  stage_done "server-only build" "$start"
  build asan
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  deps) install_deps ;;
  build) install_deps; build "${1:-release}" ;;
  run)
    install_deps
    build release
    log "starting lmcache-server $*"
    exec "$ROOT/build/src/lmcache-server" "$@"
    ;;
  test)
    SKIPS="$(mktemp /tmp/lmcache_skips.XXXXXX)"
    FAILURES="$(mktemp /tmp/lmcache_failures.XXXXXX)"
    STAGES="$(mktemp /tmp/lmcache_stages.XXXXXX)"
    trap 'stop_beside; rm -f "$SKIPS" "$FAILURES" "$STAGES" "$BESIDE_LOG"' EXIT
    install_deps
    fast=""
    [ "${1:-}" = "--fast" ] && fast=yes
    # The tests that never start a thread (LMC_SINGLE_THREADED_TESTS) are half
    # the test compile time of a tree: the full suite builds and runs them in
    # the ASan tree only, under its sanitizers and the same single-thread
    # guard; --fast (Release alone) runs them here.
    release_tests=()
    if [ -z "$fast" ]; then
      RELEASE_SINGLE_THREADED=OFF
      release_tests=(-LE single_thread)
    fi
    build release
    [ -z "$fast" ] && start_beside "server-only + ASan builds" server_only_then_asan
    # Twice as many tests as cores: in Release a third of the run's CPU time
    # was idle at one per core (tests waiting on servers, timeouts, disks);
    # the resource groups still keep the heavy ones apart.
    run_ctest "$ROOT/build" $((JOBS * 2)) "${release_tests[@]}"
    if [ -z "$fast" ]; then
      # The GPU kit builds from this Release tree, fits the device, starts,
      # and says "no device" for every GPU part (no CUDA toolkit: skipped).
      run_script_stage gpu-kit "GPU kit (dry run)" \
        "$ROOT/tools/gpu_kit/make_kit.sh" --build-dir "$ROOT/build" --dry-run
      # The image is built and run for real (podman); where this machine
      # cannot run a container engine it is skipped, and listed below.
      # From the Release build above: compiling the server again inside the
      # image would add about ten minutes and prove nothing the host build
      # did not (the image's configure still proves its package list).
      run_script_stage container "container image test" "$ROOT/tools/container_test.sh" \
        --prebuilt "$ROOT/build"
      finish_beside
      start_beside "TSan build" build tsan
      # One test per core: instrumented tests keep the cores busy (and the
      # grouped ones take cpu slots there, see tests/CMakeLists.txt's end).
      run_ctest "$ROOT/build-asan" "$JOBS"   # sanitizer options come from the tests' environment
      finish_beside
      # Without the tests that never start a second thread: that tree does
      # not build them (LMC_SINGLE_THREADED_TESTS in tests/CMakeLists.txt).
      run_ctest "$ROOT/build-tsan" "$JOBS" -LE single_thread
    fi
    print_stage_times
    report_skips || exit 1
    log "all tests passed"
    ;;
  metrics-doc)
    install_deps
    build release
    LMC_WRITE_METRICS_DOC=1 "$ROOT/build/tests/metrics_doc_test" >/dev/null
    log "docs/metrics.md regenerated from the stats schema"
    ;;
  *)
    sed -n '2,20p' "$0" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# One entry point for setting up, building, running and testing lmcache-server
# on Debian 12. Installs missing packages with apt (as root, or through sudo).
#
#   tools/dev.sh run [server flags...]   set up, build Release, start lmcache-server
#   tools/dev.sh test                    set up, build, run the whole suite:
#                                        Release (gcc), the container image (podman), then
#                                        ASan+UBSan with the fuzz targets
#                                        (clang, libFuzzer), then TSan (clang); both clang
#                                        builds enforce -Wthread-safety and keep assertions on
#   tools/dev.sh test --fast             Release build and tests only
#   tools/dev.sh build [release|asan|tsan]
#   tools/dev.sh deps                    install the packages only
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="${JOBS:-$(nproc)}"

PACKAGES=(
  build-essential cmake pkg-config git
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libspdlog-dev libcli11-dev
  libxxhash-dev librust-blake3-dev nlohmann-json3-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  b3sum redis-server libhiredis-dev prometheus python3-yaml
  python3-zmq python3-msgpack python3-numpy python3-pytest
)

log() { printf '\033[1m[dev.sh] %s\033[0m\n' "$*" >&2; }

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

# build <flavour>: configures and builds into build/ (release), build-asan/, build-tsan/.
build() {
  local flavour="${1:-release}" dir args=()
  case "$flavour" in
    release) dir="$ROOT/build"; args=(-DCMAKE_BUILD_TYPE=Release) ;;
    # Sanitizer builds keep assertions (LMC_DCHECK, Mutex::AssertHeld) on: no NDEBUG.
    asan) dir="$ROOT/build-asan"
          args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g"
                -DLMC_SANITIZE=address,undefined -DLMC_BUILD_FUZZERS=ON
                -DLMC_FUZZ_SECONDS="${LMC_FUZZ_SECONDS:-30}" -DLMC_BUILD_BENCH=OFF
                -DLMC_ENABLE_CUDA=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++) ;;
    tsan) dir="$ROOT/build-tsan"
          args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g"
                -DLMC_SANITIZE=thread -DLMC_BUILD_BENCH=OFF
                -DLMC_ENABLE_CUDA=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++) ;;
    *) echo "unknown build flavour: $flavour (release, asan, tsan)" >&2; exit 2 ;;
  esac
  log "building $flavour in ${dir#"$ROOT"/}"
  cmake -S "$ROOT" -B "$dir" "${args[@]}" >/dev/null
  cmake --build "$dir" -j "$JOBS"
  BUILD_DIR="$dir"
}

run_ctest() {
  local dir="$1"
  shift
  log "testing ${dir#"$ROOT"/}"
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS" "$@"
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
    install_deps
    build release
    run_ctest "$ROOT/build"
    if [ "${1:-}" != "--fast" ]; then
      # The image is built and run for real (podman); it says so and passes
      # where this machine cannot run a container engine.
      log "container image test"
      "$ROOT/tools/container_test.sh"
      build asan
      run_ctest "$ROOT/build-asan"   # sanitizer options come from the tests' environment
      build tsan
      run_ctest "$ROOT/build-tsan"
    fi
    log "all tests passed"
    ;;
  *)
    sed -n '2,13p' "$0" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# The GPU kit: everything the whole GPU run needs, in one folder that travels
# with one call of the device tool, so that a session lent a GPU spends its
# minutes running, not building (tools/gpu_kit/README.md).
#
#   tools/gpu_kit/make_kit.sh [--build-dir DIR] [--out DIR] [--dry-run]
#
# Builds lmcache-server and cuda_kv_copy_test with CUDA (LMC_ENABLE_CUDA=ON;
# --build-dir: a Release build that has it already, default build/), and
# collects into --out (default .gpu_kit/, which git ignores):
#   run.sh     the entry (tools/gpu_kit/run_kit.sh): every part, one pass
#   bin/       the server and the kernel test, stripped, their RUNPATH lib/
#   lib/       every shared library they need that a GPU machine lacks
#              (all but glibc's, libstdc++, libgcc_s and the driver's),
#              each with RUNPATH $ORIGIN
#   python/    the GPU tests, their workers, the benchmark, and a ctypes
#              stand-in for pyzmq (zmq_shim/: the machine has no pyzmq)
#   MANIFEST   what was built from what, and the sizes
# It fails when the kit with the working tree would not fit the 64 MiB the
# device takes. --dry-run then runs the kit here, where no GPU is: every part
# must start and say "no device", the server must serve a ping through the
# kit's own libraries and stand-in, and the results land in a temporary folder.
#
# On a machine with the GPU (device tool): carry .gpu_kit and run
#   bash .gpu_kit/run.sh        (results in $OUT, else ./gpu_kit_results)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build"
KIT="$ROOT/.gpu_kit"
DRY_RUN=0
# What travels to the device: 64 MiB in all, the working tree included.
DEVICE_LIMIT_BYTES=$((64 << 20))

while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD="$(cd "$2" 2>/dev/null && pwd || echo "$2")"; shift 2 ;;
    --out) KIT="$2"; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    *) sed -n '2,27p' "$0" >&2; exit 2 ;;
  esac
done

log() { printf '\033[1m[gpu-kit] %s\033[0m\n' "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "SKIPPED: no CUDA toolkit (nvcc) on this machine: the kit's CUDA build needs it"
  exit 77
fi
"$ROOT/tools/dev.sh" deps

# --- build: the given build tree if it has CUDA, else configure it with it on
# A build tree has CUDA when it has the CUDA-only test target.
have_cuda() {
  local targets
  [ -f "$BUILD/CMakeCache.txt" ] && targets="$(cmake --build "$BUILD" --target help 2>/dev/null)" &&
    grep -q cuda_kv_copy_test <<<"$targets"
}
if ! have_cuda; then
  log "configuring ${BUILD#"$ROOT"/} with -DLMC_ENABLE_CUDA=ON"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLMC_ENABLE_CUDA=ON >/dev/null
fi
have_cuda || die "${BUILD} has no CUDA support after configuring (is LMC_BUILD_TESTS on? see its CMakeCache.txt)"
log "building lmcache-server and cuda_kv_copy_test in ${BUILD#"$ROOT"/}"
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target lmcache-server cuda_kv_copy_test

# --- collect
rm -rf "$KIT"
mkdir -p "$KIT/bin" "$KIT/lib" "$KIT/python/zmq_shim"
cp "$BUILD/src/lmcache-server" "$BUILD/tests/cuda_kv_copy_test" "$KIT/bin/"
strip --strip-unneeded "$KIT"/bin/*
for f in mp_client.py free_ports.py cuda_worker.py gpu_worker.py make_ipc_pickles.py conftest.py \
         test_gpu_cuda.py test_gpu_torch.py; do
  cp "$ROOT/tests/python/$f" "$KIT/python/"
done
cp "$ROOT/tools/gpu_bench.py" "$KIT/python/"
cp -r "$ROOT/tools/gpu_kit/zmq_shim/zmq" "$KIT/python/zmq_shim/"
cp "$ROOT/tools/gpu_kit/run_kit.sh" "$KIT/run.sh"
chmod +x "$KIT/run.sh"

# Libraries every Linux with a GPU driver and PyTorch has: glibc's own, the
# C++ runtime (a newer one there is compatible; an older one loaded into a
# PyTorch process would break it), and the driver's.
is_base_library() {
  case "$(basename "$1")" in
    linux-vdso.so*|ld-linux*.so*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|\
    libresolv.so*|libutil.so*|libstdc++.so*|libgcc_s.so*|libcuda.so*|libnvidia-*.so*) return 0 ;;
  esac
  return 1
}
# The closure of what the binaries need (ldd resolves it transitively), and libzmq for the stand-in.
needed() {
  for elf in "$KIT"/bin/*; do ldd "$elf"; done | awk '/=> \// {print $3}'
  ls /usr/lib/x86_64-linux-gnu/libzmq.so.5
}
for lib in $(needed | sort -u); do
  is_base_library "$lib" && continue
  cp -L "$lib" "$KIT/lib/$(basename "$lib")"
done
for lib in $(ldd "$KIT/lib/libzmq.so.5" | awk '/=> \// {print $3}' | sort -u); do
  is_base_library "$lib" || cp -Ln "$lib" "$KIT/lib/$(basename "$lib")"
done
strip --strip-unneeded "$KIT"/lib/*.so* 2>/dev/null || true
for elf in "$KIT"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib' "$elf"; done
for lib in "$KIT"/lib/*; do patchelf --set-rpath '$ORIGIN' "$lib"; done

# Every library a binary of the kit loads is the kit's own or a base one.
for elf in "$KIT"/bin/* "$KIT"/lib/*; do
  while read -r name path; do
    [ -z "$path" ] && continue
    is_base_library "$path" && continue
    path="$(realpath -m "$path")"
    case "$path" in
      "$KIT"/lib/*) ;;
      *) die "$(basename "$elf") loads $name from $path, not from the kit" ;;
    esac
  done < <(ldd "$elf" | awk '/=> \// {print $1, $3}')
done

# --- manifest and size
kit_bytes=$(du -sb "$KIT" | cut -f1)
tree_bytes=$(cd "$ROOT" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
             xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
shared_bytes=0
[ -d "$ROOT/shared" ] && shared_bytes=$(du -sb "$ROOT/shared" | cut -f1)
{
  echo "lmcache-server GPU kit"
  echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), $(nvcc --version 2>/dev/null | tail -n1 || /usr/local/cuda/bin/nvcc --version | tail -n1)"
  echo "kit bytes: $kit_bytes; working tree bytes: $tree_bytes; shared/: $shared_bytes"
  echo "files:"
  (cd "$KIT" && find . -type f -printf '  %p %s\n' | sort)
} >"$KIT/MANIFEST"
total=$((kit_bytes + tree_bytes + shared_bytes))
log "kit: $((kit_bytes >> 20)) MiB; with the working tree $((total >> 20)) MiB of the device's $((DEVICE_LIMIT_BYTES >> 20))"
[ "$total" -lt "$DEVICE_LIMIT_BYTES" ] || die "the kit and the working tree take $total bytes, over the device's $DEVICE_LIMIT_BYTES"

[ "$DRY_RUN" -eq 1 ] || { log "kit ready in ${KIT#"$ROOT"/}: carry it and run bash ${KIT#"$ROOT"/}/run.sh"; exit 0; }

# --- dry run: here no GPU is visible; every part must say so cleanly
results="$(mktemp -d /tmp/lmcache_gpu_kit_dry.XXXXXX)"
log "dry run (no GPU expected): results in $results"
set +e
LMC_KIT_ZMQ_SHIM=1 bash "$KIT/run.sh" "$results"
rc=$?
set -e
cat "$results/summary.txt"
[ "$rc" -eq 0 ] || die "the kit's dry run exited with $rc (summary above; logs in $results)"
for part in kernel e2e sanitizer bench; do
  grep -q "^$part: NO DEVICE" "$results/summary.txt" || die "part $part did not report 'no device' (logs in $results)"
done
grep -q "^server: PASS" "$results/summary.txt" || die "the kit's server did not serve a ping (logs in $results)"
grep -q "zmq from $KIT/python/zmq_shim" "$results/env.txt" ||
  die "the dry run did not use the kit's zmq stand-in (see $results/env.txt)"
n=$(find "$results" -type f | wc -l)
[ "$n" -le 8 ] || die "the run leaves $n result files; the device returns 8 at most"
log "dry run passed: the kit builds, fits, starts, and says 'no device' for every GPU part"
rm -rf "$results"

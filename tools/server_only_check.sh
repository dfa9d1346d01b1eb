#!/usr/bin/env bash
# The server-only build with no optional library (what a deployment without
# Redis, S3 or liburing compiles): no resp or s3 adapter, no io_uring, no
# tools, no tests. Checks that it builds, links none of hiredis, libcurl and
# liburing, refuses "type": "resp" and "type": "s3" naming the adapter types
# it has, and refuses an fs tier that demands io_uring saying the build has
# none.
#
#   tools/server_only_check.sh [build dir]     (default build-server-only/)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/build-server-only}"
JOBS="${JOBS:-$(nproc)}"

# Unoptimised and without debug info: the check links and starts the server,
# nothing more, and -O0 builds it in about half the time (CI runs it).
cmake -S "$ROOT" -B "$DIR" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_C_FLAGS_DEBUG=-O0 \
  -DLMC_L2_RESP=OFF -DLMC_L2_S3=OFF -DLMC_IO_URING=OFF -DLMC_BUILD_TOOLS=OFF \
  -DLMC_BUILD_TESTS=OFF -DLMC_BUILD_BENCH=OFF -DLMC_ENABLE_CUDA=OFF \
  -DCMAKE_UNITY_BUILD="${LMC_UNITY_BUILD:-ON}" >/dev/null
cmake --build "$DIR" -j "$JOBS" --target lmcache-server
SERVER="$DIR/src/lmcache-server"

if ldd "$SERVER" | grep -E -q "hiredis|libcurl|liburing"; then
  echo "FAILED: the server-only build links an optional library:" >&2
  ldd "$SERVER" | grep -E "hiredis|libcurl|liburing" >&2
  exit 1
fi

# expect_refusal <what> <expected text> <--l2-adapter JSON>: the server must
# exit non-zero, saying the expected text; its output is left in $out.
expect_refusal() {
  local rc
  set +e
  out="$("$SERVER" --l1-size-gb 0.0625 --port 0 --http-port 0 --l2-adapter "$3" 2>&1)"
  rc=$?
  set -e
  if [ "$rc" -eq 0 ] || ! grep -q "$2" <<<"$out"; then
    echo "FAILED: $1 (exit $rc):" >&2
    echo "$out" >&2
    exit 1
  fi
}

expect_refusal "a resp adapter was not refused with the types this build has" \
  "this server has fs, mock, fault_inject and p2p" '{"type":"resp","url":"redis://127.0.0.1:1"}'
resp_refusal="$(grep -o "this server has[^)]*" <<<"$out" | head -n1)"
expect_refusal "an s3 adapter was not refused with the types this build has" \
  "this server has fs, mock, fault_inject and p2p" \
  '{"type":"s3","s3_endpoint":"bkt.example.com","s3_region":"r"}'
expect_refusal "io_engine io_uring was not refused as this build's lack" \
  "built without it (LMC_IO_URING=OFF)" \
  "{\"type\":\"fs\",\"base_path\":\"$DIR/l2-check\",\"io_engine\":\"io_uring\"}"
echo "server-only build: links no hiredis, libcurl or liburing; refuses resp and s3: $resp_refusal; refuses io_uring: built without it"

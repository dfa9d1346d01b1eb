#!/usr/bin/env bash
# The server-only build (what a deployment without Redis compiles): no resp
# adapter, no tools, no tests. Checks that it builds, links no hiredis, and
# refuses "type": "resp" naming the adapter types it has.
#
#   tools/server_only_check.sh [build dir]     (default build-server-only/)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/build-server-only}"
JOBS="${JOBS:-$(nproc)}"

cmake -S "$ROOT" -B "$DIR" -DCMAKE_BUILD_TYPE=Release -DLMC_L2_RESP=OFF -DLMC_BUILD_TOOLS=OFF \
  -DLMC_BUILD_TESTS=OFF -DLMC_BUILD_BENCH=OFF -DLMC_ENABLE_CUDA=OFF >/dev/null
cmake --build "$DIR" -j "$JOBS" --target lmcache-server
SERVER="$DIR/src/lmcache-server"

if ldd "$SERVER" | grep -q hiredis; then
  echo "FAILED: the server-only build links hiredis:" >&2
  ldd "$SERVER" | grep hiredis >&2
  exit 1
fi

set +e
out="$("$SERVER" --l1-size-gb 0.0625 --port 0 --http-port 0 \
  --l2-adapter '{"type":"resp","url":"redis://127.0.0.1:1"}' 2>&1)"
rc=$?
set -e
if [ "$rc" -eq 0 ] || ! grep -q "this server has fs, mock and fault_inject" <<<"$out"; then
  echo "FAILED: a resp adapter was not refused with the types this build has (exit $rc):" >&2
  echo "$out" >&2
  exit 1
fi
echo "server-only build: links no hiredis; refuses resp: $(grep -o "this server has[^)]*" <<<"$out" | head -n1)"

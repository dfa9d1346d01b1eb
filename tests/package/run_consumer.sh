#!/usr/bin/env bash
# The installed client package, used as an engine's build would: install the
# `client` component to a temporary prefix, build tests/package/consumer
# against it with find_package(lmcache), start the server and run the consumer.
# Usage: run_consumer.sh BUILD_DIR SERVER_BINARY
set -euo pipefail
build_dir=$1
server=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/lmcache_package.XXXXXX)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cmake --install "$build_dir" --component client --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/lmcache/client.h"
# The shared library exports the lmcache namespace only (no BLAKE3 or msgpack symbols).
lib=$(ls "$work"/prefix/lib*/liblmcache_client.so* 2>/dev/null | head -1 || true)
[[ -z $lib ]] && lib=$(find "$work/prefix" -name 'liblmcache_client.so*' | head -1)
outside=$(nm -DC --defined-only "$lib" | grep -E ' [TDBVW] ' | cut -d' ' -f3- |
  grep -vE '^(lmcache::|typeinfo for lmcache::|typeinfo name for lmcache::|vtable for lmcache::|guard variable for lmcache::)' || true)
if [[ -n $outside ]]; then
  echo "the client library exports symbols outside the lmcache namespace:" >&2
  echo "$outside" | head >&2
  exit 1
fi
cmake -S "$here/consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_RPATH="$(dirname "$lib")" >/dev/null
cmake --build "$work/build" >/dev/null

url="ipc://$work/server.sock"
"$server" --url "$url" --http-port 0 --l1-size-gb 1 --prefault-threads 1 --shm-name "lmcache_package_$$" \
  --log-level warn &
server_pid=$!
for _ in $(seq 1 100); do
  [[ -S $work/server.sock ]] && break
  sleep 0.1
done
"$work/build/consumer" "$url"

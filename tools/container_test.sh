#!/usr/bin/env bash
# Builds the lmcache-server image and runs it for real, with podman (Debian's,
# runc as its runtime), from a base image made locally with debootstrap (no
# registry is reachable from our machines):
#   1. the server container starts with --shm-size and answers /healthcheck
#      (its own HEALTHCHECK, run by podman);
#   2. a client in a second container, sharing the server's /dev/shm and the
#      ipc socket volume, stores, looks up and retrieves, checking every byte;
#   3. a /dev/shm too small for the pool fails at once with the fix.
# If this machine cannot run a container engine, it says why and exits 77
# (skipped), which tools/dev.sh lists at its end and fails under CI=true.
# Usage: tools/container_test.sh [--prebuilt BUILD_DIR]   (LMC_KEEP_IMAGES=1 keeps the images)
#   --prebuilt: the image takes the server, the client library and the client
#   check from BUILD_DIR (a Release build of this tree, made on this Debian 12
#   host: the toolchain the image would use) instead of compiling them again,
#   which is most of the image's build time; its build stage still configures
#   the sources with only the Dockerfile's packages, proving them complete.
#   tools/dev.sh test passes its Release build. Without it: from source.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PREBUILT_FROM=""
if [[ "${1:-}" == "--prebuilt" ]]; then
  PREBUILT_FROM="${2:?--prebuilt needs a build directory}"
fi
STAGE="$ROOT/.container-prebuilt"  # inside the build context: the Dockerfile copies it
IMAGE=localhost/lmcache-server:ci
NAME=lmcache-ci-$$
VOLUME=lmcache-ci-run-$$
WORK=$(mktemp -d /tmp/lmcache_container.XXXXXX)

say() { printf '[container_test] %s\n' "$*" >&2; }
# Exit code 77 says "skipped" to tools/dev.sh, which lists it (and fails under CI=true).
skip() { say "SKIPPED: $*"; exit 77; }
fail() { say "FAIL: $*"; exit 1; }

cleanup() {
  podman rm -f "$NAME" >/dev/null 2>&1 || true
  podman volume rm -f "$VOLUME" >/dev/null 2>&1 || true
  if [[ -z "${LMC_KEEP_IMAGES:-}" ]]; then
    podman rmi -f "$IMAGE" >/dev/null 2>&1
    podman image prune -f >/dev/null 2>&1  # the build stage's layers (about 1 GB)
  fi
  rm -rf "$WORK" "$STAGE"
}

# --- the engine ----------------------------------------------------------------------------
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
  if [[ $(id -u) -eq 0 ]]; then
    say "installing podman, runc and debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      podman runc debootstrap fuse-overlayfs uidmap slirp4netns >/dev/null 2>&1 ||
      skip "podman, runc or debootstrap cannot be installed here"
  else
    skip "podman, runc and debootstrap are not installed and this is not root"
  fi
fi
# What works on our hosts: runc (crun fails on hybrid cgroups), cgroupfs, a
# file events logger, and no ulimit above the calling shell's hard limits.
hard_nofile=$(ulimit -Hn)
hard_nproc=$(ulimit -Hu)
mkdir -p "$WORK/config/containers"
cat > "$WORK/config/containers/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=${hard_nofile}:${hard_nofile}", "nproc=${hard_nproc}:${hard_nproc}"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
export CONTAINERS_CONF="$WORK/config/containers/containers.conf"
trap cleanup EXIT
podman info >/dev/null 2>&1 || skip "podman cannot run here: $(podman info 2>&1 | tail -n1)"

# --- the base image, from Debian packages ------------------------------------------------------
BASE=docker.io/library/debian:12
if ! podman image exists "$BASE"; then
  mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
  mirror=${mirror:-http://deb.debian.org/debian}
  say "making $BASE with debootstrap --variant=minbase bookworm from $mirror"
  start=$(date +%s)
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
    skip "debootstrap failed (no mirror reachable?): $(tail -n3 "$WORK/debootstrap.log")"
  # Nothing of ours is involved yet: a failure here is podman's storage on
  # this machine (seen in a chroot: "remount /, flags: 0x44000: invalid
  # argument"), so it is a skip with podman's reason, which CI=true fails.
  tar -C "$WORK/rootfs" -c . | podman import - "$BASE" >"$WORK/import.log" 2>&1 ||
    skip "podman cannot store an image on this machine: $(tail -n1 "$WORK/import.log")"
  rm -rf "$WORK/rootfs"
  say "base image made in $(( $(date +%s) - start )) s"
fi

# --- ulimits ----------------------------------------------------------------------------------
# runc sets every limit it is given, and podman 4.3 (as root) asks for more
# than some hosts allow, ignoring default_ulimits above for RUN steps. Some
# hosts refuse even the shell's own hard nproc limit inside the container's
# init, so the highest nproc that works is found by halving.
nproc=$hard_nproc
until podman run --rm --ulimit "nproc=${nproc}:${nproc}" --ulimit "nofile=${hard_nofile}:${hard_nofile}" \
    "$BASE" true >/dev/null 2>&1; do
  (( nproc > 1024 )) || fail "no nproc limit lets runc start a container: $(podman run --rm \
    --ulimit "nproc=${nproc}:${nproc}" "$BASE" true 2>&1 | tail -n1)"
  nproc=$(( nproc / 2 ))
done
ULIMITS=(--ulimit "nproc=${nproc}:${nproc}" --ulimit "nofile=${hard_nofile}:${hard_nofile}")
say "containers run with nproc=${nproc} nofile=${hard_nofile}"

# --- build ------------------------------------------------------------------------------------
build_args=()
if [[ -n "$PREBUILT_FROM" ]]; then
  say "staging the server, the client library and the client check from $PREBUILT_FROM"
  rm -rf "$STAGE"
  for component in server client; do
    cmake --install "$PREBUILT_FROM" --prefix "$STAGE/opt/lmcache" --component "$component" \
      >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log" >&2; fail "cmake --install $component failed"; }
  done
  { cmake -S tests/package/consumer -B "$WORK/consumer" -DCMAKE_PREFIX_PATH="$STAGE/opt/lmcache" \
      -DCMAKE_INSTALL_RPATH=/opt/lmcache/lib && cmake --build "$WORK/consumer"; } \
    >"$WORK/consumer.log" 2>&1 || { tail -n 30 "$WORK/consumer.log" >&2; fail "the client check did not build"; }
  cp "$WORK/consumer/consumer" "$STAGE/consumer"
  build_args=(--build-arg LMC_PREBUILT=1)
fi
say "building $IMAGE${PREBUILT_FROM:+ (prebuilt binaries; the sources configured in the image)}"
start=$(date +%s)
# Docker format: the OCI format has no HEALTHCHECK (podman would drop it).
podman build --format docker --pull=never --network=host "${ULIMITS[@]}" "${build_args[@]}" \
  -f docker/Dockerfile -t "$IMAGE" . >"$WORK/build.log" 2>&1 ||
  { tail -n 30 "$WORK/build.log" >&2; fail "podman build failed"; }
say "image built in $(( $(date +%s) - start )) s ($(podman image inspect "$IMAGE" --format '{{.Size}}') bytes)"
[[ $(podman image inspect "$IMAGE" --format '{{.Config.User}}') == lmcache ]] ||
  fail "the image does not run as the lmcache user"

# --- 1. the server answers its health check ---------------------------------------------------
podman volume create "$VOLUME" >/dev/null
podman run -d --name "$NAME" "${ULIMITS[@]}" --shm-size=2g -v "$VOLUME:/run/lmcache" "$IMAGE" \
  --l1-size-gb 1 --url ipc:///run/lmcache/lmcache.sock --http-host 0.0.0.0 \
  --l2-adapter '{"type":"fs","base_path":"/run/lmcache/l2"}' >/dev/null ||
  fail "the server container did not start"
healthy=""
for _ in $(seq 1 60); do
  if podman healthcheck run "$NAME" >/dev/null 2>&1; then healthy=1; break; fi
  sleep 1
done
[[ -n "$healthy" ]] || {
  podman logs "$NAME" >&2
  podman healthcheck run "$NAME" >&2
  fail "/healthcheck never answered 200"
}
say "1. the server container is healthy (its HEALTHCHECK passed)"

# --- 2. a client in a second container ---------------------------------------------------------
podman run --rm "${ULIMITS[@]}" --ipc="container:$NAME" -v "$VOLUME:/run/lmcache" --entrypoint \
  /usr/local/bin/lmcache-client-check "$IMAGE" ipc:///run/lmcache/lmcache.sock \
  >"$WORK/client.log" 2>&1 || { cat "$WORK/client.log" >&2; podman logs "$NAME" >&2; fail "the client container failed"; }
grep -q "consumer: OK" "$WORK/client.log" || fail "the client did not report OK"
say "2. a second container stored, looked up and retrieved through the shared /dev/shm"

podman stop -t 30 "$NAME" >/dev/null
code=$(podman inspect "$NAME" --format '{{.State.ExitCode}}')
[[ "$code" == 0 ]] || { podman logs "$NAME" >&2; fail "SIGTERM: the server exited $code"; }
podman logs "$NAME" 2>&1 | grep -q "removed; bye" || fail "the server did not remove its pool"
logs=$(podman logs "$NAME" 2>&1)
engine=$(grep -o -m1 "loads read through io_uring\|loads use blocking reads: .*" <<<"$logs") ||
  fail "the fs L2 adapter did not say how it reads"
say "   its fs L2 tier under podman's default seccomp profile: ${engine}"

# --- 3. a /dev/shm too small fails at once with the fix ----------------------------------------
start=$(date +%s)
out=$(podman run --rm "${ULIMITS[@]}" --shm-size=64m "$IMAGE" --l1-size-gb 1 2>&1)
code=$?
[[ $code -ne 0 ]] || fail "a 64 MiB /dev/shm for a 1 GiB pool was accepted"
grep -q -- "--shm-size=" <<<"$out" || fail "the refusal does not say how to fix it: $out"
(( $(date +%s) - start < 30 )) || fail "the refusal was not fast"
say "3. too small a /dev/shm is refused: $(grep -m1 -- "--shm-size=" <<<"$out" | head -c 200)..."
# --- 4. a seccomp profile that refuses io_uring (as Docker's default does) ----------------------
printf '%s\n' '{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["io_uring_setup"],' \
  '"action":"SCMP_ACT_ERRNO","errnoRet":1}]}' >"$WORK/no-io-uring.json"
out=$(podman run --rm "${ULIMITS[@]}" --shm-size=256m --security-opt "seccomp=$WORK/no-io-uring.json" \
  "$IMAGE" --l1-size-gb 0.0625 --l2-adapter '{"type":"fs","base_path":"/tmp/l2","io_engine":"io_uring"}' 2>&1)
code=$?
[[ $code -ne 0 ]] || fail "io_engine io_uring was accepted under a profile that refuses io_uring"
grep -q "io_uring is not available here (io_uring_setup: Operation not permitted" <<<"$out" ||
  fail "the refusal does not say why: $out"
say "4. under a profile refusing io_uring, \"io_engine\": \"io_uring\" is refused: $(grep -o -m1 "but io_uring is not available[^;]*" <<<"$out")"
say "PASS"

#!/usr/bin/env bash
# A throwaway single-node Ceph cluster with its S3 gateway (radosgw) on
# 127.0.0.1, for tests and benchmarks of the S3 L2 adapter. One monitor, one
# memory-backed OSD (memstore), one radosgw (beast frontend), cephx on; no
# manager (the cluster says HEALTH_WARN, the gateway serves anyway). Every file
# lives under DIR (config, keyring, mon/osd data, run dir, admin sockets, logs,
# crash dir): nothing under /etc/ceph, /var/lib/ceph, /var/log/ceph or
# /run/ceph, no systemd. Two clusters in two DIRs run side by side (own ports,
# own fsid). Needs the Debian packages ceph-mon ceph-osd radosgw ceph-common
# uuid-runtime curl (tools/dev.sh deps installs them). About 2-4 s to a
# serving gateway on 2 cores, under 1 s to stop.
#
#   tools/ceph_s3.sh start DIR [--bucket NAME]... [--watch PID]
#       With --watch, a watcher stops the cluster (as `stop DIR`) once process
#       PID is gone: a test killed by its timeout leaves no daemons behind.
#       Creates DIR (refuses one that holds a running cluster, or a non-empty
#       directory this script did not make), starts the cluster, creates an S3
#       user and the buckets, writes DIR/s3.env and prints its path (the only
#       thing on stdout). s3.env holds shell-sourceable KEY=VALUE lines:
#         S3_ENDPOINT=http://127.0.0.1:PORT   S3_HOST_PORT=127.0.0.1:PORT
#         S3_ACCESS_KEY S3_SECRET_KEY S3_REGION (us-east-1; RGW takes any region in SigV4)
#         S3_VHOST_DOMAIN=localhost (virtual-hosted style: Host: BUCKET.localhost:PORT
#           on a connection to 127.0.0.1; curl resolves *.localhost itself, glibc's
#           getaddrinfo does not: connect to 127.0.0.1 and set the Host header)
#         S3_BUCKETS (comma separated) CEPH_DIR CEPH_CONF
#         CEPH_MON_PID CEPH_OSD_PID CEPH_RGW_PID CEPH_RGW_LOG
#       On failure: the error and the tail of the failing daemon's log on
#       stderr, everything started is killed, DIR stays for its logs
#       (`stop DIR` removes it). Exit status 1.
#   tools/ceph_s3.sh stop DIR
#       Stops every daemon of DIR (TERM, KILL after 5 s each) and removes DIR.
#       Idempotent: no error when already stopped or DIR is missing.
#   tools/ceph_s3.sh stop-gateway DIR     SIGKILL radosgw only (the OSD keeps the data)
#   tools/ceph_s3.sh start-gateway DIR    start radosgw again on the same port, wait
#                                         until it answers, update CEPH_RGW_PID in s3.env
#   tools/ceph_s3.sh pause-gateway DIR    SIGSTOP radosgw (a gateway that never answers)
#   tools/ceph_s3.sh resume-gateway DIR   SIGCONT radosgw
#
# Example:
#   env=$(tools/ceph_s3.sh start /tmp/c1 --bucket lmc-test) && . "$env"
#   curl -sf --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
#        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T file "$S3_ENDPOINT/lmc-test/key"
#   tools/ceph_s3.sh stop /tmp/c1
# RGW takes a request without x-amz-content-sha256 as UNSIGNED-PAYLOAD, while
# curl (7.88) then signs the body's hash: 403 SignatureDoesNotMatch. With the
# header (UNSIGNED-PAYLOAD or the body's SHA-256) curl signs its value. curl
# does not sort the query: write parameters in sorted order (?list-type=2&prefix=p).
#
# Environment: CEPH_S3_TIMEOUT (s, default 90): bound on each wait of start and
# start-gateway. CEPH_S3_MEMSTORE_BYTES (default 1 GiB): see the comment at
# ceph.conf. CEPH_S3_RGW_THREADS (default 32): radosgw worker threads.
# CEPH_S3_VERBOSE=1: the time of each step of start on stderr.
set -euo pipefail

PROG="ceph_s3.sh"
TIMEOUT="${CEPH_S3_TIMEOUT:-90}"
MEMSTORE_BYTES="${CEPH_S3_MEMSTORE_BYTES:-1073741824}"
RGW_THREADS="${CEPH_S3_RGW_THREADS:-32}"
# Any region string works for SigV4 against RGW (it signs with the scope the
# client sent and checks no region name); us-east-1 is what SDKs default to.
REGION="us-east-1"
VHOST_DOMAIN="localhost"
MARKER=".ceph_s3"  # present in every DIR this script made

log() { printf '[%s] %s\n' "$PROG" "$*" >&2; }
# step MESSAGE: progress with the time since start, with CEPH_S3_VERBOSE=1.
T0="${EPOCHREALTIME/[.,]/}"
step() {
  [ "${CEPH_S3_VERBOSE:-0}" = 1 ] || return 0
  local us=$((${EPOCHREALTIME/[.,]/} - T0))
  log "$(printf '%d.%03d s: %s' $((us / 1000000)) $((us / 1000 % 1000)) "$*")"
}
die() { printf '[%s] error: %s\n' "$PROG" "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }

need() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 ||
      die "$c not found (apt-get install --no-install-recommends ceph-mon ceph-osd radosgw ceph-common uuid-runtime curl)"
  done
}

# abs_dir DIR: DIR made absolute (it need not exist); paths go into ceph.conf
# and s3.env, so only plain characters are accepted.
abs_dir() {
  local d="$1"
  [[ "$d" == /* ]] || d="$PWD/$d"
  d="${d%/}"
  [[ "$d" =~ ^/[A-Za-z0-9._/+-]+$ ]] || die "DIR must be a path of [A-Za-z0-9._/+-] characters: $1"
  printf '%s' "$d"
}

# alive PID DIR: PID is a live (not zombie) daemon of the cluster in DIR. The
# command line names DIR/ceph.conf, so a recycled pid is never mistaken for ours.
alive() {
  local pid="$1" dir="$2" cmd
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  [[ "$cmd" == *" $dir/ceph.conf"* ]]
}

# pid_of DIR NAME (mon|osd|rgw): the recorded pid, or nothing.
pid_of() { cat "$1/run/$2.pid" 2>/dev/null || true; }

# random_hex N: N random hex digits (no `tr </dev/urandom | head`: its SIGPIPE
# fails the pipeline under pipefail).
random_hex() { od -An -tx1 -N"$(($1 / 2))" /dev/urandom | tr -d ' \n'; }

new_uuid() {
  if command -v uuidgen >/dev/null 2>&1; then uuidgen; else cat /proc/sys/kernel/random/uuid; fi
}

# port_in_use PORT: any TCP socket on 127.0.0.1/any address with that local port.
port_in_use() {
  if command -v ss >/dev/null 2>&1; then
    [ -n "$(ss -Htan "sport = :$1" 2>/dev/null)" ]
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}

# free_port USED...: a port in 10000-32767 (below Linux's ephemeral range, above
# Ceph's 6800-7300 for OSDs) that is free and not among USED.
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((10000 + (RANDOM * 32768 + RANDOM) % 22768))
    [[ " $* " == *" $p "* ]] && continue
    port_in_use "$p" || { printf '%s' "$p"; return 0; }
  done
  die "no free port found"
}

# launch DIR NAME LOG CMD...: CMD in the background, in its own session, stdin
# from /dev/null, stdout/stderr to LOG, no inherited descriptors above 2 (a
# caller's pipe must not stay open through the daemon, or `$(... start)` would
# never return). Records the pid in DIR/run/NAME.pid. setsid does not fork here
# (the subshell is not a process group leader), so $! is the daemon's pid.
launch() {
  local dir="$1" name="$2" logf="$3" fd
  shift 3
  (
    for fd in "/proc/$BASHPID/fd/"*; do
      fd="${fd##*/}"
      if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid "$@"
  ) </dev/null >>"$logf" 2>&1 &
  echo $! >"$dir/run/$name.pid"
  disown $!  # no "Killed" job reports from bash
}

# tail_log FILE...: the last lines of each existing FILE, on stderr.
tail_log() {
  local f
  for f in "$@"; do
    [ -s "$f" ] || continue
    printf '[%s] --- last lines of %s ---\n' "$PROG" "$f" >&2
    tail -n 25 "$f" >&2
  done
}

# signal_daemons DIR SIGNAL...: sends each SIGNAL to every live daemon of DIR.
signal_daemons() {
  local dir="$1" name pid sig
  shift
  for name in rgw osd mon; do
    pid=$(pid_of "$dir" "$name")
    alive "$pid" "$dir" || continue
    for sig in "$@"; do kill -s "$sig" "$pid" 2>/dev/null || true; done
  done
}

any_alive() {
  local dir="$1" name
  for name in rgw osd mon; do alive "$(pid_of "$dir" "$name")" "$dir" && return 0; done
  return 1
}

# stop_daemon DIR NAME: TERM (and CONT, for a paused gateway), KILL after 5 s.
stop_daemon() {
  local dir="$1" name="$2" pid
  pid=$(pid_of "$dir" "$name")
  alive "$pid" "$dir" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  kill -CONT "$pid" 2>/dev/null || true
  for _ in $(seq 100); do
    alive "$pid" "$dir" || return 0
    sleep 0.05
  done
  log "$name ($pid) ignored TERM for 5 s, sending KILL"
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 100); do
    alive "$pid" "$dir" || return 0
    sleep 0.05
  done
  die "$name ($pid) still alive after KILL"
}

# stop_daemons DIR: one at a time, clients first: radosgw stopped together with
# the OSD hangs in its shutdown (so does an OSD without its monitor). About 1 s.
stop_daemons() {
  local dir="$1" name
  for name in rgw osd mon; do stop_daemon "$dir" "$name"; done
}

# http_code URL: the HTTP status of an anonymous GET, 000 when nothing answers.
http_code() {
  curl -s -o /dev/null -w '%{http_code}' --connect-timeout 1 --max-time 3 "$1" 2>/dev/null || true
}

# wait_gateway DIR PORT: until the gateway answers HTTP (any status), bounded by
# TIMEOUT; fails early when radosgw exits.
wait_gateway() {
  local dir="$1" port="$2" deadline=$((SECONDS + TIMEOUT)) code
  while :; do
    code=$(http_code "http://127.0.0.1:$port/")
    [ "$code" != "000" ] && [ -n "$code" ] && return 0
    alive "$(pid_of "$dir" rgw)" "$dir" || {
      log "radosgw exited before answering on 127.0.0.1:$port"
      tail_log "$dir/log/rgw.out" "$dir/log/client.rgw.a.log"
      return 1
    }
    [ "$SECONDS" -lt "$deadline" ] || {
      log "radosgw did not answer on 127.0.0.1:$port within ${TIMEOUT} s"
      tail_log "$dir/log/rgw.out" "$dir/log/client.rgw.a.log" "$dir/log/osd.0.log"
      return 1
    }
    sleep 0.2
  done
}

# s3 DIR METHOD PATH [curl args...]: a SigV4-signed request to the gateway;
# prints the HTTP status.
s3() {
  local dir="$1" method="$2" path="$3"
  shift 3
  # shellcheck disable=SC1091
  (. "$dir/s3.env.tmp" 2>/dev/null || . "$dir/s3.env"
    curl -s -o /dev/null -w '%{http_code}' --max-time 30 -X "$method" \
      -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
      --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
      "$@" "$S3_ENDPOINT$path") || true
}

write_conf() {
  local dir="$1" fsid="$2" p2="$3" p1="$4" prgw="$5" asok_mon="" asok_osd="" asok_rgw=""
  # Admin sockets are Unix sockets: their path must fit in 107 bytes; under a
  # long DIR they are left out (nothing here needs them).
  if [ $((${#dir} + 24)) -le 107 ]; then
    asok_mon="$dir/run/mon.a.asok" asok_osd="$dir/run/osd.0.asok" asok_rgw="$dir/run/rgw.a.asok"
  fi
  cat >"$dir/ceph.conf" <<EOF
# Written by tools/ceph_s3.sh; every path is under $dir.
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $dir/keyring
run dir = $dir/run
crash dir = $dir/crash
log file = $dir/log/\$name.log
log to syslog = false
err to syslog = false
mon cluster log file = $dir/log/cluster.log
mon cluster log to syslog = false
# No admin socket for command-line clients; the daemons get theirs below.
admin socket =
# One OSD: size-1 pools, placement over OSDs not hosts, few PGs.
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
mon allow pool delete = true
osd crush chooseleaf type = 0
osd pool default pg num = 8
osd pool default pgp num = 8
mon max pg per osd = 1000
# Commit monitor changes at once instead of batching them for 1 s: every pool
# radosgw creates is a few osdmap changes (start takes ~12 s without this).
paxos propose interval = 0.01
paxos min wait = 0.001
# PGs of a new pool are created on a monitor tick (5 s by default).
mon tick interval = 1
# A small scratch disk must not stop the monitor (it refuses below 5% free).
mon data avail crit = 1
mon data avail warn = 2

[mon.a]
mon data = $dir/mon
admin socket = $asok_mon

[osd.0]
osd data = $dir/osd0
osd journal = $dir/osd0/journal
# memstore keeps every object in the OSD's RAM (its RSS grows by about twice
# the data stored). memstore device bytes is the capacity the OSD reports; once
# it is reached, writes and deletes block (a PUT hangs after "100 Continue",
# GETs still answer). Deleted objects free their memory, the part beyond the
# first 4 MiB only when the garbage collector runs (see rgw gc below). So it
# bounds the OSD's memory: 1 GiB (~130 8-MiB objects, ~2.5 GiB RSS at most)
# is safe on a test machine; set CEPH_S3_MEMSTORE_BYTES for bigger benchmarks.
osd objectstore = memstore
memstore device bytes = $MEMSTORE_BYTES
admin socket = $asok_osd

[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$prgw tcp_nodelay=1
rgw thread pool size = $RGW_THREADS
rgw data = $dir/rgw
# Virtual-hosted style: Host BUCKET.localhost[:port] names the bucket (any
# other Host, e.g. 127.0.0.1:PORT, is path style).
rgw dns name = $VHOST_DOMAIN
admin socket = $asok_rgw
# Deleted or overwritten objects' tails are freed by the garbage collector,
# 2 h later by default: too late for a memstore of this size under churn.
rgw gc obj min wait = 60
rgw gc processor period = 60
EOF
}

cmd_start() {
  local dir="" buckets=() watch=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --watch) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || die "--watch needs a pid"
               watch="$2"; shift 2 ;;
      --bucket) [ $# -ge 2 ] || die "--bucket needs a name"; buckets+=("$2"); shift 2 ;;
      --bucket=*) buckets+=("${1#--bucket=}"); shift ;;
      -*) die "unknown option $1" ;;
      *) [ -z "$dir" ] || die "one DIR only"; dir="$1"; shift ;;
    esac
  done
  [ -n "$dir" ] || usage
  local b
  for b in ${buckets[@]+"${buckets[@]}"}; do
    [[ "$b" =~ ^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$ ]] ||
      die "bad bucket name '$b' (3-63 of a-z 0-9 . -, starting and ending alnum)"
  done
  need ceph-mon ceph-osd radosgw radosgw-admin ceph ceph-authtool monmaptool curl setsid
  dir=$(abs_dir "$dir")

  if [ -e "$dir" ]; then
    [ -d "$dir" ] || die "$dir exists and is not a directory"
    if [ -e "$dir/$MARKER" ]; then
      any_alive "$dir" && die "$dir holds a running cluster (tools/ceph_s3.sh stop $dir first)"
      rm -rf "${dir:?}"
    elif [ -n "$(ls -A "$dir")" ]; then
      die "$dir is not empty and was not made by $PROG"
    fi
  fi
  mkdir -p "$dir"/{run,log,crash,mon,osd0,rgw}
  : >"$dir/$MARKER"

  local fsid osd_uuid p2 p1 prgw
  fsid=$(new_uuid)
  osd_uuid=$(new_uuid)
  p2=$(free_port)
  p1=$(free_port "$p2")
  prgw=$(free_port "$p2" "$p1")
  write_conf "$dir" "$fsid" "$p2" "$p1" "$prgw"

  # From here on, a failure kills what was started.
  START_DIR="$dir"
  trap 'start_failed' EXIT
  trap 'exit 1' INT TERM HUP
  trap 'FAILED_AT="line $LINENO: $BASH_COMMAND"' ERR

  local conf="$dir/ceph.conf" kr="$dir/keyring"
  # One keyring for every entity; the monitor imports it (with the caps) at
  # mkfs, so no `ceph auth` round trips are needed later.
  ceph-authtool "$kr" --create-keyring --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$kr" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
  ceph-authtool "$kr" --gen-key -n osd.0 \
    --cap mon 'allow profile osd' --cap osd 'allow *' --cap mgr 'allow profile osd' >/dev/null
  ceph-authtool "$kr" --gen-key -n client.rgw.a \
    --cap mon 'allow rw' --cap osd 'allow rwx' --cap mgr 'allow rw' >/dev/null
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]" "$dir/monmap" >/dev/null
  ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$kr" >>"$dir/log/mon.out" 2>&1 ||
    fail "ceph-mon --mkfs failed" "$dir/log/mon.out" "$dir/log/mon.a.log"
  launch "$dir" mon "$dir/log/mon.out" ceph-mon -f -c "$conf" -i a
  step "monitor started"

  # Registers osd.0 (waits for the monitor to form its quorum of one).
  local id
  id=$(timeout "$TIMEOUT" ceph -c "$conf" --connect-timeout "$TIMEOUT" osd create "$osd_uuid" 2>>"$dir/log/ceph-cli.out") ||
    fail "the monitor did not answer (ceph osd create)" "$dir/log/ceph-cli.out" "$dir/log/mon.out" "$dir/log/mon.a.log"
  [ "$id" = 0 ] || fail "ceph osd create gave id '$id', expected 0"
  step "osd.0 registered"
  ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$dir/log/osd.out" 2>&1 ||
    fail "ceph-osd --mkfs failed" "$dir/log/osd.out" "$dir/log/osd.0.log"
  launch "$dir" osd "$dir/log/osd.out" ceph-osd -f -c "$conf" -i 0

  # radosgw creates its pools itself. Started before the OSD is up, the PGs of
  # its first pool wait for a monitor tick: wait for the OSD (~0.3 s) instead.
  local deadline=$((SECONDS + TIMEOUT))
  until grep -q 'state: booting -> active' "$dir/log/osd.0.log" 2>/dev/null; do
    alive "$(pid_of "$dir" osd)" "$dir" || fail "ceph-osd exited" "$dir/log/osd.out" "$dir/log/osd.0.log"
    [ "$SECONDS" -lt "$deadline" ] ||
      fail "osd.0 not up within ${TIMEOUT} s" "$dir/log/osd.0.log" "$dir/log/mon.a.log"
    sleep 0.05
  done
  step "osd.0 up"
  launch "$dir" rgw "$dir/log/rgw.out" radosgw -f -c "$conf" -n client.rgw.a
  wait_gateway "$dir" "$prgw" || fail "radosgw did not come up"
  step "radosgw answers"

  local ak sk
  ak=$(random_hex 20 | tr a-f A-F)
  sk=$(random_hex 40)
  timeout "$TIMEOUT" radosgw-admin -c "$conf" user create --uid=lmc --display-name=lmc \
    --access-key="$ak" --secret-key="$sk" >>"$dir/log/radosgw-admin.out" 2>&1 ||
    fail "radosgw-admin user create failed" "$dir/log/radosgw-admin.out"
  step "user created"

  write_env "$dir" "$prgw" "$ak" "$sk" "$(IFS=,; echo "${buckets[*]+${buckets[*]}}")" >"$dir/s3.env.tmp"
  local code
  for b in ${buckets[@]+"${buckets[@]}"}; do
    code=$(s3 "$dir" PUT "/$b")
    [ "$code" = 200 ] || fail "creating bucket $b: HTTP $code" "$dir/log/client.rgw.a.log"
  done
  mv "$dir/s3.env.tmp" "$dir/s3.env"
  step "buckets created"

  trap - EXIT
  [ -z "$watch" ] || start_watcher "$dir" "$watch"
  local us=$((${EPOCHREALTIME/[.,]/} - T0))
  log "$(printf 'cluster of %s serving S3 on 127.0.0.1:%s after %d.%d s' "$dir" "$prgw" \
    $((us / 1000000)) $((us / 100000 % 10)))"
  printf '%s\n' "$dir/s3.env"
}

# start_watcher DIR PID: a detached process that runs `stop DIR` once PID is
# gone (or DIR was stopped already). Its own session, no inherited fds, so a
# caller reading start's stdout is not held open by it.
start_watcher() {
  local dir="$1" pid="$2" self
  self=$(readlink -f "$0")
  launch "$dir" watch "$dir/log/watch.log" bash -c \
    'while kill -0 "$1" 2>/dev/null && [ -e "$2/s3.env" ]; do sleep 1; done; exec "$3" stop "$2"' \
    watch "$pid" "$dir" "$self"
}

# write_env DIR PORT AK SK BUCKETS: s3.env on stdout.
write_env() {
  local dir="$1" port="$2"
  cat <<EOF
S3_ENDPOINT=http://127.0.0.1:$port
S3_HOST_PORT=127.0.0.1:$port
S3_ACCESS_KEY=$3
S3_SECRET_KEY=$4
S3_REGION=$REGION
S3_VHOST_DOMAIN=$VHOST_DOMAIN
S3_BUCKETS=$5
CEPH_DIR=$dir
CEPH_CONF=$dir/ceph.conf
CEPH_MON_PID=$(pid_of "$dir" mon)
CEPH_OSD_PID=$(pid_of "$dir" osd)
CEPH_RGW_PID=$(pid_of "$dir" rgw)
CEPH_RGW_LOG=$dir/log/client.rgw.a.log
EOF
}

START_DIR=""
FAILED_AT=""
# fail MESSAGE LOG...: the error, the logs' tails, then exit (the EXIT trap of
# start kills the daemons).
fail() {
  local msg="$1"
  shift
  log "error: $msg"
  tail_log "$@"
  FAILED_AT=""
  exit 1
}

start_failed() {
  local rc=$?
  trap - EXIT
  [ -n "$START_DIR" ] || exit "$rc"
  [ -z "$FAILED_AT" ] || log "error: command failed at $FAILED_AT"
  log "start failed; stopping what was started (logs stay in $START_DIR/log; '$PROG stop $START_DIR' removes it)"
  signal_daemons "$START_DIR" KILL
  for _ in $(seq 50); do any_alive "$START_DIR" || break; sleep 0.1; done
  exit 1
}

# cluster_dir DIR: DIR made absolute; fails unless it is a cluster directory.
cluster_dir() {
  local dir
  dir=$(abs_dir "$1")
  [ -d "$dir" ] || die "$dir does not exist"
  [ -e "$dir/$MARKER" ] || die "$dir was not made by $PROG"
  printf '%s' "$dir"
}

cmd_stop() {
  [ $# -eq 1 ] || usage
  local dir
  dir=$(abs_dir "$1")
  [ -e "$dir" ] || return 0
  [ -e "$dir/$MARKER" ] || die "$dir was not made by $PROG; not removing it"
  stop_daemons "$dir"
  rm -rf "${dir:?}"
}

rgw_port() {
  sed -n 's/^rgw frontends = beast endpoint=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$1/ceph.conf"
}

cmd_stop_gateway() {
  [ $# -eq 1 ] || usage
  local dir pid
  dir=$(cluster_dir "$1")
  pid=$(pid_of "$dir" rgw)
  alive "$pid" "$dir" || return 0
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 100); do alive "$pid" "$dir" || return 0; sleep 0.05; done
  die "radosgw $pid survived SIGKILL"
}

cmd_start_gateway() {
  [ $# -eq 1 ] || usage
  local dir port
  dir=$(cluster_dir "$1")
  alive "$(pid_of "$dir" rgw)" "$dir" && die "radosgw of $dir is already running"
  if ! alive "$(pid_of "$dir" osd)" "$dir" || ! alive "$(pid_of "$dir" mon)" "$dir"; then
    die "the monitor or OSD of $dir is not running"
  fi
  port=$(rgw_port "$dir")
  # The killed gateway's port is closed at once (no listener lingers), but wait
  # for it briefly in case the kernel still has it.
  for _ in $(seq 50); do
    [ -z "$(ss -Htln "sport = :$port" 2>/dev/null)" ] && break
    sleep 0.1
  done
  launch "$dir" rgw "$dir/log/rgw.out" radosgw -f -c "$dir/ceph.conf" -n client.rgw.a
  if ! wait_gateway "$dir" "$port"; then
    kill -KILL "$(pid_of "$dir" rgw)" 2>/dev/null || true
    die "radosgw did not come back"
  fi
  sed -i "s/^CEPH_RGW_PID=.*/CEPH_RGW_PID=$(pid_of "$dir" rgw)/" "$dir/s3.env"
}

cmd_signal_gateway() {
  local sig="$1"
  shift
  [ $# -eq 1 ] || usage
  local dir pid
  dir=$(cluster_dir "$1")
  pid=$(pid_of "$dir" rgw)
  alive "$pid" "$dir" || die "radosgw of $dir is not running"
  kill -s "$sig" "$pid"
}

[ $# -ge 1 ] || usage
sub="$1"
shift
case "$sub" in
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  stop-gateway) cmd_stop_gateway "$@" ;;
  start-gateway) cmd_start_gateway "$@" ;;
  pause-gateway) cmd_signal_gateway STOP "$@" ;;
  resume-gateway) cmd_signal_gateway CONT "$@" ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac

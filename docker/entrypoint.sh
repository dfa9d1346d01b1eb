#!/bin/bash
# The image's entrypoint: checks that /dev/shm can hold the pool the flags ask
# for before the server starts (a container's /dev/shm is 64 MiB unless told
# otherwise), says how to fix it if not, then runs lmcache-server with the
# same arguments. Without --l1-size-gb the server picks its default and makes
# the same check itself.
set -euo pipefail

size_gb=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --l1-size-gb) size_gb="${args[$((i + 1))]:-}" ;;
    --l1-size-gb=*) size_gb="${args[$i]#*=}" ;;
  esac
done

if [[ -n "$size_gb" ]]; then
  need=$(awk -v g="$size_gb" 'BEGIN { printf "%.0f", g * 1073741824 }')
  have=$(df --output=avail -B1 /dev/shm 2>/dev/null | tail -n1 | tr -d ' ')
  if [[ -z "$have" || "$have" -lt "$need" ]]; then
    need_g=$(awk -v b="$need" 'BEGIN { printf "%d", b / 1073741824 + 2 }')
    have_m=$(( ${have:-0} / 1048576 ))
    echo "lmcache-server: /dev/shm has ${have_m} MiB free but --l1-size-gb ${size_gb} needs" \
         "${size_gb} GiB. Fix: docker/podman run --shm-size=${need_g}g ...; Kubernetes:" \
         "hostIPC: true, or an emptyDir with medium: Memory and sizeLimit: ${need_g}Gi at" \
         "/dev/shm (docs/deploy/); or lower --l1-size-gb." >&2
    exit 2
  fi
fi
exec /usr/local/bin/lmcache-server "$@"

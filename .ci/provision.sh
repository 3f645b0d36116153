#!/usr/bin/env bash
# Idempotent machine setup for sglstack's tests: a real Docker engine (dockerd 20.10 from Debian, whose
# CLI runs BuildKit), Compose v1, the distribution registry, debootstrap, and a locally seeded
# debian:bookworm-slim (no registry is reachable, so nothing can be pulled).
set -euo pipefail

log() { printf '[provision] %s\n' "$*"; }

need_pkgs=()
if ! command -v dockerd >/dev/null || [ ! -x /usr/bin/docker ]; then need_pkgs+=(docker.io); fi
command -v docker-compose >/dev/null || need_pkgs+=(docker-compose)
command -v docker-registry >/dev/null || need_pkgs+=(docker-registry)
command -v debootstrap >/dev/null || need_pkgs+=(debootstrap)
# The host compiler nvcc drives (the JIT toolchain tests compile with NVIDIA's nvcc wheel).
command -v g++ >/dev/null || need_pkgs+=(g++)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  log "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# The 20.10 CLI shipped with docker.io: the one on PATH may be a newer CLI without buildx.
DOCKER=/usr/bin/docker
if ! "$DOCKER" info >/dev/null 2>&1; then
  if ! pgrep -x dockerd >/dev/null; then
    # A machine whose processes were killed keeps their pid files and sockets: clear them, or dockerd
    # refuses to start ("pid file found") or waits on a dead containerd.
    rm -f /var/run/docker.pid /var/run/docker.sock
    if ! pgrep -x containerd >/dev/null; then
      rm -f /run/containerd/containerd.sock /run/docker/containerd/containerd.pid /var/run/docker/containerd/containerd.pid
    fi
    log "starting dockerd"
    mkdir -p /var/log
    nohup dockerd >/var/log/sglstack-dockerd.log 2>&1 &
  fi
  for _ in $(seq 1 60); do
    "$DOCKER" info >/dev/null 2>&1 && break
    sleep 1
  done
  "$DOCKER" info >/dev/null 2>&1 || { log "dockerd did not come up"; tail -20 /var/log/sglstack-dockerd.log; exit 1; }
fi
log "dockerd $("$DOCKER" version --format '{{.Server.Version}}')"

if ! "$DOCKER" image inspect debian:bookworm-slim >/dev/null 2>&1; then
  log "seeding debian:bookworm-slim with debootstrap (about a minute)"
  root=$(mktemp -d /tmp/sglstack-bookworm.XXXXXX)
  debootstrap --variant=minbase bookworm "$root" >/tmp/sglstack-debootstrap.log 2>&1 \
    || { tail -20 /tmp/sglstack-debootstrap.log; exit 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | "$DOCKER" import -c 'CMD ["bash"]' - debian:bookworm-slim >/dev/null
  rm -rf "$root"
fi
log "debian:bookworm-slim $("$DOCKER" image inspect -f '{{.Id}}' debian:bookworm-slim | cut -c1-19)"

#!/usr/bin/env bash
# Idempotent machine setup for sglstack's tests: a real Docker engine (dockerd 20.10 from Debian, whose
# CLI runs BuildKit), Compose v1, the distribution registry, debootstrap, mmdebstrap and QEMU's aarch64
# handler (linux/arm64 root file systems and images run under emulation), a locally seeded
# debian:bookworm-slim (no registry is reachable, so nothing can be pulled), and the seeded bases of
# stacks.yaml (`invoke seed-base`: the same bytes on every machine, pinned by digest).
set -euo pipefail

log() { printf '[provision] %s\n' "$*"; }

need_pkgs=()
if ! command -v dockerd >/dev/null || [ ! -x /usr/bin/docker ]; then need_pkgs+=(docker.io); fi
command -v docker-compose >/dev/null || need_pkgs+=(docker-compose)
command -v docker-registry >/dev/null || need_pkgs+=(docker-registry)
command -v debootstrap >/dev/null || need_pkgs+=(debootstrap)
command -v mmdebstrap >/dev/null || need_pkgs+=(mmdebstrap)
# arm64 user space on an x86_64 machine: the statically linked QEMU, registered with binfmt_misc (flags F:
# the interpreter is opened now, so it works inside containers and chroots too).
if [ "$(uname -m)" != aarch64 ]; then
  [ -x /usr/bin/qemu-aarch64-static ] || need_pkgs+=(qemu-user-static)
  command -v update-binfmts >/dev/null || need_pkgs+=(binfmt-support)
fi
# The host compiler nvcc drives (the JIT toolchain tests compile with NVIDIA's nvcc wheel).
command -v g++ >/dev/null || need_pkgs+=(g++)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  log "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if [ "$(uname -m)" != aarch64 ]; then
  if [ ! -e /proc/sys/fs/binfmt_misc/status ]; then
    log "mounting binfmt_misc"
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  fi
  if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    log "registering the qemu-aarch64 handler"
    update-binfmts --enable qemu-aarch64
  fi
  log "qemu-aarch64: $(head -1 /proc/sys/fs/binfmt_misc/qemu-aarch64)"
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

# The seeded bases the stacks pin (a minute for amd64, about three emulated for arm64; already there: nothing).
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "${SGLSTACK_SEED_BASES:-1}" = 1 ] && command -v invoke >/dev/null; then
  for stack in pypi-cu130 pypi-cu130-gb; do
    (cd "$here" && invoke seed-base --stack "$stack") || { log "seed-base --stack $stack failed"; exit 1; }
  done
fi

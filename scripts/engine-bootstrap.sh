#!/usr/bin/env bash
# Make a Docker engine with the runsc (gVisor) runtime answer on this machine.
#
# Idempotent: when an engine already answers and runsc is registered, it changes nothing.
# Otherwise, as root on Debian/Ubuntu, it installs docker.io, runsc and debootstrap (on Debian 12,
# runsc from bookworm-backports, also replacing an older one), registers runsc and turns on the
# daemon's experimental mode (Docker's checkpoints, for memory snapshots, need it) in
# /etc/docker/daemon.json (keeping every other key the file holds), starts dockerd in the
# background with a log file when there is no systemd, and waits until it answers.
# It prints each thing it did. Called by the Makefile, the README and .ci/run.
set -euo pipefail

DAEMON_JSON=${DAEMON_JSON:-/etc/docker/daemon.json}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/dockerd.log}
WAIT_SECONDS=${WAIT_SECONDS:-60}
BACKPORTS_LIST=${BACKPORTS_LIST:-/etc/apt/sources.list.d/jupyter-sandbox-backports.list}
MIN_RUNSC_RELEASE=20240101

say() { printf 'engine-bootstrap: %s\n' "$*"; }
engine_answers() { docker info >/dev/null 2>&1; }
runsc_registered() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }
experimental() { [ "$(docker info --format '{{.ExperimentalBuild}}' 2>/dev/null)" = true ]; }
start_dockerd() {
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    say "starting docker with systemctl"
    systemctl start docker
  else
    say "starting dockerd in the background (log: $DOCKERD_LOG)"
    nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
  fi
  for _ in $(seq 1 "$WAIT_SECONDS"); do engine_answers && break; sleep 1; done
}
am_root() { [ "$(id -u)" -eq 0 ]; }

if engine_answers && runsc_registered && experimental; then
  if command -v debootstrap >/dev/null 2>&1 || ! am_root; then
    say "Docker engine answers and the runsc runtime is registered; nothing to do."
    exit 0
  fi
fi

if ! am_root; then
  if engine_answers; then
    say "the Docker engine answers but has no 'runsc' runtime. Ask an administrator to run"
    say "  sudo $0"
    say "or use the lighter runtime: JUPYTER_SANDBOX_RUNTIME=runc."
    exit 0
  fi
  say "no Docker engine answers and this is not root, so nothing can be installed here."
  say "Install Docker and gVisor (Debian/Ubuntu: sudo apt-get install docker.io runsc), then run"
  say "  sudo $0"
  say "or add yourself to the 'docker' group if the engine runs but refuses you."
  exit 1
fi

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v runsc >/dev/null 2>&1 || missing+=(runsc)
# debootstrap builds the sandbox image's base when there is no registry (jupyter sandbox build-image).
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    say "missing ${missing[*]} and no apt-get: install Docker and gVisor (runsc) with this system's package manager."
    exit 1
  fi
  say "installing ${missing[*]} with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Debian 12's own gVisor (20221219) predates directfs: Python imports, and so every kernel
# start, take ~1.7x as long as under the release in bookworm-backports (20240729). Only runsc
# is taken from backports (apt pins backports below the release, so nothing else follows).
runsc_release() { runsc --version 2>/dev/null | grep -o '[0-9]\{8\}' | head -1; }
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
if [ "$codename" = bookworm ] && [ "$(runsc_release || true)" \< "$MIN_RUNSC_RELEASE" ]; then
  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    say "adding Debian's bookworm-backports to $BACKPORTS_LIST (for runsc only)"
    echo "deb http://deb.debian.org/debian bookworm-backports main" >"$BACKPORTS_LIST"
  fi
  say "upgrading runsc $(runsc_release) to bookworm-backports' release"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm-backports runsc >/dev/null
fi

# Register runsc (the fixed runtime flags are explained in register-runsc.py).
runsc_path=$(command -v runsc)
mkdir -p "$(dirname "$DAEMON_JSON")"
changed=$(python3 "$(dirname "$0")/register-runsc.py" "$DAEMON_JSON" "$runsc_path")
[ "$changed" = changed ] && say "registered runsc ($runsc_path) in $DAEMON_JSON"

[ "$changed" = restart ] && say "turned on the daemon's experimental mode in $DAEMON_JSON (memory snapshots)"

if engine_answers; then
  if [ "$changed" != unchanged ]; then
    say "reloading dockerd so it reads $DAEMON_JSON"
    pkill -HUP -x dockerd || true
    for _ in $(seq 1 "$WAIT_SECONDS"); do runsc_registered && break; sleep 1; done
  fi
  # Experimental mode is read only at start, and a restart stops every container (there is no
  # live-restore here): done only when none runs.
  if ! experimental; then
    if [ -n "$(docker ps -q)" ]; then
      say "dockerd must restart to turn on experimental mode (memory snapshots), but containers"
      say "are running; restart it when they are done, and run $0 again."
    else
      say "restarting dockerd (no container runs) so that it reads experimental mode"
      if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        systemctl stop docker
      else
        pkill -x dockerd || true
        for _ in $(seq 1 "$WAIT_SECONDS"); do pgrep -x dockerd >/dev/null || break; sleep 1; done
      fi
      start_dockerd
    fi
  fi
else
  start_dockerd
fi

if ! engine_answers; then
  say "dockerd did not answer within ${WAIT_SECONDS}s; see $DOCKERD_LOG"
  exit 1
fi
if ! runsc_registered; then
  say "dockerd answers but does not list the runsc runtime; see $DAEMON_JSON and $DOCKERD_LOG"
  exit 1
fi
say "Docker engine answers with runtimes: $(docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}')"

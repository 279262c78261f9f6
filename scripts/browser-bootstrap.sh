#!/usr/bin/env bash
# Installs Debian's Chromium (/usr/bin/chromium) for the JupyterLab extension's browser tests,
# which Playwright drives with executablePath /usr/bin/chromium: no browser is downloaded.
# Changes nothing when it is there. Needs root (or sudo) to install.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null; then
  SUDO=(sudo)
else
  echo "browser-bootstrap: $CHROMIUM is missing and this user cannot install it: as root, run" \
    "'apt-get install -y chromium'" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "browser-bootstrap: $CHROMIUM is missing and there is no apt-get: install Chromium" \
    "so that $CHROMIUM exists" >&2
  exit 1
fi
echo "browser-bootstrap: installing Debian's chromium"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq chromium >/dev/null
"$CHROMIUM" --version

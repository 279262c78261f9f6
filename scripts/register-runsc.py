#!/usr/bin/env python3
"""Register gVisor's runsc in a Docker daemon.json, keeping everything else the file holds.

Usage: register-runsc.py DAEMON_JSON RUNSC_PATH
Prints "changed" when it wrote the file, "unchanged" when runsc was registered as wanted.
The runtime flags are fixed here; nothing user-controlled reaches them:
  --network=none     the sandbox gets loopback only (containers also run with --network none)
  --host-uds=create  the in-sandbox kernel may create its ipc:// sockets in the bind-mounted
                     sandbox directory; no host socket can be opened from inside
"""

from __future__ import annotations

import json
import os
import sys

RUNSC_ARGS = ["--network=none", "--host-uds=create"]


def register(path: str, runsc: str) -> bool:
    try:
        with open(path) as f:
            config = json.load(f)
    except FileNotFoundError:
        config = {}
    if not isinstance(config, dict):
        raise SystemExit(f"{path} does not hold a JSON object; fix it by hand")
    wanted = {"path": runsc, "runtimeArgs": RUNSC_ARGS}
    runtimes = config.setdefault("runtimes", {})
    if runtimes.get("runsc") == wanted:
        return False
    runtimes["runsc"] = wanted
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return True


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print("changed" if register(sys.argv[1], sys.argv[2]) else "unchanged")

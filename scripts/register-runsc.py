#!/usr/bin/env python3
"""Register gVisor's runsc in a Docker daemon.json, keeping everything else the file holds.

Usage: register-runsc.py DAEMON_JSON RUNSC_PATH
Prints "unchanged" when the file was as wanted, "changed" when it registered runsc (a reload of
dockerd reads it), "restart" when it also turned on the daemon's experimental mode, which
Docker's checkpoints (memory snapshots) need and which dockerd reads only when it starts.
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


def register(path: str, runsc: str) -> str:
    try:
        with open(path) as f:
            config = json.load(f)
    except FileNotFoundError:
        config = {}
    if not isinstance(config, dict):
        raise SystemExit(f"{path} does not hold a JSON object; fix it by hand")
    wanted = {"path": runsc, "runtimeArgs": RUNSC_ARGS}
    runtimes = config.setdefault("runtimes", {})
    outcome = "unchanged"
    if runtimes.get("runsc") != wanted:
        runtimes["runsc"] = wanted
        outcome = "changed"
    if config.get("experimental") is not True:
        config["experimental"] = True
        outcome = "restart"
    if outcome == "unchanged":
        return outcome
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return outcome


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print(register(sys.argv[1], sys.argv[2]))

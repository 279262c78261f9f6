"""The sandbox's kernel supervisor: runs ipykernel, and restarts it when the host asks.

It runs under tini (``docker run --init``) as the sandbox's non-root user. The host asks for a
fresh interpreter by creating ``restart-requested`` in the sandbox directory and then shutting the
kernel down; any other kernel exit ends the sandbox, so a crash or an OOM kill shows up as the
container's own exit. Each exit is recorded in ``kernel-exit.json`` for the host to explain.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys

IO = "/run/sandbox"
RESTART = os.path.join(IO, "restart-requested")
EXIT_RECORD = os.path.join(IO, "kernel-exit.json")
KERNEL = [sys.executable, "-m", "ipykernel_launcher", "-f", os.path.join(IO, "kernel.json")]


def main() -> int:
    stopping = False
    kernel = None

    def stop(signum, _frame):
        nonlocal stopping
        stopping = True
        if kernel is not None and kernel.poll() is None:
            kernel.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts reach the kernel as messages
    while True:
        # Its own session: an interrupt (SIGINT to the kernel's group) also reaches the
        # processes a cell started, and they can all be ended together below.
        kernel = subprocess.Popen(KERNEL, start_new_session=True)
        code = kernel.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(kernel.pid, signal.SIGKILL)  # background processes of the old kernel
        with open(EXIT_RECORD + ".tmp", "w") as record:
            json.dump({"returncode": code}, record)
        os.replace(EXIT_RECORD + ".tmp", EXIT_RECORD)
        if stopping or not os.path.exists(RESTART):
            return 128 - code if code < 0 else code
        os.unlink(RESTART)


if __name__ == "__main__":
    sys.exit(main())

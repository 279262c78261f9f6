"""The sandbox's kernel supervisor: runs ipykernel, and restarts it when the host asks.

It runs under tini (``docker run --init``) as the sandbox's non-root user. The host asks for a
fresh interpreter by writing a generation number to ``restart-requested`` in the sandbox
directory and then shutting the kernel down; any other kernel exit ends the sandbox, so a crash
or an OOM kill shows up as the container's own exit. Each exit is recorded in
``kernel-exit.json`` for the host to explain. A kernel asked to restart gets SHUTDOWN_GRACE
seconds to exit on its own and is then killed, as jupyter_client's KernelManager does: ipykernel
can answer shutdown_request and then hang (a stuck control thread, a user's atexit handler).

Each generation binds new socket paths (kernel-g<N>-<port>): gVisor lets a sandbox create host
Unix sockets but neither unlink nor bind over them again. A sandbox made for memory snapshots
gets a TCP connection file instead (``bridge_port_offset`` in it): its kernel listens on
loopback and the bridge (sandbox_bridge.py) owns the host-facing sockets at the same paths.

At boot it also runs the isolation probe the host left in ``attestation-probe.py`` (the
package's attestation/probe.py and probe_boundaries.py joined into one script: see
``probe_source`` in attestation/run.py), in this process while the first kernel imports, and
leaves the output in ``attestation.json``: cheaper than the host's ``docker exec`` of a second
Python.
"""

import contextlib
import io
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import threading
import time

IO = "/run/sandbox"
RESTART = os.path.join(IO, "restart-requested")
EXIT_RECORD = os.path.join(IO, "kernel-exit.json")
CONNECTION = os.path.join(IO, "kernel.json")
BOOT_PROBE = os.path.join(IO, "attestation-probe.py")
BOOT_PROBE_TAKEN = os.path.join(IO, "attestation-probe.taken")
BOOT_RESULT = os.path.join(IO, "attestation.json")
MATPLOTLIB_CACHE = "/opt/sandbox/matplotlib-cache"
# Where a notebook's own `%pip install` puts packages: the image's venv is read-only, so pip
# (PIP_PREFIX, set by the image) installs here, in the sandbox's /tmp; the image's PATH and a
# .pth file in its venv include it, for the kernel and for commands run in the sandbox. They
# last as long as the sandbox, kernel restarts included; the host mounts a tmpfs of their own
# here (sandbox/container_spec.py, PACKAGES_DIR), as large as /tmp and not noexec.
# pip reaches an index only where the network policy allows it.
PIP_PREFIX = "/tmp/.local"
# Seconds a kernel asked to restart may take to exit (jupyter_client's shutdown_wait_time).
SHUTDOWN_GRACE = 5.0
# Seconds between looks for a restart request while a kernel runs.
RESTART_POLL = 0.5


def connection_file(generation, bridged):
    """The connection file of a kernel generation: the first is the host's own. A bridged
    kernel keeps its TCP ports; the bridge gives each generation its new paths."""
    if generation == 0 or bridged:
        return CONNECTION
    with open(CONNECTION) as f:
        info = json.load(f)
    info["ip"] = os.path.join(IO, f"kernel-g{generation}")
    path = os.path.join(IO, f"kernel-g{generation}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(path + ".tmp", path)
    return path


def requested_generation():
    """The generation the host asked for, or None when it asked for no restart."""
    try:
        with open(RESTART) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    os.unlink(RESTART)
    return int(text) if text.isdigit() else None


def wait_for_exit(kernel):
    """The kernel's exit code; a kernel that outlives a restart request by SHUTDOWN_GRACE is
    killed (with the processes of its session)."""
    exited = threading.Event()

    def end_if_restart_hangs():
        asked = None
        while not exited.wait(RESTART_POLL):
            if asked is None:
                asked = time.monotonic() if os.path.exists(RESTART) else None
            elif time.monotonic() - asked > SHUTDOWN_GRACE:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(kernel.pid, signal.SIGKILL)
                return

    threading.Thread(target=end_if_restart_hangs, daemon=True).start()
    try:
        return kernel.wait()
    finally:
        exited.set()


def end_daemons():
    """Kill what the old kernel left behind outside its session (a ``setsid`` daemon): the
    processes that tini (pid 1) adopted, with their groups. This supervisor's own children and
    ``docker exec`` processes (whose parent is outside the sandbox, pid 0) are spared."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (1, os.getpid()):
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent == 1:
                os.killpg(os.getpgid(int(entry)), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to end


def take_boot_probe():
    """The probe the host left for this boot, renamed first so that the host, seeing it gone,
    knows to wait for its output; None when there is none."""
    try:
        os.rename(BOOT_PROBE, BOOT_PROBE_TAKEN)
    except OSError:
        return None
    return BOOT_PROBE_TAKEN


def run_boot_probe(path):
    """Run the probe here (it prints one JSON object) and leave its output for the host."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        text = out.getvalue()
    except (Exception, SystemExit) as exc:  # the host reports it; the kernel runs on
        text = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
    with open(BOOT_RESULT + ".tmp", "w") as f:
        f.write(text)
    os.replace(BOOT_RESULT + ".tmp", BOOT_RESULT)


def seed_matplotlib_cache():
    """Copy the font cache built into the image, so the first plot does not rebuild it."""
    target = os.environ.get("MPLCONFIGDIR")
    if target and not os.path.exists(target) and os.path.isdir(MATPLOTLIB_CACHE):
        shutil.copytree(MATPLOTLIB_CACHE, target)


def make_local_packages_dir():
    """The site-packages of the notebook's own packages, which the image's .pth file puts on
    every interpreter's path: it is added there only if it exists when Python starts."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    os.makedirs(os.path.join(PIP_PREFIX, "lib", version, "site-packages"), exist_ok=True)


def start_bridge():
    """The bridge, serving the host's requests, when the connection file asks for one."""
    with open(CONNECTION) as f:
        info = json.load(f)
    if info.get("transport") != "tcp" or "bridge_port_offset" not in info:
        return None
    from sandbox_bridge import Bridge  # imports zmq: only for the sandboxes that need it

    bridge = Bridge(IO, info)
    threading.Thread(target=bridge.serve_requests, daemon=True).start()
    return bridge


def main() -> int:
    seed_matplotlib_cache()
    make_local_packages_dir()
    bridge = start_bridge()
    stopping = False
    kernel = None

    def stop(signum, _frame):
        nonlocal stopping
        stopping = True
        if kernel is not None and kernel.poll() is None:
            kernel.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts reach the kernel as messages
    probe = take_boot_probe()
    generation = 0
    while True:
        kernel_command = [
            sys.executable,
            "-m",
            "ipykernel_launcher",
            "-f",
            connection_file(generation, bridge is not None),
        ]
        # Its own session: an interrupt (SIGINT to the kernel's group) also reaches the
        # processes a cell started, and they can all be ended together below.
        kernel = subprocess.Popen(kernel_command, start_new_session=True)
        if bridge is not None:
            following = threading.Thread(target=bridge.follow_kernel, args=(generation, kernel))
            following.daemon = True
            following.start()
        if probe is not None:  # while the kernel imports: it measures the kernel's process too
            run_boot_probe(probe)
            probe = None
        code = wait_for_exit(kernel)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(kernel.pid, signal.SIGKILL)  # background processes of the old kernel
        end_daemons()
        with open(EXIT_RECORD + ".tmp", "w") as record:
            json.dump({"returncode": code}, record)
        os.replace(EXIT_RECORD + ".tmp", EXIT_RECORD)
        generation = None if stopping else requested_generation()
        if generation is None:
            return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())

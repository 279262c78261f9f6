"""The root of every process tree the host starts for a caller in a sandbox: a command (run to
its end or in the background) and a terminal's shell. Run as the sandbox's user:
``python3 -I -S -c SOURCE TOKEN ARGV...`` (exec_marks.supervised).

It makes itself the child subreaper (``PR_SET_CHILD_SUBREAPER``): a process whose parent ends
is then adopted by it, not by the sandbox's init, so everything the command starts stays in
its subtree whatever it does to its session, process group or environment (``setsid``, a
double fork, ``env -i``). And not dumpable (``PR_SET_DUMPABLE`` 0): other processes of the
sandbox's user may not ptrace it nor read its memory or environment. It then starts ARGV as
its child (looked up on the caller's PATH, as the engine would have) and waits, reaping what it
adopts, until that child ends; it ends with the child's status (128 + N for a signal N, as the
engine reports a killed process), leaving nothing of its own. A program that cannot be started
is reported as the engine reports it: exit status 126 and exec_start's message.

The kill (kill_program.py) finds it by TOKEN on its command line, stops it first, so that it
can neither end nor hand its subtree on, kills its descendants until none is left, then it.
What the command leaves running once its child has ended (a daemon) is no longer anyone's
descendant here: it is adopted by init, and only its exec mark, if it kept its environment,
still reaches it.

Under runc it also opens an audit session of its own before it starts the command: it writes a
login uid derived from TOKEN (:func:`audit_id`) to ``/proc/self/loginuid``, which every process
it starts inherits and none can change again (the kernel allows an unset login uid to be set
once without privilege; a set one only with CAP_AUDIT_CONTROL, which no process in a sandbox
has). So a process that kills this supervisor (same user) and empties its environment still
carries the login uid, and the kill finds it by that. gVisor has no audit (no loginuid file),
and a host whose engine runs inside a login session has it set already: the supervisor goes
on without (under runc the kill then has the subtree and the mark only).

Under gVisor a cgroup holds the command instead (row 73). gVisor's sentry has cgroups of its
own; a runsc sandbox shows its "job" hierarchy (a controller that only labels) at
/sys/fs/cgroup/job (CGROUPS), a directory owned by uid 0 that the sandbox's user cannot write,
and gVisor lets a process into a cgroup only by a write to that cgroup's ``cgroup.procs``. When
CGROUPS is there, this supervisor starts nothing until the host, by an exec as uid 0
(kill_program.py's ``place``), has made the cgroup ``jupyter-sandbox-TOKEN`` and moved it in:
every process the command starts inherits it, and none can leave it (every other cgroup's
``cgroup.procs`` is uid 0's, and a user namespace maps no uid 0), whatever it does to its
session, group, environment or this supervisor. The kill reads the cgroup's ``cgroup.procs``.
Not placed within PLACE_SECONDS, it ends with NOT_STARTED: a command that could escape its
kill does not run.

It travels as source (the sandbox has no jupyter_sandbox to import), standard library only,
and imports as little as it can: each import costs under gVisor (benchmarks/exec.py).
"""

from __future__ import annotations

import os
import signal
import sys
import time

PR_SET_DUMPABLE = 4
# Login uids of supervised commands: 2**30 and up, far from any account's uid (the kill program
# derives the same from the token: kill_program.audit_id).
AUDIT_BASE = 2**30
PR_SET_CHILD_SUBREAPER = 36
# gVisor's "job" cgroup hierarchy in a runsc sandbox (Linux has no such controller: absent under
# runc), and the prefix of a command's cgroup there: as kill_program.CGROUPS and CGROUP_PREFIX.
CGROUPS = "/sys/fs/cgroup/job"
CGROUP_PREFIX = "jupyter-sandbox-"
PLACE_SECONDS = 20.0  # how long the host's placing exec may take to move this process in
PLACE_PAUSE = 0.005  # seconds between two looks at this process's cgroups
NOT_STARTED = 126  # the engine's status for a program it could not start (exec_start.py)
# Signals this process is sent on its own, meant for the command: a TTY's hangup reaches the
# session leader (this process, in a terminal), and a TERM is a request to end.
FORWARDED = (signal.SIGHUP, signal.SIGTERM)
# Sent to a whole foreground process group by a TTY: the command gets its own copy.
IGNORED = (signal.SIGINT, signal.SIGQUIT)


def set_process_options() -> None:
    """Subreaper and not dumpable, or exit with NOT_STARTED: a command that could leave its
    tree must not run (Linux has had both since 3.4; gVisor has both)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for option, value in ((PR_SET_CHILD_SUBREAPER, 1), (PR_SET_DUMPABLE, 0)):
        if libc.prctl(option, value, 0, 0, 0) != 0:
            reason = os.strerror(ctypes.get_errno())
            os.write(2, f"the command's supervisor cannot set prctl {option}: {reason}\n".encode())
            os._exit(NOT_STARTED)


def audit_id(token: str) -> int:
    """The login uid of the command with ``token`` (hex): 2**30 plus its first 28 bits."""
    return AUDIT_BASE + int(token[:7], 16)


def open_audit_session(token: str) -> None:
    """Set this process's login uid to :func:`audit_id`, for the command to inherit; where the
    kernel offers no audit (gVisor) or the login uid is set already, nothing changes."""
    try:
        fd = os.open("/proc/self/loginuid", os.O_WRONLY)
    except OSError:  # gVisor: no such file
        return
    try:
        os.write(fd, str(audit_id(token)).encode())
    except (OSError, ValueError):  # set already (EPERM), or no such uid here (EINVAL)
        pass
    finally:
        os.close(fd)


def in_cgroup(cgroups: bytes, token: str) -> bool:
    """Whether ``cgroups`` (``/proc/self/cgroup``: ``ID:CONTROLLERS:PATH`` lines) puts this
    process in the job hierarchy's cgroup of ``token``."""
    wanted = f"/{CGROUP_PREFIX}{token}".encode()
    for line in cgroups.splitlines():
        _id, _, rest = line.partition(b":")
        controllers, _, path = rest.partition(b":")
        if b"job" in controllers.split(b",") and path.endswith(wanted):
            return True
    return False


def wait_for_cgroup(token: str) -> None:
    """Where the sandbox has gVisor's job hierarchy, wait until the host has moved this process
    into the command's cgroup; exit with NOT_STARTED if it has not within PLACE_SECONDS."""
    if not os.path.isdir(CGROUPS):  # runc: the audit session holds the command instead
        return
    deadline = time.monotonic() + PLACE_SECONDS
    while True:
        with open("/proc/self/cgroup", "rb") as f:
            if in_cgroup(f.read(), token):
                return
        if time.monotonic() > deadline:
            message = (
                "the command's supervisor was not placed in its cgroup within "
                f"{PLACE_SECONDS:g}s: the command was not started\n"
            )
            os.write(2, message.encode())
            os._exit(NOT_STARTED)
        time.sleep(PLACE_PAUSE)


def start(argv: list[str]) -> int:
    """Start the child that runs ``argv``; its pid. posix_spawn, not fork and exec: the
    interpreter's memory is not copied, which is quicker on both runtimes, under gVisor above
    all (figures: docs/explanation/performance.md, "Figures behind the code")."""
    try:
        # SIGPIPE and SIGXFSZ to their defaults: Python ignores them, a shell's child would not.
        return os.posix_spawnp(
            argv[0], argv, os.environ, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ)
        )
    except OSError:
        message = (
            f"{argv[0]!r} could not be started in the sandbox: no such program, or not "
            "executable by the sandbox's user\n"
        )
        os.write(2, message.encode())
        os._exit(NOT_STARTED)


def main(token: str, argv: list[str]) -> None:
    open_audit_session(token)  # first: a process not dumpable may not open its loginuid
    set_process_options()
    wait_for_cgroup(token)  # before the start: the child inherits the cgroup
    for signum in IGNORED:  # before the start: Python's own SIGINT handler would end this
        signal.signal(signum, lambda _signum, _frame: None)
    child = start(argv)  # (a handler, unlike SIG_IGN, is the default again in the child)

    def forward(signum: int, _frame: object) -> None:
        try:  # noqa: SIM105 (contextlib would cost an import)
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    while True:
        pid, status = os.waitpid(-1, 0)  # adopted processes are reaped here as they end
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

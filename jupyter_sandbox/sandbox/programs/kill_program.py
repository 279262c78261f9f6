"""The kill of one exec's processes, run in its sandbox as the sandbox's user when the command's
time is up, its wait is given up, a background command is removed or a terminal closed:
``python3 -I -S -c SOURCE NAME=TOKEN`` (exec_deadline.kill_marked).

Three ways reach the processes. The command's supervisor (supervisor_program.py), whose command
line holds TOKEN after its source, is the subreaper of everything the command started: its
descendants are the command's processes, whatever they did to their session, group or
environment. And the exec mark, ``NAME=TOKEN`` in the environment every process inherits:
that still reaches a process the supervisor no longer holds (the command's child ended and
left it to init), unless it emptied its environment; a marked process that leads its process
group has its group killed too, which reaches a child that emptied its environment but stayed
in the group. (The mark alone was the whole design before the supervisor: exec_deadline.py.)

A third way, under runc: the supervisor's audit session. It set its login uid to one derived
from TOKEN (:func:`audit_id`) before starting the command, and every process the command
started inherits it and cannot change it: one that killed its supervisor and emptied its
environment is still found by ``/proc/<pid>/loginuid``. (gVisor has no audit: there, such a
process escapes through these, and a fourth way holds it.)

A fourth way, under gVisor: the command's cgroup. The supervisor started nothing until the
host had moved it into the cgroup ``jupyter-sandbox-TOKEN`` of gVisor's job hierarchy (this
program's ``place``, below), which every process the command started inherited and none can
leave: the processes listed in its ``cgroup.procs`` are killed too.

The supervisors are stopped first (SIGSTOP: a stopped process neither ends, which would hand
its subtree to init, nor reaps, and the kernel still reparents orphans to it). Then, in rounds
until none is left: every process found is stopped (a stopped process cannot fork; one forked
since the look is found in the next round, adopted by the supervisor), then killed. The
supervisors are killed last. Exits 0 when nothing is left, 1 when processes outlived
ROUNDS_SECONDS. Everything in /proc is the sandbox's to write: only numbers are read from it,
and a process that ends meanwhile is skipped.

``python3 -I -S -c SOURCE place TOKEN``, run by the host as uid 0 (with no capability, and none
of the sandbox's environment) right after it started a supervised command in a runsc sandbox,
places that command's supervisor: it makes the cgroup ``jupyter-sandbox-TOKEN`` under CGROUPS
and writes the supervisor's pid to its ``cgroup.procs`` (exit 0) once the supervisor is seen
(within PLACE_SECONDS, else 1; 3 where the sandbox has no CGROUPS). It first removes the
cgroups of commands that have ended: empty, and no supervisor of theirs left (a daemon a
command left running keeps its cgroup, and its kill reaches it).
"""

from __future__ import annotations

import os
import signal
import sys
import time

ROUNDS_SECONDS = 8.0  # the host gives the whole exec 10 s (exec_deadline.KILL_SECONDS)
ROUND_PAUSE = 0.01  # seconds for the killed to end before the next look
GONE = (b"Z", b"X")  # states of a process that has ended: nothing left to kill
AUDIT_BASE = 2**30  # as supervisor_program.AUDIT_BASE
# gVisor's job cgroup hierarchy and the prefix of a command's cgroup: as supervisor_program's.
CGROUPS = "/sys/fs/cgroup/job"
CGROUP_PREFIX = "jupyter-sandbox-"
PLACE_SECONDS = 15.0  # the supervisor waits 20 s for its place (supervisor_program.py)
NO_CGROUPS = 3  # place's status where the sandbox has no CGROUPS (not gVisor's, or none)
TOKEN_DIGITS = b"0123456789abcdef"


def audit_id(token: bytes) -> bytes:
    """The login uid the supervisor with ``token`` gave its command (supervisor_program.py), as
    /proc shows it; empty for a token that is not hex (no process has an empty login uid)."""
    try:
        return str(AUDIT_BASE + int(token[:7], 16)).encode()
    except ValueError:
        return b""


def read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # ended meanwhile, or not readable by this user
        return b""


def processes() -> dict[int, tuple[int, int]]:
    """Every live process but this one: pid -> (parent, process group)."""
    found = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        stat = read(f"/proc/{entry}/stat")
        # The fields after the ")" that closes the command name: state, parent, group.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 3 or fields[0] in GONE:
            continue
        try:
            found[int(entry)] = (int(fields[1]), int(fields[2]))
        except ValueError:
            continue
    return found


def supervisor_tokens(found: dict[int, tuple[int, int]]) -> dict[int, bytes]:
    """Every process whose command line is a supervisor's: pid -> its token."""
    held = {}
    for pid in found:
        argv = read(f"/proc/{pid}/cmdline").split(b"\0")
        if len(argv) > 5 and argv[1:4] == [b"-I", b"-S", b"-c"]:
            held[pid] = argv[5]
    return held


def supervisors(found: dict[int, tuple[int, int]], token: bytes) -> set[int]:
    """The processes whose command line is a supervisor's with ``token``."""
    return {pid for pid, held in supervisor_tokens(found).items() if held == token}


def cgroup_of(token: bytes) -> str:
    """The path of the cgroup of the command with ``token``."""
    return f"{CGROUPS}/{CGROUP_PREFIX}{token.decode()}"


def in_cgroup(token: bytes) -> set[int]:
    """The processes in the cgroup of the command with ``token``; none where there is no such
    cgroup (runc, a command not placed, a token that is not a hex token)."""
    if not token or token.strip(TOKEN_DIGITS):
        return set()
    return {
        int(line) for line in read(f"{cgroup_of(token)}/cgroup.procs").split() if line.isdigit()
    }


def victims(
    found: dict[int, tuple[int, int]], roots: set[int], entry: bytes, session: bytes
) -> set[int]:
    """The supervisors' descendants, the processes of its audit ``session`` (a login uid), the
    marked processes and the groups marked ones lead (the processes of the command's cgroup
    are added by the caller)."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _group) in found.items():
        children.setdefault(parent, []).append(pid)
    chosen: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in chosen:
                chosen.add(child)
                stack.append(child)
    leaders = set()
    for pid, (_parent, group) in found.items():
        if session and read(f"/proc/{pid}/loginuid") == session:
            chosen.add(pid)
        if entry in read(f"/proc/{pid}/environ").split(b"\0"):
            chosen.add(pid)
            if group == pid:
                leaders.add(pid)
    chosen.update(pid for pid, (_parent, group) in found.items() if group in leaders)
    return chosen - roots - {1}


def signal_all(pids: set[int], signum: int) -> None:
    for pid in pids:
        try:  # noqa: SIM105 (contextlib would cost an import)
            os.kill(pid, signum)
        except OSError:  # ended meanwhile
            pass


def main(entry: bytes) -> int:
    token = entry.partition(b"=")[2]
    session = audit_id(token)
    deadline = time.monotonic() + ROUNDS_SECONDS
    roots: set[int] = set()
    try:
        while True:
            found = processes()
            new_roots = supervisors(found, token) - roots
            signal_all(new_roots, signal.SIGSTOP)
            roots |= new_roots
            left = victims(found, roots, entry, session) | (in_cgroup(token) - roots - {1})
            if not left:
                return 0
            if time.monotonic() > deadline:
                return 1
            signal_all(left, signal.SIGSTOP)
            signal_all(left, signal.SIGKILL)
            time.sleep(ROUND_PAUSE)
    finally:
        signal_all(roots, signal.SIGKILL)


def sweep(found: dict[int, tuple[int, int]], token: bytes) -> None:
    """Remove the cgroups under CGROUPS of ended commands (but ``token``'s): those with no
    process left in them and no supervisor of theirs alive (one being placed has its
    supervisor alive)."""
    alive = set(supervisor_tokens(found).values())
    for name in os.listdir(CGROUPS):
        other = os.fsencode(name[len(CGROUP_PREFIX) :])
        if not name.startswith(CGROUP_PREFIX) or other == token or other in alive:
            continue
        if not in_cgroup(other):
            try:  # noqa: SIM105 (contextlib would cost an import)
                os.rmdir(cgroup_of(other))
            except OSError:  # a process entered it meanwhile, or another sweep removed it
                pass


def place(token: bytes) -> int:
    """Move the supervisor with ``token`` into its command's cgroup (the module's docstring)."""
    if not os.path.isdir(CGROUPS):
        return NO_CGROUPS
    if len(token) != 32 or token.strip(TOKEN_DIGITS):  # exec_marks.new_mark's tokens
        return 2
    sweep(processes(), token)
    path = cgroup_of(token)
    deadline = time.monotonic() + PLACE_SECONDS
    while True:
        placed = 0
        # Every process with the supervisor's command line: one of the sandbox's own that
        # copied it is placed (and later killed) beside the real one, not instead of it.
        for pid in supervisors(processes(), token):
            try:
                os.makedirs(path, mode=0o755, exist_ok=True)
                with open(f"{path}/cgroup.procs", "wb") as f:
                    f.write(str(pid).encode())
                placed += 1
            except OSError:  # it ended, or another sweep removed the cgroup: look again
                continue
        if placed:
            return 0
        if time.monotonic() > deadline:
            return 1
        time.sleep(ROUND_PAUSE)


if __name__ == "__main__":
    if sys.argv[1] == "place":
        sys.exit(place(os.fsencode(sys.argv[2])))
    sys.exit(main(os.fsencode(sys.argv[1])))

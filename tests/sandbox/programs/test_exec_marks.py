"""The supervisor and the kill of exec_marks.py (a command's deadline), as programs: run here,
on the host's Linux (the same kernel calls a sandbox makes under runc), with the host's Python in
place of the image's. In sandboxes, on both runtimes: tests/security/test_kill_escapes.py."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from jupyter_sandbox.sandbox.programs import image_programs, kill_program, supervisor_program
from jupyter_sandbox.sandbox.programs.exec_marks import (
    EXEC_MARK,
    SUPERVISOR,
    kill_argv,
    mark_of,
    new_mark,
    place_argv,
    supervised,
)


def on_host(argv: list[str]) -> list[str]:
    """``argv`` with the image's Python replaced by this one."""
    assert argv[0] == image_programs.PYTHON
    return [sys.executable, *argv[1:]]


def command_lines() -> dict[int, str]:
    found = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                found[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (ValueError, OSError):
            continue
    return found


def sleeping(seconds: list[int]) -> list[str]:
    wanted = {f"sleep {n}" for n in seconds}
    return [line for line in command_lines().values() if line in wanted]


@pytest.fixture
def first() -> Iterator[int]:
    """The first of three sleep durations no other test on this host uses; any left killed."""
    first = random.randrange(700_000, 800_000)
    yield first
    for pid, line in command_lines().items():
        if line in {f"sleep {first + n}" for n in range(3)}:
            os.kill(pid, 9)


def test_the_supervisor_runs_the_command_with_its_status() -> None:
    mark = new_mark()
    argv = supervised(["sh", "-c", "echo out; echo err >&2; exit 7"], mark)
    assert argv[:5] == [image_programs.PYTHON, "-I", "-S", "-c", SUPERVISOR]
    assert argv[5] == mark[EXEC_MARK]
    ran = subprocess.run(on_host(argv), capture_output=True, timeout=30)
    assert (ran.returncode, ran.stdout, ran.stderr) == (7, b"out\n", b"err\n")

    killed = subprocess.run(on_host(supervised(["sh", "-c", "kill -9 $$"], mark)), timeout=30)
    assert killed.returncode == 128 + 9  # as the engine reports a process killed by a signal

    missing = subprocess.run(
        on_host(supervised(["no-such-program"], mark)), capture_output=True, timeout=30
    )
    assert missing.returncode == 126
    assert b"'no-such-program' could not be started in the sandbox" in missing.stderr


def test_the_kill_reaches_what_left_the_session_group_and_environment(first: int) -> None:
    mark = new_mark()
    ((name, token),) = mark.items()
    shell = (
        f"setsid env -i sleep {first} & "
        f"(setsid env -i sh -c 'sleep {first + 1} &'); "
        f"sleep {first + 2}"
    )
    command = subprocess.Popen(
        on_host(supervised(["sh", "-c", shell], mark)), env={**os.environ, name: token}
    )
    try:
        durations = [first, first + 1, first + 2]
        deadline = time.monotonic() + 30
        while len(sleeping(durations)) < 3:
            assert time.monotonic() < deadline, sleeping(durations)
            time.sleep(0.05)
        killed = subprocess.run(on_host(kill_argv(f"{name}={token}")), timeout=30)
        assert killed.returncode == 0
        assert command.wait(timeout=10) == -9  # the supervisor, last
        assert sleeping(durations) == []
    finally:
        command.kill()
        command.wait()


def test_the_kill_of_nothing_left_is_quick_and_clean() -> None:
    started = time.monotonic()
    killed = subprocess.run(on_host(kill_argv(f"{EXEC_MARK}=0123456789abcdef")), timeout=30)
    assert killed.returncode == 0
    assert time.monotonic() - started < 5


def test_a_supervised_argv_gives_its_mark_back_and_others_none() -> None:
    mark = new_mark()
    assert mark_of(supervised(["sh", "-c", "true"], mark)) == mark
    assert mark_of(kill_argv(f"{EXEC_MARK}={mark[EXEC_MARK]}")) is None
    assert mark_of(image_programs.shell("true")) is None
    ((_name, token),) = mark.items()
    assert place_argv(mark)[5:] == ["place", token]


# /proc/self/cgroup lines as a runsc sandbox shows them (cgroup v1 hierarchies of the sentry).
SENTRY_CGROUPS = (
    b"7:pids:/c0ffee\n6:memory:/c0ffee\n5:job:/c0ffee/jupyter-sandbox-TOKEN\n"
    b"4:devices:/c0ffee\n3:cpuset:/c0ffee\n2:cpuacct:/c0ffee\n1:cpu:/c0ffee\n"
)


def test_the_supervisor_knows_its_cgroup_by_the_job_hierarchy_and_its_token() -> None:
    assert supervisor_program.in_cgroup(SENTRY_CGROUPS, "TOKEN")
    assert not supervisor_program.in_cgroup(SENTRY_CGROUPS, "OKEN")  # a whole name only
    assert not supervisor_program.in_cgroup(SENTRY_CGROUPS.replace(b"job", b"pids"), "TOKEN")
    assert not supervisor_program.in_cgroup(SENTRY_CGROUPS.replace(b"TOKEN", b"OTHER"), "TOKEN")
    assert not supervisor_program.in_cgroup(b"0::/\n", "TOKEN")  # runc, cgroup v2


def test_the_kill_reads_no_cgroup_for_a_token_that_is_not_hex() -> None:
    # The token comes from the command line the kill was given: never a path of its choosing.
    assert kill_program.in_cgroup(b"../../../proc/self") == set()
    assert kill_program.in_cgroup(b"") == set()


def test_placing_where_there_is_no_job_hierarchy_says_so() -> None:
    """On this host's Linux, as under runc, there is no gVisor job hierarchy: placing answers
    NO_CGROUPS (the host logs it) and a supervisor starts its command without waiting."""
    assert not os.path.isdir(kill_program.CGROUPS)
    placed = subprocess.run(on_host(place_argv(new_mark())), timeout=30)
    assert placed.returncode == kill_program.NO_CGROUPS

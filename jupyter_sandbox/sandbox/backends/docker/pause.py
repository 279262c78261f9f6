"""Pausing a container: never while an exec starts in it, and again when runc gives up freezing.

Two things stand between a pause and a frozen container:

- An exec the engine is starting: a pause that lands on it wedges the container (exec_gate.py),
  so the pause holds new starts off and waits until every exec the engine has for the container
  has a process or has ended.
- runc's freeze itself (cgroup v1 freezer): runc writes FROZEN and checks, a bounded number of
  times, that every task stopped; a task in the middle of a fork or of joining the cgroup keeps
  it FREEZING, and runc then thaws the cgroup and answers "unable to freeze". Seen on a loaded
  machine (a workspace snapshot of a runc sandbox, in CI). The container is left running as
  before, so the pause is asked for again, a few times with a growing wait, before its error
  reaches the caller.
"""

from __future__ import annotations

import time
from typing import Any

import docker.errors

from jupyter_sandbox.sandbox.backends.docker.exec_gate import ExecGate, wait_for_exec_processes

# runc's answer when the freezer did not settle; the cgroup is thawed again when it says this.
NOT_FROZEN = "unable to freeze"
FREEZE_ATTEMPTS = 5  # pauses asked for at most
FIRST_RETRY_WAIT = 0.1  # seconds before the second attempt, doubled before each further one


def pause(api: Any, gate: ExecGate, container: str) -> None:
    """Blocking: pause ``container`` (docker-py's low-level ``api``) with ``gate`` held against
    new exec starts. docker-py's errors pass through, runc's "unable to freeze" once its
    attempts are spent."""
    wait = FIRST_RETRY_WAIT
    for attempt in range(1, FREEZE_ATTEMPTS + 1):
        try:
            with gate.halting(container):
                wait_for_exec_processes(api, container)
                api.pause(container)
            return
        except docker.errors.APIError as exc:
            if NOT_FROZEN not in str(exc) or attempt == FREEZE_ATTEMPTS:
                raise
        time.sleep(wait)  # outside the gate: execs may start meanwhile
        wait *= 2

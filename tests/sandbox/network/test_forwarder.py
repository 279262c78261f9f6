"""The forwarder's worker threads: reused back to back, concurrent when needed, ended when idle
(no engine: the forwarder's own code, run on the host)."""

from __future__ import annotations

import threading
import time

import pytest

from jupyter_sandbox.sandbox.network.forwarder import Workers

WAIT = 5.0  # seconds any one wait may take


def run(workers: Workers) -> threading.Thread:
    """Submit one task and return the thread that ran it, once it has."""
    ran: list[threading.Thread] = []
    done = threading.Event()

    def record() -> None:
        ran.append(threading.current_thread())
        done.set()

    workers.submit(record)
    assert done.wait(WAIT)
    return ran[0]


def wait_until_idle(workers: Workers, threads: int) -> None:
    """Until ``threads`` threads wait for work (a task's thread counts itself idle just after
    the task returns)."""
    deadline = time.monotonic() + WAIT
    while workers.idle != threads:
        assert time.monotonic() < deadline, f"{workers.idle} threads idle, not {threads}"
        time.sleep(0.001)


def test_back_to_back_tasks_reuse_one_thread() -> None:
    workers = Workers(idle_seconds=WAIT)
    first = run(workers)
    for _ in range(20):
        wait_until_idle(workers, 1)
        assert run(workers) is first


def test_tasks_that_wait_for_each_other_get_threads_of_their_own() -> None:
    workers = Workers(idle_seconds=WAIT)
    both = threading.Barrier(3, timeout=WAIT)  # two tasks (a client's two directions) and us
    for _ in range(2):
        workers.submit(both.wait)
    both.wait()  # raises BrokenBarrierError if the two never ran at the same time


def test_idle_threads_end_and_new_work_still_runs() -> None:
    workers = Workers(idle_seconds=0.05)
    thread = run(workers)
    thread.join(WAIT)
    assert not thread.is_alive()
    assert run(workers) is not thread


def test_a_failing_task_leaves_its_thread_serving(capsys: pytest.CaptureFixture[str]) -> None:
    workers = Workers(idle_seconds=WAIT)
    failed = threading.Event()
    ran: list[threading.Thread] = []

    def fail() -> None:
        ran.append(threading.current_thread())
        failed.set()
        raise RuntimeError("a bug")

    workers.submit(fail)
    assert failed.wait(WAIT)
    wait_until_idle(workers, 1)
    assert run(workers) is ran[0]
    assert "forwarder: a client failed: RuntimeError('a bug')" in capsys.readouterr().err

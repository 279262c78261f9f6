"""Context ids: the same owner and context id find the same live interpreter again."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.identity import default_owner
from jupyter_sandbox.sandbox.lifecycle.contexts import ContextLock, lock_path
from tests.kernel.kernels import is_input_of, run, running_kernel, value_of
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration


@pytest.fixture
def env(purpose: str) -> Iterator[Path]:
    with sandbox_kernel_env(purpose) as state_dir:
        yield state_dir


def test_a_named_context_outlives_its_kernel(env: Path, runtime: str) -> None:
    """c1: x = 42, shut the kernel down, start another kernel with c1: x is still 42."""
    kernel_env = {"JUPYTER_SANDBOX_CONTEXT": "c1", "JUPYTER_SANDBOX_RUNTIME": runtime}
    with running_kernel(notebook_dir(env), **kernel_env) as (_, kc):
        run(kc, "x = 42")
    assert len(containers_under(env)) == 1
    with running_kernel(notebook_dir(env), **kernel_env) as (_, kc):
        assert value_of(kc, "x") == "42"


def test_an_unnamed_kernel_removes_its_sandbox(env: Path) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME="runc") as (_, kc):
        assert value_of(kc, "1 + 1") == "2"
        assert len(containers_under(env)) == 1
    assert containers_under(env) == []


def test_a_busy_context_is_refused_naming_it(env: Path) -> None:
    with (
        running_kernel(
            notebook_dir(env), JUPYTER_SANDBOX_CONTEXT="c2", JUPYTER_SANDBOX_RUNTIME="runc"
        ),
        running_kernel(notebook_dir(env), JUPYTER_SANDBOX_CONTEXT="c2") as (_, second),
    ):
        banner = second.kernel_info(reply=True)["content"]["banner"]
        assert "context 'c2' is in use by another kernel" in banner
        out, reply = run(second, "1")
        assert reply["status"] == "error"
        assert "context 'c2' is in use" in out


@pytest.mark.resilience(
    scenario="fault: a proxy kernel with a named context killed with SIGKILL",
    expected="the context is free at once and reattachable; its interpreter's state is kept",
)
def test_a_killed_kernel_leaves_its_context_free(env: Path, observe: Callable[..., None]) -> None:
    kernel_env = {"JUPYTER_SANDBOX_CONTEXT": "c3", "JUPYTER_SANDBOX_RUNTIME": "runc"}
    with running_kernel(notebook_dir(env), **kernel_env) as (km, kc):
        run(kc, "x = 'survives'")
        assert km.provisioner is not None
        pid = km.provisioner.pid  # type: ignore[attr-defined]
        os.kill(pid, signal.SIGKILL)
        km.provisioner.process.wait()  # type: ignore[attr-defined]
    with running_kernel(notebook_dir(env), **kernel_env) as (_, kc):
        assert value_of(kc, "x") == "'survives'"
    observe("a new kernel attached to the context at once; x == 'survives'")


def test_a_context_whose_cell_still_runs_is_found_again_at_once(env: Path) -> None:
    """Its proxy killed mid-cell, a context is reattached without waiting for the cell (the
    manager asks the kernel on control), and the cell can be interrupted from the new kernel."""
    kernel_env = {"JUPYTER_SANDBOX_CONTEXT": "c5", "JUPYTER_SANDBOX_RUNTIME": "runc"}
    with running_kernel(notebook_dir(env), **kernel_env) as (km, kc):
        run(kc, "x = 'kept'")
        cell = kc.execute("import time; time.sleep(600)")
        while not is_input_of(kc.get_iopub_msg(timeout=30), cell):
            pass  # until the kernel has begun the cell
        assert km.provisioner is not None
        os.kill(km.provisioner.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        km.provisioner.process.wait()  # type: ignore[attr-defined]
    with running_kernel(notebook_dir(env), ready=False, **kernel_env) as (km, kc):
        km.interrupt_kernel()  # waits in the proxy's queue until the sandbox is attached
        kc.wait_for_ready(timeout=120)  # answered once the old cell is interrupted
        # An attach that asked shell waited out SandboxSettings.start_timeout here and failed:
        # the new kernel then answered every request with that error.
        assert value_of(kc, "x") == "'kept'"


def test_a_kernel_whose_context_lock_file_is_removed_takes_it_again(env: Path) -> None:
    """The lock file removed under a running kernel (the state directory cleaned): the kernel
    takes a new one, so it still shows as attached and no other kernel can take its context."""
    kernel_env = {"JUPYTER_SANDBOX_CONTEXT": "c6", "JUPYTER_SANDBOX_RUNTIME": "runc"}
    with running_kernel(notebook_dir(env), **kernel_env) as (_, kc):
        path = lock_path(env, default_owner(), "c6")
        assert ContextLock.is_held(path)
        path.unlink()
        deadline = time.monotonic() + 10
        while not ContextLock.is_held(path):
            assert time.monotonic() < deadline, "the kernel did not take its context again"
            time.sleep(0.1)
        assert value_of(kc, "1 + 1") == "2"


def test_a_kernel_whose_context_was_taken_meanwhile_stops(env: Path) -> None:
    """Another process holds the context's lock file now (the first one's file was replaced):
    the kernel fails its running cell naming the context and exits rather than share it; the
    sandbox stays, for the kernel that holds the context."""
    kernel_env = {"JUPYTER_SANDBOX_CONTEXT": "c7", "JUPYTER_SANDBOX_RUNTIME": "runc"}
    with running_kernel(notebook_dir(env), **kernel_env) as (km, kc):
        path = lock_path(env, default_owner(), "c7")
        cell = kc.execute("import time; time.sleep(60)")
        # Lock a new file, then put it in place of the kernel's: no moment without a holder.
        other = ProcessLock(path.with_name("other.lock"))
        assert other.try_acquire(note="4242")
        try:
            path.with_name("other.lock").rename(path)
            reply = kc.get_shell_msg(timeout=15)
            while reply["parent_header"]["msg_id"] != cell:  # a readiness check's late reply
                reply = kc.get_shell_msg(timeout=15)
            assert reply["content"]["ename"] == "ContextBusy"
            assert (
                "context 'c7' is in use by another kernel (pid 4242)"
                in (reply["content"]["evalue"])
            )
            deadline = time.monotonic() + 10
            while km.is_alive():
                assert time.monotonic() < deadline, "the kernel did not stop"
                time.sleep(0.1)
            assert len(containers_under(env)) == 1
        finally:
            other.release()


def test_owners_never_share_a_context(env: Path) -> None:
    with running_kernel(
        notebook_dir(env),
        JUPYTER_SANDBOX_CONTEXT="c4",
        JUPYTER_SANDBOX_OWNER="alice",
        JUPYTER_SANDBOX_RUNTIME="runc",
    ) as (_, alice):
        run(alice, "secret = 'alice'")
        with running_kernel(
            notebook_dir(env),
            JUPYTER_SANDBOX_CONTEXT="c4",
            JUPYTER_SANDBOX_OWNER="bob",
            JUPYTER_SANDBOX_RUNTIME="runc",
        ) as (_, bob):
            assert value_of(bob, "'secret' in globals()") == "False"
    assert len(containers_under(env)) == 2


@pytest.mark.parametrize("value", ["kata", "runsc --platform=kvm", "RUNC"])
def test_an_unknown_runtime_is_refused_with_a_message(env: Path, value: str) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME=value) as (_, kc):
        out, reply = run(kc, "1")
    assert reply["status"] == "error"
    assert "JUPYTER_SANDBOX_RUNTIME must be 'runsc' (gVisor) or 'runc'" in out
    assert containers_under(env) == []


def test_a_bad_context_id_is_refused(env: Path) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_CONTEXT="../etc") as (_, kc):
        out, reply = run(kc, "1")
    assert reply["status"] == "error"
    assert "context id '../etc' is invalid" in out


def test_the_state_file_records_who_is_attached(env: Path) -> None:
    session = {"JPY_SESSION_NAME": "analysis.ipynb", "JUPYTER_SANDBOX_RUNTIME": "runc"}
    with running_kernel(notebook_dir(env), **session) as (km, kc):
        run(kc, "1")
        (container,) = containers_under(env)
        state = json.loads(
            (env / container.labels["io.jupyter-sandbox.sandbox"] / "state.json").read_text()
        )
        assert state["notebook"] == "analysis.ipynb"
        assert state["kernel_pid"] == km.provisioner.pid  # type: ignore[union-attr]
        assert state["last_activity"] >= state["created"]
        assert state["ephemeral"] is True


@pytest.mark.checklist(
    row=36,
    attack="reattaching to a named context with another network policy than its sandbox has",
    expected="refused with a message saying how to change or replace it; the sandbox keeps "
    "its policy",
)
def test_a_context_is_not_reused_with_another_network(
    env: Path, observe: Callable[..., None]
) -> None:
    kernel_env = {"JUPYTER_SANDBOX_CONTEXT": "c9", "JUPYTER_SANDBOX_RUNTIME": "runc"}
    with running_kernel(notebook_dir(env), **kernel_env) as (_, kc):
        run(kc, "x = 1")
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_NETWORK="open", **kernel_env) as (_, kc):
        out, reply = run(kc, "1")
    assert reply["status"] == "error"
    assert "context 'c9' has network policy none, not open" in out
    with running_kernel(notebook_dir(env), **kernel_env) as (_, kc):
        assert value_of(kc, "x") == "1"  # the same sandbox, still without network
    observe("refused: " + out.strip().splitlines()[-1][:160])


def test_a_context_keeps_its_limits(env: Path) -> None:
    """JUPYTER_SANDBOX_LIMITS makes the sandbox; asking a context for other limits is refused,
    while asking for the ones it has (or none) reattaches."""

    def kernel(**limits: str) -> AbstractContextManager[tuple[KernelManager, BlockingKernelClient]]:
        return running_kernel(
            notebook_dir(env),
            JUPYTER_SANDBOX_CONTEXT="c10",
            JUPYTER_SANDBOX_RUNTIME="runc",
            **limits,
        )

    with kernel(JUPYTER_SANDBOX_LIMITS="memory=512m,pids=128") as (_, kc):
        run(kc, "x = 1")
        assert (
            "memory 512m (no swap), 1 CPU, 128 pids"
            in kc.kernel_info(reply=True)["content"]["banner"]
        )
    with kernel(JUPYTER_SANDBOX_LIMITS="memory=1g") as (_, kc):
        out, reply = run(kc, "x")
    assert reply["status"] == "error"
    assert "context 'c10' has limits memory 512m (no swap)" in out
    assert "not memory 1g (no swap)" in out
    with kernel(JUPYTER_SANDBOX_LIMITS="pids=128") as (_, kc):
        assert value_of(kc, "x") == "1"
    with kernel() as (_, kc):
        assert value_of(kc, "x") == "1"

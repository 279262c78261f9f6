"""Engine errors say what to do."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from jupyter_sandbox.protocol.errors import EngineTimeoutError, EngineUnavailableError
from jupyter_sandbox.sandbox.backends.docker.backend import DockerBackend
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.host.fair_share import current_owner


async def test_no_engine_fails_fast_naming_the_fix(tmp_path: object) -> None:
    engine = DockerEngine(timeout=5, base_url="unix:///nonexistent/docker.sock")
    backend = DockerBackend(engine)
    started = time.monotonic()
    with pytest.raises(EngineUnavailableError, match=r"engine-bootstrap\.sh"):
        await backend.check_ready("runc", "img")
    assert time.monotonic() - started < 5
    await backend.close()


def test_no_engine_explains_that_nothing_runs_outside_a_sandbox() -> None:
    """A host without an engine (Binder) gets a refusal that says why, not a silent fallback."""
    engine = DockerEngine(timeout=5, base_url="unix:///nonexistent/docker.sock")
    with pytest.raises(EngineUnavailableError) as caught:
        _ = engine.client
    message = caught.value.message
    assert message.startswith("no Docker engine answers")
    assert "never on this host" in message
    assert "Binder" in message
    engine.close()


async def test_one_owners_long_calls_never_hold_up_anothers_short_ones() -> None:
    """Seventeen streamed commands by one user made another's list wait 27.6 s on a shared
    pool of 16 threads: long calls now have threads of their own, and each lane is shared
    fairly, so the other owner's calls run at once (blocking calls on the engine's real
    executors; no engine is needed to hold a thread)."""
    engine = DockerEngine(
        timeout=5, max_workers=4, max_workers_per_owner=2, max_long=8, max_long_per_owner=3
    )
    release = threading.Event()

    async def as_owner(owner: str, long: bool) -> bool:
        current_owner.set(owner)
        return await engine.run("hold a thread", release.wait, 10, long=long, timeout=10)

    try:
        # alice takes her share of long threads, and more waits; then of short ones.
        held = [asyncio.ensure_future(as_owner("alice", True)) for _ in range(5)]
        held += [asyncio.ensure_future(as_owner("alice", False)) for _ in range(6)]
        await asyncio.sleep(0.2)
        assert engine.long_share.held == {"alice": 3}
        current_owner.set("bob")
        started = time.monotonic()
        assert await engine.run("a short call", lambda: "listed") == "listed"
        assert await engine.run("a long call", lambda: "ran", long=True) == "ran"
        assert time.monotonic() - started < 1
    finally:
        release.set()
        await asyncio.gather(*held)
        engine.close()
    assert engine.long_share.in_use == 0


async def test_a_calls_time_limit_counts_from_its_start_not_its_wait_for_a_thread() -> None:
    """An owner's many kills at once (forty commands left by their client) queue on the
    owner's share; each must still get its whole limit once it runs, or it fails as if the
    engine were stuck and the command outlives its kill."""
    engine = DockerEngine(timeout=5, max_workers=4, max_workers_per_owner=1)
    try:
        current_owner.set("alice")
        calls = [engine.run("a kill", time.sleep, 0.3, timeout=0.6) for _ in range(4)]
        started = time.monotonic()
        await asyncio.gather(*calls)  # one at a time: the last waited 0.9 s, then ran 0.3 s
        assert time.monotonic() - started >= 1.2
        with pytest.raises(EngineTimeoutError, match=r"did not finish 'stuck' within 0\.1s"):
            await engine.run("stuck", time.sleep, 0.5, timeout=0.1)
    finally:
        engine.close()


async def test_a_connection_that_times_out_is_not_told_as_the_calls_limit() -> None:
    """A socket's own timeout (a client's HTTP timeout) ends a call long before its limit;
    the error says which ended it (CI once read "within 610s" of a call that took 30 s)."""
    engine = DockerEngine(timeout=5)
    ours, theirs = socket.socketpair()
    try:
        ours.settimeout(0.05)
        with pytest.raises(EngineTimeoutError, match="stopped answering during 'a silent read'"):
            await engine.run("a silent read", ours.recv, 1, timeout=600)
    finally:
        ours.close()
        theirs.close()
        engine.close()

"""Engine errors say what to do."""

from __future__ import annotations

import time

import pytest

from jupyter_sandbox.sandbox.docker_backend import DockerBackend
from jupyter_sandbox.sandbox.engine import DockerEngine
from jupyter_sandbox.sandbox.errors import EngineUnavailableError


async def test_no_engine_fails_fast_naming_the_fix(tmp_path: object) -> None:
    engine = DockerEngine(timeout=5, base_url="unix:///nonexistent/docker.sock")
    backend = DockerBackend(engine, {"runsc": "runsc", "runc": "runc"})
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

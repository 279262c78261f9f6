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

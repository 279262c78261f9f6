"""The removal's answers to an engine that can only say "not yet" (removal.py).

A container whose first process exits as it is removed is refused with a 500 until its shim has
reaped that process ("is zombie and can not be killed"): seen once in a full run, and not to be
called up on demand, so the engine's one removal call is replaced here by a recorder of tries
that answers as the engine did. Everything else is a real engine client.
"""

from __future__ import annotations

from typing import Any

import docker.errors
import pytest
import requests

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.backends.docker import removal
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine

pytestmark = pytest.mark.integration

ZOMBIE = (
    "Could not kill running container 1234, cannot remove - container 1234 PID 1158 is zombie "
    "and can not be killed. Use the --init option when creating containers to run an init "
    "inside the container that forwards signals and reaps processes"
)


def engine_answering(
    monkeypatch: pytest.MonkeyPatch, answers: list[str | None]
) -> tuple[list[str], DockerEngine]:
    """A real engine whose removals answer ``answers`` in turn (None: removed), and its tries."""
    monkeypatch.setattr(removal, "RETRY_SECONDS", 0.0)
    engine = DockerEngine(timeout=5)
    api = engine.client.api
    tries: list[str] = []

    def remove_container(name: str, **_: Any) -> None:
        tries.append(name)
        answer = answers.pop(0) if answers else None
        if answer is not None:
            response = requests.Response()
            response.status_code = 500
            raise docker.errors.APIError("500 Server Error", response, explanation=answer)

    monkeypatch.setattr(api, "remove_container", remove_container)
    monkeypatch.setattr(api, "containers", lambda **_: [])  # no such container to thaw
    return tries, engine


async def test_a_container_not_yet_reaped_is_asked_for_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tries, engine = engine_answering(monkeypatch, [ZOMBIE, ZOMBIE, None])
    await removal.remove_container(engine, "0123456789ab")
    assert len(tries) == 3
    engine.close()


async def test_other_refusals_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    tries, engine = engine_answering(monkeypatch, ["no", "permission denied"])
    with pytest.raises(SandboxError, match="permission denied"):
        await removal.remove_container(engine, "0123456789ab")
    assert len(tries) == 2
    engine.close()

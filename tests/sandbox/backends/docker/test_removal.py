"""The removal's answers to an engine that can only say "not yet" (removal.py).

A container whose first process exits as it is removed is refused with a 500 until its shim has
reaped that process ("is zombie and can not be killed"); a runsc sandbox full of commands and
streams, removed under a flood, stayed "removing" for minutes while every further removal was
refused with a 409 "already in progress". Both were seen once in a full run and cannot be called
up on demand, so the engine's removal call and its list are replaced here by recorders that
answer as the engine did. So is the unpause of a wedged container, which hangs until its cgroup is
thawed: test_exec_gate.py wedges one for real; here what is checked is the order of the calls
(no removal is asked for before the thaw). Everything else is a real engine client.
"""

from __future__ import annotations

import threading
from typing import Any

import docker.errors
import pytest
import requests

from jupyter_sandbox.protocol.errors import EngineTimeoutError, SandboxError
from jupyter_sandbox.sandbox.backends.docker import removal
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine

pytestmark = pytest.mark.integration

ZOMBIE = (
    "Could not kill running container 1234, cannot remove - container 1234 PID 1158 is zombie "
    "and can not be killed. Use the --init option when creating containers to run an init "
    "inside the container that forwards signals and reaps processes"
)


IN_PROGRESS = "removal of container jupyter-sandbox-0123456789ab is already in progress"


def engine_answering(
    monkeypatch: pytest.MonkeyPatch,
    answers: list[str | None],
    states: list[str] | None = None,
) -> tuple[list[str], DockerEngine]:
    """A real engine whose removals answer ``answers`` in turn (None: removed; "in progress" is
    the engine's 409, anything else its 500) and whose list shows the container in ``states``
    in turn (none left: not listed); and what was asked of it, in order ("remove", "list")."""
    monkeypatch.setattr(removal, "RETRY_SECONDS", 0.0)
    engine = DockerEngine(timeout=5)
    api = engine.client.api
    asked: list[str] = []
    listed = list(states or [])

    def remove_container(name: str, **_: Any) -> None:
        asked.append("remove")
        answer = answers.pop(0) if answers else None
        if answer is not None:
            response = requests.Response()
            response.status_code = 409 if "in progress" in answer else 500
            raise docker.errors.APIError("Server Error", response, explanation=answer)

    def containers(**_: Any) -> list[dict[str, Any]]:
        asked.append("list")
        if not listed:
            return []
        row = {"Id": "f" * 64, "Names": ["/jupyter-sandbox-0123456789ab"]}
        return [{**row, "State": listed.pop(0)}]

    monkeypatch.setattr(api, "remove_container", remove_container)
    monkeypatch.setattr(api, "containers", containers)
    return asked, engine


async def test_a_container_not_yet_reaped_is_asked_for_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked, engine = engine_answering(monkeypatch, [ZOMBIE, ZOMBIE, None])
    await removal.remove_container(engine, "0123456789ab")
    assert asked.count("remove") == 3
    engine.close()


async def test_other_refusals_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    asked, engine = engine_answering(monkeypatch, ["no", "permission denied"])
    with pytest.raises(SandboxError, match="permission denied"):
        await removal.remove_container(engine, "0123456789ab")
    assert asked.count("remove") == 2
    engine.close()


async def test_a_removal_the_engine_is_carrying_out_is_waited_for_not_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first removal fails; the next is refused as already in progress; the list shows the
    # container being removed twice more, then no more; the removal asked then is answered.
    asked, engine = engine_answering(
        monkeypatch,
        ["timed out", IN_PROGRESS, None],
        ["running", "running", "removing", "removing"],
    )
    await removal.remove_container(engine, "0123456789ab")
    # _thaw's look, the removal, _end_runtime's look, the removal refused, then looks until the
    # container has left the list, and only then the removal again.
    assert asked == ["list", "remove", "list", "remove", "list", "list", "list", "remove"]
    engine.close()


async def test_a_removal_still_in_progress_past_its_limit_is_an_engine_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(removal, "ENGINE_REMOVING_LIMITS", 0)
    asked, engine = engine_answering(
        monkeypatch, ["timed out", IN_PROGRESS, IN_PROGRESS], ["running", "running"]
    )
    with pytest.raises(EngineTimeoutError, match="still removing sandbox 0123456789ab"):
        await removal.remove_container(engine, "0123456789ab")
    assert asked.count("remove") == 2
    engine.close()


async def test_a_paused_container_whose_unpause_hangs_is_thawed_by_hand_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Wedged by another client's pause (exec_gate.py): the engine answers no unpause and no
    # removal until the cgroup is thawed. No removal is asked for before that thaw.
    asked, engine = engine_answering(monkeypatch, [None], ["paused", "paused"])
    thawed = threading.Event()

    def unpause(name: str) -> None:
        asked.append("unpause")
        thawed.wait(30)  # as the engine does: it answers once the cgroup is thawed

    monkeypatch.setattr(engine.client.api, "unpause", unpause)
    try:
        await removal.remove_container(engine, "0123456789ab")
    finally:
        thawed.set()
    # _thaw's look and its unpause (past its limit), _end_runtime's look, then the removal.
    assert asked == ["list", "unpause", "list", "remove"]
    engine.close()

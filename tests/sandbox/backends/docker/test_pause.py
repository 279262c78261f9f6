"""A pause that runc's freezer gives up on is asked for again (pause.py).

runc's "unable to freeze" was seen once in a full run on a loaded machine and cannot be called
up on demand, so the engine's pause call is a recorder here that answers as runc did; the
pause of a real container is in test_exec_gate.py and the manager's tests.
"""

from __future__ import annotations

from typing import Any

import docker.errors
import pytest
import requests

from jupyter_sandbox.sandbox.backends.docker import pause as pause_module
from jupyter_sandbox.sandbox.backends.docker.exec_gate import ExecGate

UNABLE_TO_FREEZE = (
    "Cannot pause container 0123: OCI runtime pause failed: unable to freeze: unknown"
)


class PauseRecorder:
    """The two calls a pause makes of the engine: the container's execs (none) and the pause,
    which answers ``answers`` in turn (None: paused; a text: the engine's 500 with it)."""

    def __init__(self, answers: list[str | None]) -> None:
        self.answers = answers
        self.pauses = 0

    def inspect_container(self, container: str) -> dict[str, Any]:
        return {"ExecIDs": None}

    def pause(self, container: str) -> None:
        self.pauses += 1
        answer = self.answers.pop(0)
        if answer is not None:
            response = requests.Response()
            response.status_code = 500
            raise docker.errors.APIError("Server Error", response, explanation=answer)


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pause_module, "FIRST_RETRY_WAIT", 0.0)


def test_a_freeze_runc_gave_up_on_is_asked_for_again() -> None:
    api = PauseRecorder([UNABLE_TO_FREEZE, UNABLE_TO_FREEZE, None])
    pause_module.pause(api, ExecGate(), "c")
    assert api.pauses == 3


def test_a_freeze_that_never_settles_reaches_the_caller() -> None:
    api = PauseRecorder([UNABLE_TO_FREEZE] * pause_module.FREEZE_ATTEMPTS)
    with pytest.raises(docker.errors.APIError, match="unable to freeze"):
        pause_module.pause(api, ExecGate(), "c")
    assert api.pauses == pause_module.FREEZE_ATTEMPTS


def test_any_other_refusal_is_not_asked_again() -> None:
    api = PauseRecorder(["Container 0123 is not running"])
    with pytest.raises(docker.errors.APIError, match="is not running"):
        pause_module.pause(api, ExecGate(), "c")
    assert api.pauses == 1


def test_an_exec_start_waits_for_each_pause_attempt_and_not_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = ExecGate()
    held_off: list[bool] = []

    def try_a_start() -> bool:
        """Whether an exec start in "c" now would have to wait for a pause (the gate's
        warning when its wait runs out)."""
        caplog.clear()
        with gate.starting("c", wait=0.01):
            pass
        return "pause or removal of it is on its way" in caplog.text

    class Starting(PauseRecorder):
        def pause(self, container: str) -> None:
            held_off.append(try_a_start())
            super().pause(container)

        def inspect_container(self, container: str) -> dict[str, Any]:
            held_off.append(try_a_start())  # the wait for execs is inside the gate too
            return super().inspect_container(container)

    pause_module.pause(Starting([UNABLE_TO_FREEZE, None]), gate, "c")
    assert held_off == [True, True, True, True]
    assert not try_a_start()  # let go once paused

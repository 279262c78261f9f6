"""The restore's retry policy for the engine's content-store race (moby/moby#42900).

The race itself cannot be called up on demand, so these replace the one engine call with a
recorder of tries; the restores that really run the engine are in
tests/sandbox/snapshots/test_memory_roundtrip.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_sandbox.protocol.errors import SandboxConflictError, SandboxError
from jupyter_sandbox.sandbox.backends.docker import checkpoints as docker_checkpoints

RACE = (
    "the container engine refused 'restore sandbox x': failed to upload checkpoint to "
    "containerd: commit failed: content sha256:57166b32: already exists"
)


def tries_failing_with(monkeypatch: pytest.MonkeyPatch, failures: list[SandboxError]) -> list[str]:
    monkeypatch.setattr(docker_checkpoints, "RESTORE_RETRY_DELAYS", (0.0, 0.0))
    tries: list[str] = []

    async def call(engine: Any, sandbox_id: str, what: str, *args: Any, **kwargs: Any) -> None:
        tries.append(what)
        if failures:
            raise failures.pop(0)

    monkeypatch.setattr(docker_checkpoints, "_call", call)
    return tries


async def test_the_content_store_race_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    tries = tries_failing_with(monkeypatch, [SandboxError(RACE), SandboxError(RACE)])
    await docker_checkpoints.start_from_checkpoint(None, "x", "snap")  # type: ignore[arg-type]
    assert tries == ["restore"] * 3


async def test_a_race_that_lasts_is_reported_after_three_tries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tries = tries_failing_with(monkeypatch, [SandboxError(RACE) for _ in range(5)])
    with pytest.raises(SandboxError, match="already exists"):
        await docker_checkpoints.start_from_checkpoint(None, "x", "snap")  # type: ignore[arg-type]
    assert len(tries) == 3


async def test_other_refusals_are_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    refusal = SandboxConflictError("the container engine refused 'restore sandbox x': running")
    tries = tries_failing_with(monkeypatch, [refusal])
    with pytest.raises(SandboxConflictError, match="running"):
        await docker_checkpoints.start_from_checkpoint(None, "x", "snap")  # type: ignore[arg-type]
    assert len(tries) == 1

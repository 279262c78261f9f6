"""SandboxClient against a real server over real HTTP: sandboxes made, found by metadata,
fetched and removed (by the context manager too), and the server's errors raised as the
core's classes with its messages, for two users and one the authorizer refuses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from jupyter_sandbox.client import (
    InvalidRequestError,
    Sandbox,
    SandboxClient,
    SandboxError,
    SandboxNotFoundError,
)
from jupyter_sandbox.protocol import errors as core_errors
from tests.server_extension.test_auth_and_spec import with_named_users

pytestmark = [pytest.mark.integration, pytest.mark.runc]


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return with_named_users(jp_server_config)  # tokens name their users: alice, bob, mallory


async def test_sandboxes_made_found_by_metadata_and_removed(
    connect: Callable[[str], SandboxClient],
) -> None:
    alice = connect("alice")

    def scenario() -> None:
        with alice.create(runtime="runc", timeout=600, metadata={"task": "t-1"}) as first:
            assert isinstance(first, Sandbox)
            assert first.status == "running"
            assert (first.info["runtime"], first.metadata) == ("runc", {"task": "t-1"})
            assert first.info["expires"] is not None  # its own timeout
            second = alice.create(runtime="runc", metadata={"task": "t-2", "agent": "a"})
            try:
                assert {s.id for s in alice.list()} == {first.id, second.id}
                assert [s.id for s in alice.list(metadata={"task": "t-2"})] == [second.id]
                both = {"task": "t-2", "agent": "a"}  # every entry must match
                assert [s.id for s in alice.list(metadata=both)] == [second.id]
                assert alice.list(metadata={"task": "t-2", "agent": "b"}) == []
                fetched = alice.get(second.id)
                assert (fetched.id, fetched.metadata) == (second.id, both)
            finally:
                second.remove()
            with pytest.raises(SandboxNotFoundError):
                alice.get(second.id)
        # The block's end removed the first; removing again is the server's 404.
        assert alice.list() == []
        with pytest.raises(SandboxNotFoundError):
            first.remove()

        # A block that raises still removes its sandbox, and its exception is the one seen.
        def fail_inside() -> None:
            with alice.create(runtime="runc") as third:
                assert [s.id for s in alice.list()] == [third.id]
                raise LookupError("the agent's own error")

        with pytest.raises(LookupError, match="the agent's own error"):
            fail_inside()
        assert alice.list() == []
        # One removed inside the block: its end does not mind.
        with alice.create(runtime="runc") as fourth:
            fourth.remove()
        assert alice.list() == []

    await asyncio.to_thread(scenario)


async def test_errors_are_the_cores_classes_with_the_servers_messages(
    connect: Callable[[str], SandboxClient],
) -> None:
    alice, bob, mallory = connect("alice"), connect("bob"), connect("mallory")

    def scenario() -> None:
        with pytest.raises(SandboxNotFoundError) as unknown:
            alice.get("0123456789ab")
        assert unknown.value.code == "sandbox_not_found"
        assert unknown.value.http_status == 404
        assert "0123456789ab" in unknown.value.message
        # The class the server raised, not a copy: this process imported the core first.
        assert isinstance(unknown.value, core_errors.SandboxNotFoundError)

        with pytest.raises(InvalidRequestError) as bad:
            alice.create(runtime="qemu")
        assert bad.value.message == "runtime must be one of runsc, runc, not 'qemu'"
        with pytest.raises(InvalidRequestError, match="must be KEY=VALUE"):
            alice.list(metadata={"no spaces allowed": "x"})

        with alice.create(runtime="runc") as sandbox:
            # Another user's sandbox is not found, never forbidden: nothing about it leaks.
            with pytest.raises(SandboxNotFoundError):
                bob.get(sandbox.id)
            assert bob.list() == []
            # A user the authorizer refuses gets Jupyter's 403, which has no code: the
            # message names the request and says what to check.
            with pytest.raises(SandboxError, match="was refused \\(403") as refused:
                mallory.list()
            assert type(refused.value) is SandboxError
            assert f"GET {alice.url}api/sandboxes" in refused.value.message
            assert "check the token" in refused.value.message
            assert sandbox.run_code("1 + 1").text == "2"
        assert alice.list() == []

    await asyncio.to_thread(scenario)

"""SandboxClient's credentials against a real server: set, list without values, replace,
remove; each user's own (alice's are not bob's)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from jupyter_sandbox.client import CredentialNotFoundError, InvalidRequestError, SandboxClient
from tests.server_extension.test_auth_and_spec import with_named_users

SECRET = "client-secret-0f3e7b19"


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return with_named_users(jp_server_config)  # tokens name their users: alice, bob, mallory


async def test_set_list_remove_per_user_never_a_value(
    connect: Callable[[str], SandboxClient],
) -> None:
    alice, bob = connect("alice"), connect("bob")

    def scenario() -> None:
        made = alice.set_credential(
            "gh", ["api.example.com"], headers={"Authorization": f"Bearer {SECRET}"}
        )
        assert made == {"name": "gh", "hosts": ["api.example.com"], "headers": ["Authorization"]}
        alice.set_credential("idx", ["pkg.example.com:8080"], basic=("u", SECRET))
        replaced = alice.set_credential("gh", ["*.example.com"], headers={"X-Key": SECRET})
        assert replaced["headers"] == ["X-Key"]
        listed = alice.credentials()
        assert [item["name"] for item in listed] == ["gh", "idx"]
        assert SECRET not in repr(listed)
        assert bob.credentials() == []
        with pytest.raises(CredentialNotFoundError):
            bob.remove_credential("gh")  # alice's is not bob's to remove
        alice.remove_credential("gh")
        assert [item["name"] for item in alice.credentials()] == ["idx"]
        with pytest.raises(InvalidRequestError, match="exactly one"):
            alice.set_credential("x", ["a.example.com"])
        with pytest.raises(InvalidRequestError) as caught:
            alice.set_credential("x", ["a.example.com"], headers={"Host": SECRET})
        assert SECRET not in str(caught.value)

    await asyncio.to_thread(scenario)

"""A real Jupyter Server with the extension, listening on a port, and SandboxClients talking to
it over real HTTP.

The server is tests/server_extension's (pytest-jupyter's, runc by default, its culler idle),
its fixtures imported by name rather than shared through a parent conftest so that only the
tests that need a server start one (as tests/examples/test_rest_agent.py does). The server
runs on the test's event loop and the client blocks, so a test runs its client calls in a
thread: ``await asyncio.to_thread(scenario)``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jupyter_sandbox.client import SandboxClient
from tests.server_extension.conftest import *  # noqa: F403  (fixtures, used by name)


@pytest.fixture
def connect(server_url: str) -> Callable[[str], SandboxClient]:
    """A client of the server with this token (tests with named users: the user's name)."""
    return lambda token: SandboxClient(server_url, token=token, timeout=120)


@pytest.fixture
def client(
    connect: Callable[[str], SandboxClient], jp_auth_header: dict[str, str]
) -> SandboxClient:
    """A client with the server's own token (pytest-jupyter's)."""
    return connect(jp_auth_header["Authorization"].removeprefix("token "))

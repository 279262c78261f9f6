"""A real Jupyter server with the extension (tests/server_extension's, on both runtimes, its
tokens naming their users: ``e2b_alice`` is alice's key), and the real E2B SDK from PyPI,
unmodified, pointed at it by nothing but E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.

The server runs on the test's event loop and the synchronous SDK blocks: a test runs its SDK
calls in a thread (``await asyncio.to_thread(scenario)``); AsyncSandbox runs on the loop.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.server_extension.conftest import *  # noqa: F403  (fixtures, used by name)
from tests.server_extension.test_auth_and_spec import with_named_users


def e2b_server_config(config: dict[str, Any], runtime: str) -> dict[str, Any]:
    """The server's configuration with named users, on ``runtime``: each test module's
    jp_server_config (a fixture cannot override one of its own conftest's)."""
    config = with_named_users(config)
    config["SandboxSettings"] = {**config["SandboxSettings"], "runtime": runtime}
    return config


@pytest.fixture
def e2b_env(server_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """E2B's three variables, for alice; the API URL."""
    api_url = f"{server_url}api/e2b"
    monkeypatch.setenv("E2B_API_URL", api_url)
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{api_url}/sandbox")
    monkeypatch.setenv("E2B_API_KEY", "e2b_alice")
    for name in ("E2B_DOMAIN", "E2B_DEBUG", "E2B_ACCESS_TOKEN", "E2B_HTTP_VERSION"):
        monkeypatch.delenv(name, raising=False)
    return api_url

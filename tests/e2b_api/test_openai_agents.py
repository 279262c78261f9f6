"""The OpenAI Agents SDK's own E2B client (``openai-agents[e2b]`` 0.24 from PyPI, unmodified,
in .venv-agents: ``make agents-env``) against a real server with the extension, on both
runtimes, configured by nothing but E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY: the "Done
when" list of issue 34 for the SDK, run by tests/e2b_api/agents_scenario.py as a subprocess.

The e2b package that SDK pins refuses a key that is not ``e2b_`` and hex digits, so this server's
tokens are hex (as ``jupyter server --IdentityProvider.token=$(openssl rand -hex 24)`` makes
one; docs/how-to/openai-agents.md)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web

from jupyter_sandbox.server_extension import SandboxExtension
from tests.e2b_api.conftest import e2b_server_config

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
AGENTS_PYTHON = ROOT / ".venv-agents" / "bin" / "python"
SCENARIO = Path(__file__).with_name("agents_scenario.py")
HEX_TOKENS = {"a11ce0" + "0" * 34: "alice", "b0b000" + "0" * 34: "bob"}
SCENARIO_SECONDS = 240  # the SDK's whole flow, bounded: a hang fails rather than blocks


class HexTokens(IdentityProvider):
    """Hex tokens that name their user, as the SDK's e2b accepts keys. For tests only."""

    def get_user(self, handler: web.RequestHandler) -> User | None:
        token = handler.request.headers.get("Authorization", "").removeprefix("token ").strip()
        name = HEX_TOKENS.get(token)
        return User(name) if name else None

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        return True


def key_of(user: str) -> str:
    return "e2b_" + next(token for token, name in HEX_TOKENS.items() if name == user)


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], runtime: str) -> dict[str, Any]:
    config = e2b_server_config(jp_server_config, runtime)
    config["ServerApp"] = {**config["ServerApp"], "identity_provider_class": HexTokens}
    return config


async def run_scenario(server_url: str, user: str = "alice") -> dict[str, Any]:
    """Run the scenario in .venv-agents against ``server_url`` as ``user``; what it saw."""
    assert AGENTS_PYTHON.exists(), "no .venv-agents: make agents-env installs the SDK"
    api_url = f"{server_url}api/e2b"
    env = {name: value for name, value in os.environ.items() if not name.startswith("E2B_")}
    env.update(E2B_API_URL=api_url, E2B_SANDBOX_URL=f"{api_url}/sandbox", E2B_API_KEY=key_of(user))
    for name in ("OPENAI_API_KEY", "VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(name, None)
    process = await asyncio.create_subprocess_exec(
        str(AGENTS_PYTHON),
        str(SCENARIO),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=SCENARIO.parent,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), SCENARIO_SECONDS)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode == 0, err.decode(errors="replace")[-8000:]
    seen: dict[str, Any] = json.loads(out.decode().splitlines()[-1])
    sys.stderr.write(err.decode(errors="replace")[-2000:])
    return seen


async def test_the_agents_sdk_e2b_client_runs_unchanged(
    server_url: str, extension: SandboxExtension
) -> None:
    seen = await run_scenario(server_url)

    exit_code, stdout = seen["exec"]
    assert exit_code == 0
    assert stdout.startswith("hello from /workspace as ")
    assert stdout.strip().rsplit(" ", 1)[1] != "0"  # the sandbox's user, never root
    assert seen["exec_failed"] == [3, "nope\n"]

    assert seen["read"] == "first version"
    assert seen["seen_by_a_command"] == "first version"
    assert seen["archive_bytes"] > 0
    assert seen["changed"] == "changed since"
    assert seen["hydrated"] == "first version"  # hydrate_workspace restored the changed file

    assert seen["pty_live"]
    assert "got:over the pty" in seen["pty_output"]

    assert seen["resumed_sandbox_id"] == seen["sandbox_id"]  # reattached, not made anew
    assert seen["resumed_marker"] == "kept\n"
    assert seen["resumed_read"] == "first version"

    # delete: the SDK's shutdown killed it, and nothing of alice's is left.
    assert await extension.manager.list_sandboxes("alice") == []

"""The E2B API's streams (a command's Start, a run_code) count toward the owner's cap of event
streams as our REST API's do (SandboxExtension.max_event_streams_per_owner)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from e2b import SandboxException
from e2b_code_interpreter import Sandbox

from tests.e2b_api.conftest import e2b_server_config

pytestmark = pytest.mark.integration


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], runtime: str) -> dict[str, Any]:
    config = e2b_server_config(jp_server_config, runtime)
    config["SandboxExtension"] = {**config["SandboxExtension"], "max_event_streams_per_owner": 1}
    return config


async def test_a_stream_past_the_owners_cap_is_refused(e2b_env: str) -> None:
    def scenario() -> None:
        sandbox = Sandbox.create()
        try:
            held = sandbox.commands.run("sleep 600", background=True)
            with pytest.raises(SandboxException, match="429"):
                sandbox.run_code("1 + 1")
            held.kill()
            for _ in range(100):  # the stream is given back once its command is gone
                try:
                    assert sandbox.run_code("1 + 1").text == "2"
                    break
                except SandboxException:
                    time.sleep(0.1)
            else:
                pytest.fail("the owner's stream was not given back after the kill")
        finally:
            sandbox.kill()

    await asyncio.to_thread(scenario)

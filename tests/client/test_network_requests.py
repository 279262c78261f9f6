"""Agent code waiting on an ask policy's held requests through the Python client, over real
HTTP, on real sandboxes of both runtimes: follow_requests() yields a request as the sandbox's
code makes it, decide() lets it through or refuses it, requests() lists what waits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from jupyter_sandbox.client import NetworkRequestNotFoundError, Sandbox, SandboxClient
from tests.conftest import BOTH_RUNTIMES
from tests.sandbox.network.servers import FETCH, RecordingServer, recording_server

pytestmark = pytest.mark.integration


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return {
        **jp_server_config,
        "NetworkSettings": {
            "allow_loopback_for_tests": True,
            "test_host_addresses": {"allowed.test": "127.0.0.1"},
        },
    }


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.1") as s:
        yield s


def fetched(sandbox: Sandbox, url: str) -> str:
    return sandbox.run(["python", "-c", FETCH, url], timeout=60).stdout.strip()


@pytest.mark.parametrize("runtime", BOTH_RUNTIMES)
async def test_agent_code_follows_and_decides_held_requests(
    client: SandboxClient, server: RecordingServer, runtime: str
) -> None:
    url = f"http://allowed.test:{server.port}/"

    def scenario() -> None:
        with (
            client.create(runtime=runtime, network="ask") as sandbox,
            ThreadPoolExecutor(2) as pool,
        ):
            assert sandbox.network.requests() == []
            results = []
            followed = sandbox.network.follow_requests()
            assert next(followed) == []  # at once: nothing waits
            for decision, expected in (("once", "200"), ("deny", "403 denied by")):
                answer = pool.submit(fetched, sandbox, url)
                held = next(followed)  # the stream's next event: the request, as it is held
                [request] = held
                assert (request["host"], request["port"]) == ("allowed.test", server.port)
                assert sandbox.network.requests() == held
                decided = sandbox.network.decide(request["request_id"], decision)
                assert decided["decision"] == decision
                assert next(followed) == []  # decided: nothing waits any more
                results.append(answer.result(60))
                assert results[-1].startswith(expected), results
                with pytest.raises(NetworkRequestNotFoundError):
                    sandbox.network.decide(request["request_id"], "once")
            followed.close()
            audit = sandbox.network.audit()
            assert [e["decision"] for e in audit] == ["once", "deny"]

    await asyncio.to_thread(scenario)

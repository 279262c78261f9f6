"""`jupyter sandbox mcp --transport http` as a process of its own on 127.0.0.1, with the real
MCP client's Streamable HTTP transport, against a real Jupyter Server with the extension, on
both runtimes: refused without the bearer token, and with it a sandbox created, its
interpreter keeping state between two runs, and killed."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.mcp_server.conftest import structured, texts, token_of

pytestmark = pytest.mark.integration

START_TIMEOUT = 60.0  # seconds for the process to listen (imports, on a loaded host)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tail(log: Path) -> str:
    """The end of the MCP server's log, for a failure's message."""
    return log.read_text(errors="replace")[-2000:]


@asynccontextmanager
async def _http_mcp_server(server_url: str, token: str, log: Path) -> AsyncIterator[str]:
    """`jupyter sandbox mcp --transport http` on a free port of 127.0.0.1, listening; its
    endpoint's URL. The process is ended (SIGTERM, then SIGKILL) however the block ends."""
    port = _free_port()
    environment = {**os.environ, "JUPYTER_TOKEN": token}
    command = [
        *(sys.executable, "-m", "jupyter_sandbox.cli", "mcp", "--url", server_url),
        *("--transport", "http", "--port", str(port)),
    ]
    with log.open("ab") as errors:
        process = await asyncio.create_subprocess_exec(
            *command,
            env=environment,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=errors,
            stderr=errors,
        )
    try:
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT
        while True:
            assert process.returncode is None, _tail(log)
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                assert asyncio.get_running_loop().time() < deadline, _tail(log)
                await asyncio.sleep(0.2)
                continue
            writer.close()
            await writer.wait_closed()
            break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()


async def test_streamable_http_needs_the_token_and_serves_the_tools(
    server_url: str,
    jp_auth_header: dict[str, str],
    runtime: str,
    tmp_path: Path,
) -> None:
    token = token_of(jp_auth_header)
    log = tmp_path / "mcp-http.log"
    async with _http_mcp_server(server_url, token, log) as endpoint:
        async with httpx2.AsyncClient() as anonymous:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
                refused = await anonymous.post(endpoint, json={}, headers=headers)
                assert refused.status_code == 401, (headers, refused.text)
                assert refused.headers["WWW-Authenticate"] == "Bearer"

        bearer = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
        async with (
            bearer,
            streamable_http_client(endpoint, http_client=bearer) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream) as session,
        ):
            await session.initialize()
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert {"sandbox_create", "run_code", "sandbox_kill"} <= names
            created = await session.call_tool("sandbox_create", {"runtime": runtime})
            assert not created.is_error, texts(created)
            sandbox_id = structured(created)["sandbox_id"]
            for code in ("x = 20", "x * 2 + 2"):
                ran = await session.call_tool("run_code", {"sandbox_id": sandbox_id, "code": code})
                assert not ran.is_error, texts(ran)
            assert texts(ran) == "result:\n42"
            killed = await session.call_tool("sandbox_kill", {"sandbox_id": sandbox_id})
            assert not killed.is_error, texts(killed)

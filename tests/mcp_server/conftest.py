"""A real Jupyter Server with the extension (tests/server_extension's, over real HTTP on
127.0.0.1), and the real MCP client from PyPI talking over stdio to `jupyter sandbox mcp`,
which this test's Python starts as a host would, with the server's token in JUPYTER_TOKEN.

The server runs on the test's event loop and so does the MCP client (both are async), while
the MCP server is a process of its own: a test opens its session with :func:`mcp_session`
inside its body, where the client's task group starts and ends in one task.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from tests.server_extension.conftest import *  # noqa: F403  (fixtures, used by name)


@contextlib.asynccontextmanager
async def mcp_session(server_url: str, token: str, log: Path) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with `jupyter sandbox mcp --url server_url`; what the MCP
    server writes on stderr goes to ``log``."""
    environment = {"JUPYTER_TOKEN": token}
    if "PYTHONPATH" in os.environ:  # a checkout's code first, as in the test's own process
        environment["PYTHONPATH"] = os.environ["PYTHONPATH"]
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "jupyter_sandbox.cli", "mcp", "--url", server_url],
        env=environment,
    )
    with log.open("a") as errors:
        async with (
            stdio_client(command, errlog=errors) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream) as session,
        ):
            await session.initialize()
            yield session


def token_of(auth_header: dict[str, str]) -> str:
    """The server's own token (pytest-jupyter's ``jp_auth_header``)."""
    return auth_header["Authorization"].removeprefix("token ")


def texts(result: CallToolResult) -> str:
    """The text blocks of a tool's result, joined by newlines."""
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def structured(result: CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict), result
    return result.structured_content

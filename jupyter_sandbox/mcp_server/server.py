"""The MCP server: tools/list answers tools.py's tools, tools/call checks a call's arguments
(arguments.py), runs the tool through the REST client on a worker thread, and turns the
client's SandboxError into an error result (``isError``) that says what to do next.

``jupyter sandbox mcp`` (cli/mcp.py) calls :func:`serve_stdio`; a host (a desktop assistant,
an IDE, an agent framework) starts that command and speaks MCP on its stdin and stdout, so
nothing but MCP may be written to stdout: logs go to stderr.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.to_thread
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
)

from jupyter_sandbox._version import __version__
from jupyter_sandbox.client.client import SandboxClient
from jupyter_sandbox.client.errors import SandboxConnectionError
from jupyter_sandbox.mcp_server.arguments import check_arguments
from jupyter_sandbox.mcp_server.content import text_block
from jupyter_sandbox.mcp_server.tools import TOOLS, TOOLS_BY_NAME
from jupyter_sandbox.protocol.errors import (
    FileTooLargeError,
    QuotaExceededError,
    SandboxConflictError,
    SandboxDiedError,
    SandboxError,
    SandboxFileNotFoundError,
    SandboxNotFoundError,
)

NAME = "jupyter-sandbox"
INSTRUCTIONS = (
    "Isolated Linux sandboxes, each with a live Python interpreter. Create one with "
    "sandbox_create, pass its sandbox_id to run_code, command_run and the file tools (state "
    "and files persist between calls), and remove it with sandbox_kill when done."
)
# What to do after each kind of failure, added to the server's message (which says what
# failed); the first class in this order that the error is an instance of gives it.
NEXT_STEPS: tuple[tuple[type[SandboxError], str], ...] = (
    (
        SandboxNotFoundError,
        "call sandbox_list to see your sandboxes' ids, or sandbox_create for a new sandbox",
    ),
    (SandboxFileNotFoundError, "look at what is there with file_list"),
    (
        FileTooLargeError,
        "read parts of it with command_run (e.g. `head -c 100000 PATH`, `sed -n 1,200p PATH`)",
    ),
    (
        QuotaExceededError,
        "remove sandboxes you no longer need (sandbox_list, then sandbox_kill) and try again",
    ),
    (SandboxDiedError, "the sandbox is gone: create a new one with sandbox_create"),
    (SandboxConflictError, "wait and try again, or use another sandbox"),
    (
        SandboxConnectionError,
        "the MCP server cannot reach its Jupyter Server: tell the user to check that it runs",
    ),
)


def error_result(error: SandboxError) -> CallToolResult:
    """The error result for a tool's failure: the message and what to do next."""
    advice = next((text for cls, text in NEXT_STEPS if isinstance(error, cls)), "")
    text = f"error: {error.message}"
    if advice:
        text += f"\nwhat to do: {advice}"
    return CallToolResult(content=[text_block(text)], is_error=True)


def sandbox_server(client: SandboxClient) -> Server[Any]:
    """An MCP server whose tools act on the sandboxes of ``client``'s user."""

    async def list_tools(
        context: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=[tool.definition() for tool in TOOLS])

    async def call_tool(
        context: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        tool = TOOLS_BY_NAME.get(params.name)
        if tool is None:  # a protocol error, as the specification has it: no such tool
            raise MCPError(
                INVALID_PARAMS,
                f"no tool named {params.name[:64]!r}; the tools are {', '.join(TOOLS_BY_NAME)}",
            )
        try:
            arguments = check_arguments(tool, params.arguments)
            # The client blocks (urllib) for as long as a run takes: off the event loop, so
            # that the server keeps answering (pings, other calls) meanwhile.
            return await anyio.to_thread.run_sync(tool.run, client, arguments)
        except SandboxError as error:
            return error_result(error)

    return Server(
        NAME,
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def serve_stdio(client: SandboxClient) -> None:
    """Speak MCP on this process's stdin and stdout until the host closes stdin."""

    async def serve() -> None:
        server = sandbox_server(client)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve)

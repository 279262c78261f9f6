"""The real MCP client (the `mcp` package from PyPI, unmodified) over stdio against `jupyter
sandbox mcp`, against a real Jupyter Server with the extension, on both runtimes: the tools
listed with their schemas, then a sandbox's whole life as a model would drive it."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import ImageContent

from jupyter_sandbox.server_extension.app import SandboxExtension
from tests.mcp_server.conftest import mcp_session, structured, texts, token_of

pytestmark = pytest.mark.integration

TOOLS = {
    "sandbox_create",
    "sandbox_list",
    "sandbox_kill",
    "run_code",
    "command_run",
    "file_read",
    "file_write",
    "file_list",
}


async def test_a_sandboxs_life_through_the_mcp_client(
    extension: SandboxExtension,
    server_url: str,
    jp_auth_header: dict[str, str],
    runtime: str,
    tmp_path: Path,
) -> None:
    log = tmp_path / "mcp-server.log"
    async with mcp_session(server_url, token_of(jp_auth_header), log) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(listed) >= TOOLS, log.read_text()
        for tool in listed.values():
            assert len(tool.description or "") > 60, tool.name
            assert tool.input_schema["type"] == "object"
            assert tool.input_schema["additionalProperties"] is False
        code = listed["run_code"].input_schema["properties"]["code"]
        assert code["maxLength"] == 1_000_000

        created = await session.call_tool(
            "sandbox_create", {"runtime": runtime, "metadata": {"via": "mcp"}}
        )
        assert not created.is_error, texts(created)
        sandbox_id = structured(created)["sandbox_id"]
        assert structured(created)["runtime"] == runtime
        assert f'sandbox_id "{sandbox_id}"' in texts(created)

        async def call(name: str, **arguments: object) -> tuple[bool, str]:
            result = await session.call_tool(name, {"sandbox_id": sandbox_id, **arguments})
            return result.is_error, texts(result)

        assert await call("run_code", code="x = 20") == (
            False,
            "(the code ran and printed nothing)",
        )
        assert await call("run_code", code="x * 2 + 2") == (False, "result:\n42")
        assert await call(
            "run_code", code="print('hi'); import sys; print('oh', file=sys.stderr)"
        ) == (
            False,
            "stdout:\nhi\n\nstderr:\noh\n",
        )
        failed, text = await call("run_code", code="1 / 0")
        assert failed
        assert text.startswith("error: the code raised ZeroDivisionError: division by zero")
        assert "fix the code and run it again" in text

        # A figure comes back as image content: a PNG, whole.
        figure = await session.call_tool(
            "run_code",
            {
                "sandbox_id": sandbox_id,
                "code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()",
            },
        )
        assert not figure.is_error, texts(figure)
        [image] = figure.content
        assert isinstance(image, ImageContent)
        assert image.mime_type == "image/png"
        assert base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")
        # A PNG file is read back as an image too.
        saved = "plt.plot([1, 2]); plt.savefig('fig.png'); plt.close()"
        assert await call("run_code", code=saved) == (False, "(the code ran and printed nothing)")
        read_back = await session.call_tool(
            "file_read", {"sandbox_id": sandbox_id, "path": "fig.png"}
        )
        [picture] = read_back.content
        assert isinstance(picture, ImageContent)
        assert picture.mime_type == "image/png"

        # Files: written, read back, listed, and seen by a command.
        assert await call("file_write", path="notes/a.txt", content="héllo\n") == (
            False,
            "Wrote 7 bytes to /workspace/notes/a.txt.",
        )
        assert await call("file_read", path="/workspace/notes/a.txt") == (False, "héllo\n")
        listed_files = await call("file_list", path="notes")
        assert not listed_files[0]
        assert listed_files[1].startswith("file")
        assert listed_files[1].endswith("  a.txt")
        missing = await call("file_read", path="notes/b.txt")
        assert missing[0]
        assert "what to do: look at what is there with file_list" in missing[1]

        # A command: its exit code is the answer, stdout and stderr apart.
        result = await session.call_tool(
            "command_run",
            {"sandbox_id": sandbox_id, "command": "cat notes/a.txt; echo err >&2; exit 3"},
        )
        assert not result.is_error
        assert structured(result) == {"exit_code": 3, "timed_out": False}
        assert texts(result).startswith("exit code 3 (")
        assert "stdout:\nhéllo\n" in texts(result)
        assert "stderr:\nerr\n" in texts(result)

        # An unknown sandbox is an error result that says what to do.
        unknown = await session.call_tool("run_code", {"sandbox_id": "0123456789ab", "code": "1"})
        assert unknown.is_error
        assert texts(unknown) == (
            "error: no sandbox 0123456789ab\nwhat to do: call sandbox_list to see your "
            "sandboxes' ids, or sandbox_create for a new sandbox"
        )
        # An id that is not one is refused before the server is asked.
        malformed = await session.call_tool("sandbox_kill", {"sandbox_id": "../../etc"})
        assert malformed.is_error
        assert "is not a sandbox id (12 hexadecimal digits" in texts(malformed)
        # A tool that does not exist is the protocol's error, naming the tools.
        with pytest.raises(MCPError, match="no tool named 'sandbox_fly'; the tools are"):
            await session.call_tool("sandbox_fly", {})

        listed_sandboxes = structured(await session.call_tool("sandbox_list", {}))["sandboxes"]
        assert sandbox_id in [row["sandbox_id"] for row in listed_sandboxes]
        only_mine = await session.call_tool("sandbox_list", {"metadata": {"via": "mcp"}})
        assert [row["sandbox_id"] for row in structured(only_mine)["sandboxes"]] == [sandbox_id]

        killed = await session.call_tool("sandbox_kill", {"sandbox_id": sandbox_id})
        assert not killed.is_error, texts(killed)
        after = structured(await session.call_tool("sandbox_list", {}))["sandboxes"]
        assert sandbox_id not in [row["sandbox_id"] for row in after]
        gone = await call("run_code", code="x")
        assert gone[0]
        assert gone[1].startswith(f"error: no sandbox {sandbox_id}")
    owner = extension.owner_of(None)  # type: ignore[arg-type]
    assert await extension.manager.list_sandboxes(owner) == []

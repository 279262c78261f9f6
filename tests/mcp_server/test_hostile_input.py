"""Hostile input through `jupyter sandbox mcp`, on both runtimes, with the real MCP client over
stdio against a real server: arguments past their bounds or of the wrong form (what a model
may send), output a sandbox's code forges (fake and oversized images, a text flood) and files
it plants for file_read (huge, growing past what their entry said, not files at all)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.types import CallToolResult, ImageContent, TextContent

from tests.mcp_server.conftest import mcp_session, structured, texts, token_of

pytestmark = pytest.mark.integration


async def _create(session: ClientSession, runtime: str) -> str:
    created = await session.call_tool("sandbox_create", {"runtime": runtime})
    assert not created.is_error, texts(created)
    return str(structured(created)["sandbox_id"])


@pytest.mark.checklist(
    row=85,
    attack="MCP tool arguments past their bounds or of the wrong form: 10 MB of code, 2 MB of "
    "file content, a path with NUL, a negative and a huge timeout, unknown and missing "
    "arguments, a string where a number goes, 17 labels",
    expected="an error result (isError) naming the argument, its bound and what to do, without "
    "echoing the value; nothing reaches the server (no file written)",
)
async def test_row85_arguments_past_their_bounds_are_clear_error_results(
    server_url: str,
    jp_auth_header: dict[str, str],
    runtime: str,
    tmp_path: Path,
    observe: Callable[..., None],
) -> None:
    async with mcp_session(server_url, token_of(jp_auth_header), tmp_path / "log") as session:
        sandbox_id = await _create(session, runtime)
        cases: list[tuple[str, dict[str, Any], str]] = [
            (
                "run_code",
                {"code": "x" * 10_000_000},
                "run_code: the argument code holds 10000000 characters, more than the 1000000 "
                "allowed. Python code (at most 1000000 characters; write a longer program to a "
                "file with file_write and run it with %run FILE).",
            ),
            (
                "file_write",
                {"path": "big.txt", "content": "y" * 2_000_000},
                "file_write: the argument content holds 2000000 characters, more than the "
                "1000000 allowed.",
            ),
            ("file_read", {"path": "a\x00b"}, "file_read: the argument path has a character"),
            ("command_run", {"command": "true", "timeout": -1}, "it must be above 0"),
            ("command_run", {"command": "true", "timeout": 10**9}, "more than the 3600 allowed"),
            ("run_code", {"code": "1", "shell": "yes"}, "it takes no argument shell; it takes"),
            ("run_code", {"timeout": "10"}, "the argument code is missing"),
            ("command_run", {"command": "true", "timeout": "10"}, "must be a number, not a string"),
        ]
        for name, arguments, expected in cases:
            result = await session.call_tool(name, {"sandbox_id": sandbox_id, **arguments})
            assert result.is_error, (name, texts(result))
            assert expected in texts(result)
            assert len(texts(result)) < 600  # the value is not echoed
        labels = {f"k{index}": "v" for index in range(17)}
        crowded = await session.call_tool("sandbox_create", {"metadata": labels})
        assert crowded.is_error
        assert "holds 17 entries, more than the 16 allowed" in texts(crowded)
        # Nothing reached the server: the file the oversized write named was never made.
        check = await session.call_tool(
            "command_run", {"sandbox_id": sandbox_id, "command": "test -e big.txt"}
        )
        assert structured(check)["exit_code"] == 1
        listed = structured(await session.call_tool("sandbox_list", {}))["sandboxes"]
        assert [row["sandbox_id"] for row in listed] == [sandbox_id]
        await session.call_tool("sandbox_kill", {"sandbox_id": sandbox_id})
    observe(
        f"{len(cases) + 1} bad calls: each an error result under 600 characters naming the "
        "argument and its bound; the oversized file_write wrote nothing",
        cases=len(cases) + 1,
    )


def _shown(result: CallToolResult) -> tuple[list[ImageContent], str]:
    images = [block for block in result.content if isinstance(block, ImageContent)]
    return images, "\n".join(b.text for b in result.content if isinstance(b, TextContent))


@pytest.mark.checklist(
    row=86,
    attack="a sandbox's code forges run_code output: image/png that is HTML, that is not "
    "base64, that is 6 MB; an image/svg+xml; 5 MB printed",
    expected="only real images within 5 MiB become MCP image content; the others are a note "
    "of their type and size; text is cut at 100000 characters with a note; the MCP server "
    "answers the next call",
)
async def test_row86_forged_and_flooding_output_is_bounded(
    server_url: str,
    jp_auth_header: dict[str, str],
    runtime: str,
    tmp_path: Path,
    observe: Callable[..., None],
) -> None:
    async with mcp_session(server_url, token_of(jp_auth_header), tmp_path / "log") as session:
        sandbox_id = await _create(session, runtime)

        async def run(code: str) -> CallToolResult:
            return await session.call_tool("run_code", {"sandbox_id": sandbox_id, "code": code})

        html = base64.b64encode(b"<script>alert(1)</script>").decode()
        forged = await run(
            "import base64, os\n"
            f"display({{'image/png': '{html}', 'text/plain': 'a plot'}}, raw=True)\n"
            "display({'image/png': 'not base64 at all!'}, raw=True)\n"
            "big = b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(6 * 1024 * 1024)\n"
            "display({'image/png': base64.b64encode(big).decode()}, raw=True)\n"
            "display({'image/svg+xml': '<svg onload=\"alert(1)\"/>'}, raw=True)\n"
        )
        images, text = _shown(forged)
        assert images == []
        assert not forged.is_error
        assert text.count("[image/png output not shown:") == 3
        assert "[image/svg+xml output not shown:" in text
        assert "<script>" not in text
        assert "display:\na plot" in text  # the text form of the one the model cannot see
        assert len(text) < 2000

        flood = await run("print('z' * 5_000_000)")
        images, text = _shown(flood)
        assert text.startswith("stdout:\nzzz")
        assert "[... 4900009 more characters not shown: write the output to a file" in text
        assert len(text) < 100_500

        # A real image still comes through, and the server answers on.
        png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
        real = await run(f"display({{'image/png': '{png}'}}, raw=True)")
        images, _ = _shown(real)
        assert [image.mime_type for image in images] == ["image/png"]
        await session.call_tool("sandbox_kill", {"sandbox_id": sandbox_id})
    observe("4 forged images shown as notes, 5 MB of stdout cut to 100000 characters", cases=5)


@pytest.mark.checklist(
    row=87,
    attack="files planted for file_read: 50 MB; a symlink (entry of a few bytes) to a 50 MB "
    "file and to /dev/zero; a FIFO; a directory; bytes that are not UTF-8 named .txt and .png",
    expected="an error result saying how to read it instead; no more than 5 MiB + 1 byte of "
    "any file read into the MCP server; a FIFO never opened",
)
async def test_row87_hostile_files_are_refused_with_a_bound_read(
    server_url: str,
    jp_auth_header: dict[str, str],
    runtime: str,
    tmp_path: Path,
    observe: Callable[..., None],
) -> None:
    async with mcp_session(server_url, token_of(jp_auth_header), tmp_path / "log") as session:
        sandbox_id = await _create(session, runtime)
        planted = await session.call_tool(
            "command_run",
            {
                "sandbox_id": sandbox_id,
                "command": "truncate -s 50000000 big.bin && ln -s big.bin link.txt && "
                "ln -s /dev/zero zero.txt && mkfifo pipe && mkdir dir && "
                "printf '\\377\\376abc' > bad.txt && cp bad.txt bad.png",
            },
        )
        assert structured(planted)["exit_code"] == 0, texts(planted)
        cases = {
            "big.bin": "/workspace/big.bin holds 50000000 bytes, more than the 5242880",
            # Its entry is the link's, of a few bytes: the read itself stops past the bound.
            "link.txt": "the file holds more than 5242880 bytes, the most this read takes",
            "zero.txt": "/workspace/zero.txt is not a regular file",  # the server's word
            "pipe": "/workspace/pipe is a FIFO, socket or device, not a file",
            "dir": "/workspace/dir is a directory: list it with file_list",
            "bad.txt": "is not UTF-8 text (byte 0 of 5)",
            "bad.png": "is not UTF-8 text (byte 0 of 5)",
        }
        for path, expected in cases.items():
            result = await session.call_tool("file_read", {"sandbox_id": sandbox_id, "path": path})
            assert result.is_error, (path, texts(result))
            assert expected in texts(result), (path, texts(result))
            assert len(texts(result)) < 1000
        for path in ("big.bin", "link.txt"):
            result = await session.call_tool("file_read", {"sandbox_id": sandbox_id, "path": path})
            assert "what to do: read parts of it with command_run" in texts(result)
        await session.call_tool("sandbox_kill", {"sandbox_id": sandbox_id})
    observe(f"{len(cases)} planted files refused, each with what to do instead", cases=len(cases))

"""Run outputs as MCP content (jupyter_sandbox/mcp_server/content.py), on answers as the API
gives them: images only when they are what they claim, text bounded, the order a notebook
shows."""

from __future__ import annotations

import base64
from typing import Any

from mcp.types import ImageContent, TextContent

from jupyter_sandbox.client.commands import CommandResult
from jupyter_sandbox.client.execution import Execution
from jupyter_sandbox.mcp_server.content import (
    MAX_IMAGE_BYTES,
    MAX_TEXT,
    command_content,
    execution_content,
    image_block,
    text_block,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def _execution(**answer: Any) -> Execution:
    return Execution.from_answer({"status": "ok", **answer})


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_text_is_cut_with_a_note_of_what_is_left_out() -> None:
    assert text_block("x" * MAX_TEXT).text == "x" * MAX_TEXT
    cut = text_block("x" * (MAX_TEXT + 5)).text
    assert cut.startswith("x" * MAX_TEXT + "\n[... 5 more characters not shown:")


def test_images_are_shown_only_when_they_are_what_they_claim() -> None:
    image = image_block("image/png", _b64(PNG))
    assert isinstance(image, ImageContent)
    assert (image.mime_type, base64.b64decode(image.data)) == ("image/png", PNG)
    webp = b"RIFF\x00\x00\x00\x00WEBPVP8 "
    assert image_block("image/webp", _b64(webp)) is not None
    assert image_block("image/webp", _b64(b"RIFF\x00\x00\x00\x00WAVEfmt ")) is None
    assert image_block("image/jpeg", _b64(PNG)) is None  # a PNG is no JPEG
    assert image_block("image/png", _b64(b"<script>")) is None
    assert image_block("image/png", "not base64!") is None
    assert image_block("image/png", {"not": "text"}) is None
    assert image_block("image/svg+xml", "<svg/>") is None  # no image content for SVG
    too_large = PNG + b"\x00" * MAX_IMAGE_BYTES
    assert image_block("image/png", _b64(too_large)) is None


def test_a_runs_output_in_notebook_order() -> None:
    execution = _execution(
        stdout="out\n",
        stderr="err\n",
        outputs=[
            {"type": "display_data", "data": {"image/png": _b64(PNG), "text/plain": "<Figure>"}},
            {"type": "display_data", "data": {"image/png": "forged", "text/plain": "a plot"}},
            {"type": "execute_result", "data": {"text/plain": "42"}},
        ],
    )
    blocks = execution_content(execution)
    kinds = [type(block).__name__ for block in blocks]
    assert kinds == [
        "TextContent",
        "TextContent",
        "ImageContent",
        "TextContent",
        "TextContent",
        "TextContent",
    ]
    texts = [block.text for block in blocks if isinstance(block, TextContent)]
    assert texts[:3] == ["stdout:\nout\n", "stderr:\nerr\n", "display:\na plot"]
    assert texts[3].startswith("[image/png output not shown: 6 characters")
    assert texts[4] == "result:\n42"


def test_an_exception_and_a_timeout_say_what_to_do() -> None:
    error = {"ename": "NameError", "evalue": "name 'y' is not defined", "traceback": ["tb line"]}
    [raised] = execution_content(_execution(status="error", error=error))
    assert isinstance(raised, TextContent)
    assert raised.text == (
        "error: the code raised NameError: name 'y' is not defined; the interpreter keeps its "
        "state, so fix the code and run it again.\ntb line"
    )
    timed_out = execution_content(_execution(status="error", timed_out=True))
    assert isinstance(timed_out[0], TextContent)
    assert "run it again with a larger timeout" in timed_out[0].text
    still = execution_content(_execution(status="error", timed_out=True, still_running=True))
    assert isinstance(still[0], TextContent)
    assert "kill the sandbox (sandbox_kill)" in still[0].text


def test_a_commands_exit_code_comes_first() -> None:
    result = CommandResult(exit_code=3, stdout="o", stderr="", timed_out=False, duration=0.5)
    assert [block.text for block in command_content(result) if isinstance(block, TextContent)] == [
        "exit code 3 (0.50 s)",
        "stdout:\no",
    ]
    killed = CommandResult(exit_code=137, stdout="", stderr="", timed_out=True, duration=9)
    [note] = command_content(killed)
    assert isinstance(note, TextContent)
    assert note.text.startswith("the command ran past its timeout and was killed (exit code 137)")

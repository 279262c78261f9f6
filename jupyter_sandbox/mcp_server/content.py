"""What a tool answers, as MCP content: a code run's output (stdout, stderr, displayed values,
images, its exception), a command's result and text the tools compose, each bounded.

tools.py calls these to build a tool's result. What they carry was written by code in the
sandbox, so it is hostile: a text block is cut at :data:`MAX_TEXT` characters with a note of
what was left out, and an image becomes MCP image content only when it is at most
:data:`MAX_IMAGE_BYTES`, decodes as strict base64 and starts with its format's own signature
(anything else is a note naming its type and size), so that no output can flood the host's
model or pass something else off as a picture.
"""

from __future__ import annotations

import base64
import binascii

from mcp.types import ContentBlock, ImageContent, TextContent

from jupyter_sandbox.client.commands import CommandResult
from jupyter_sandbox.client.execution import Execution

MAX_TEXT = 100_000  # characters of one text block: past that a model's context fills up
MAX_IMAGE_BYTES = 5 * 1024**2  # bytes of one image, decoded: what hosts accept at most
# The image types hosts show to models, with how each format's bytes start.
IMAGE_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # then 4 bytes of size and WEBP, checked below
}


def text_block(text: str) -> TextContent:
    """``text`` as one text block, cut at MAX_TEXT characters with a note of how many more
    there were and how to see them."""
    if len(text) <= MAX_TEXT:
        return TextContent(text=text)
    more = len(text) - MAX_TEXT
    return TextContent(
        text=f"{text[:MAX_TEXT]}\n[... {more} more characters not shown: write the output to a "
        "file in the sandbox and look at parts of it with command_run (head, tail, grep)]"
    )


def image_block(mime: str, data: object) -> ImageContent | None:
    """The image ``data`` (base64, as a MIME bundle carries it) as image content, or None
    when it is not one of IMAGE_SIGNATURES' types, too large, or not an image of that type."""
    signatures = IMAGE_SIGNATURES.get(mime)
    # Base64 takes 4 characters for 3 bytes: checked before decoding anything.
    if signatures is None or not isinstance(data, str) or len(data) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        return None
    try:
        decoded = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not decoded.startswith(signatures):
        return None
    if mime == "image/webp" and decoded[8:12] != b"WEBP":
        return None
    return ImageContent(data=base64.b64encode(decoded).decode(), mime_type=mime)


def execution_content(execution: Execution) -> list[ContentBlock]:
    """A code run's output as content, in the order a notebook shows it: what it printed
    (stdout, then stderr), each displayed value (an image as image content, else its
    text/plain), then its exception or how it ran out of time."""
    blocks: list[ContentBlock] = []
    if execution.stdout:
        blocks.append(text_block(f"stdout:\n{execution.stdout}"))
    if execution.stderr:
        blocks.append(text_block(f"stderr:\n{execution.stderr}"))
    for output in execution.outputs:
        blocks.extend(_output_blocks(output))
    error = execution.error
    if execution.still_running:
        blocks.append(
            text_block(
                "error: the code ran past its timeout and ignored the interrupt; it still runs "
                "in the interpreter and later runs wait for it: kill the sandbox (sandbox_kill) "
                "and create a new one, or wait and try again"
            )
        )
    elif execution.timed_out:
        blocks.append(
            text_block(
                "error: the code ran past its timeout and was interrupted; the interpreter "
                "keeps its state: run it again with a larger timeout, or in smaller steps"
            )
        )
    if error is not None:
        traceback = "\n".join(error.traceback) or str(error)
        blocks.append(
            text_block(
                f"error: the code raised {error}; the interpreter keeps its state, so fix the "
                f"code and run it again.\n{traceback}"
            )
        )
    elif not execution.ok and not execution.timed_out:
        blocks.append(text_block(f"error: the run ended with status {execution.status!r}"))
    if not blocks:
        blocks.append(TextContent(text="(the code ran and printed nothing)"))
    return blocks


def _output_blocks(output: dict[str, object]) -> list[ContentBlock]:
    """One displayed value: its images as image content, its text/plain when it has no image;
    an image that cannot be shown is a note of its type and size."""
    bundle = output.get("data")
    if not isinstance(bundle, dict):
        return []
    blocks: list[ContentBlock] = []
    notes: list[str] = []
    for mime, value in bundle.items():
        if not str(mime).startswith("image/"):
            continue
        image = image_block(str(mime), value)
        if image is not None:
            blocks.append(image)
        else:
            size = len(value) if isinstance(value, str) else 0
            notes.append(
                f"[{mime} output not shown: {size} characters, not a PNG, JPEG, GIF or WebP image of at most {MAX_IMAGE_BYTES // 1024**2} MiB]"
            )
    text = bundle.get("text/plain")
    if not blocks and isinstance(text, str):
        label = "result" if output.get("type") == "execute_result" else "display"
        blocks.append(text_block(f"{label}:\n{text}"))
    blocks.extend(TextContent(text=note) for note in notes)
    return blocks


def command_content(result: CommandResult) -> list[ContentBlock]:
    """A command's result: how it ended first, then its stdout and stderr."""
    if result.timed_out:
        ending = (
            f"the command ran past its timeout and was killed (exit code {result.exit_code}): "
            "give it a larger timeout, or run it in smaller steps"
        )
    else:
        ending = f"exit code {result.exit_code}"
    blocks: list[ContentBlock] = [TextContent(text=f"{ending} ({result.duration:.2f} s)")]
    if result.stdout:
        blocks.append(text_block(f"stdout:\n{result.stdout}"))
    if result.stderr:
        blocks.append(text_block(f"stderr:\n{result.stderr}"))
    return blocks

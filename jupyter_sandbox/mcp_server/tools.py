"""The MCP server's tools: each one's name, the description a model reads to choose and call it,
the JSON Schema of its arguments (with every bound stated) and the work it does through
:class:`~jupyter_sandbox.client.SandboxClient`, over the server's REST API.

server.py lists :data:`TOOLS` and calls a tool's ``run`` with arguments that
arguments.py has checked against its schema, so ``run`` may index them as the schema says.
``run`` blocks (the client is urllib's) and raises the client's SandboxError, which server.py
turns into an error result. Its answer is a :class:`~mcp.types.CallToolResult`: content for
the model (content.py composes and bounds it) and, where small, ``structured_content`` for a
program.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations

from jupyter_sandbox.client.client import SandboxClient
from jupyter_sandbox.client.sandbox import Sandbox
from jupyter_sandbox.mcp_server.content import (
    MAX_IMAGE_BYTES,
    MAX_TEXT,
    command_content,
    execution_content,
    image_block,
    text_block,
)
from jupyter_sandbox.protocol.errors import FileTooLargeError, SandboxFileTypeError

# Bounds of the arguments, stated in each schema: what a model sends through a host is
# checked against them before anything reaches the server (which has larger bounds of its own).
MAX_CODE = 1_000_000  # characters of code for one run
MAX_COMMAND = 100_000  # characters of a shell command
MAX_FILE_TEXT = 1_000_000  # characters a file_write takes
MAX_FILE_READ = MAX_IMAGE_BYTES  # bytes a file_read fetches: an image's (text: MAX_TEXT)
MAX_PATH = 4096  # characters of a path: Linux's PATH_MAX
MAX_TIMEOUT = 3600  # seconds a run or command may take: the server's own bound
DEFAULT_TIMEOUT = 60  # seconds, as the server's own default
MAX_LIFETIME = 31_622_400  # seconds a sandbox may be given (the API's bound: a year)
MAX_LISTED = 1000  # entries file_list shows of one directory
MAX_METADATA = 16  # labels of one sandbox
MAX_LABEL = 256  # characters of one label's value
# Images a file_read returns as image content, by the file's extension.
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}

ToolRun = Callable[[SandboxClient, dict[str, Any]], CallToolResult]

SANDBOX_ID: dict[str, Any] = {
    "type": "string",
    "pattern": "^[0-9a-f]{12}$",
    "description": "The sandbox's id (12 hexadecimal digits), as sandbox_create or "
    "sandbox_list gave it.",
}
PATH: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_PATH,
    "pattern": "^[^\\x00]*$",
    "description": f"A path in the sandbox, absolute or relative to /workspace (at most "
    f"{MAX_PATH} characters).",
}
TIMEOUT: dict[str, Any] = {
    "type": "number",
    "exclusiveMinimum": 0,
    "maximum": MAX_TIMEOUT,
    "default": DEFAULT_TIMEOUT,
}
METADATA: dict[str, Any] = {
    "type": "object",
    "maxProperties": MAX_METADATA,
    "propertyNames": {"pattern": "^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$"},
    "additionalProperties": {"type": "string", "maxLength": MAX_LABEL},
}


@dataclass(frozen=True)
class SandboxTool:
    """One tool: its ``name``, ``description`` and ``schema`` as tools/list gives them, what
    ``run`` does, and the hints a host may show (``read_only``: it changes nothing;
    ``destructive``: it may remove or replace something)."""

    name: str
    title: str
    description: str
    schema: dict[str, Any]
    run: ToolRun
    read_only: bool = False
    destructive: bool = False

    def definition(self) -> Tool:
        """The tool as tools/list answers it."""
        return Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=self.schema,
            annotations=ToolAnnotations(
                title=self.title,
                read_only_hint=self.read_only,
                destructive_hint=self.destructive,
                idempotent_hint=self.read_only,
                open_world_hint=False,
            ),
        )


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The schema of a tool's arguments: these properties, no others."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def _answer(text: str, structured: dict[str, Any] | None = None) -> CallToolResult:
    return CallToolResult(content=[text_block(text)], structured_content=structured)


def _summary(sandbox: Sandbox) -> dict[str, Any]:
    """What a model needs to know of a sandbox, as structured content."""
    info = sandbox.info
    return {
        "sandbox_id": sandbox.id,
        "status": sandbox.status,
        "runtime": info.get("runtime"),
        "created": info.get("created"),
        "expires": info.get("expires"),
        "metadata": sandbox.metadata,
    }


def _sandbox_create(client: SandboxClient, arguments: dict[str, Any]) -> CallToolResult:
    sandbox = client.create(
        runtime=arguments.get("runtime"),
        timeout=arguments.get("timeout"),
        metadata=arguments.get("metadata"),
    )
    expires = sandbox.info.get("expires") or "when the server's time to live runs out"
    return _answer(
        f"Created sandbox {sandbox.id} (runtime {sandbox.info.get('runtime')}, status "
        f"{sandbox.status}; it is removed at {expires}). Pass sandbox_id "
        f'"{sandbox.id}" to run_code, command_run and the file tools; call sandbox_kill '
        "when you are done with it.",
        _summary(sandbox),
    )


def _sandbox_list(client: SandboxClient, arguments: dict[str, Any]) -> CallToolResult:
    sandboxes = client.list(metadata=arguments.get("metadata"))
    rows = [_summary(sandbox) for sandbox in sandboxes]
    if not rows:
        text = "You have no sandboxes (that match): create one with sandbox_create."
    else:
        text = "\n".join(
            f"{row['sandbox_id']}  {row['status']}  {row['runtime']}  created {row['created']}"
            f"  expires {row['expires'] or '-'}  metadata {row['metadata']}"
            for row in rows
        )
    return _answer(text, {"sandboxes": rows})


def _sandbox_kill(client: SandboxClient, arguments: dict[str, Any]) -> CallToolResult:
    client.get(arguments["sandbox_id"]).remove()
    return _answer(f"Sandbox {arguments['sandbox_id']} and its files were removed.")


def _run_code(client: SandboxClient, arguments: dict[str, Any]) -> CallToolResult:
    sandbox = client.get(arguments["sandbox_id"])
    execution = sandbox.run_code(
        arguments["code"], timeout=float(arguments.get("timeout", DEFAULT_TIMEOUT))
    )
    # A run that raised or ran out of time is an error result: the model sees the run failed.
    return CallToolResult(content=execution_content(execution), is_error=not execution.ok)


def _command_run(client: SandboxClient, arguments: dict[str, Any]) -> CallToolResult:
    sandbox = client.get(arguments["sandbox_id"])
    result = sandbox.run(
        arguments["command"],
        timeout=float(arguments.get("timeout", DEFAULT_TIMEOUT)),
        cwd=arguments.get("cwd"),
        stdin=arguments.get("stdin"),
    )
    # A command that exits non-zero ran as asked: its exit code is the answer, not an error
    # of the tool (a shell's `test -f` is meant to fail sometimes).
    return CallToolResult(
        content=command_content(result),
        structured_content={"exit_code": result.exit_code, "timed_out": result.timed_out},
        is_error=result.timed_out,
    )


def _file_read(client: SandboxClient, arguments: dict[str, Any]) -> CallToolResult:
    sandbox = client.get(arguments["sandbox_id"])
    path = arguments["path"]
    entry = sandbox.files.info(path)
    # A symlink is read as its target (inside the sandbox, as its user); a directory, a FIFO
    # or a device is no file to read.
    if entry.type == "directory":
        raise SandboxFileTypeError(f"{entry.path} is a directory: list it with file_list")
    if entry.type not in ("file", "symlink"):  # never opened: a FIFO's read would wait
        raise SandboxFileTypeError(
            f"{entry.path} is a FIFO, socket or device, not a file: only files can be read"
        )
    if entry.size > MAX_FILE_READ:
        raise FileTooLargeError(
            f"{entry.path} holds {entry.size} bytes, more than the {MAX_FILE_READ} file_read "
            "returns"
        )
    # Bound again as it is read: the file may have grown since, or be a symlink's target.
    data = sandbox.files.read(path, max_bytes=MAX_FILE_READ)
    image_type = IMAGE_TYPES.get(PurePosixPath(entry.name).suffix.lower())
    if image_type is not None:
        image = image_block(image_type, base64.b64encode(data).decode())
        if image is not None:
            return CallToolResult(content=[image])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SandboxFileTypeError(
            f"{entry.path} is not UTF-8 text (byte {error.start} of {len(data)}) nor a PNG, "
            "JPEG, GIF or WebP image: look at it with command_run (e.g. `file PATH`, "
            "`xxd PATH | head`), or convert it to text there"
        ) from None
    if len(text) > MAX_TEXT:
        raise SandboxFileTypeError(
            f"{entry.path} holds {len(text)} characters, more than the {MAX_TEXT} a read "
            "returns: read parts of it with command_run (e.g. `sed -n 1,200p PATH`)"
        )
    return CallToolResult(content=[TextContent(text=text)])


def _file_write(client: SandboxClient, arguments: dict[str, Any]) -> CallToolResult:
    sandbox = client.get(arguments["sandbox_id"])
    entry = sandbox.files.write(arguments["path"], arguments["content"])
    return _answer(
        f"Wrote {entry.size} bytes to {entry.path}.", {"path": entry.path, "size": entry.size}
    )


def _file_list(client: SandboxClient, arguments: dict[str, Any]) -> CallToolResult:
    sandbox = client.get(arguments["sandbox_id"])
    entries = sandbox.files.list(arguments.get("path", "/workspace"))
    shown = entries[:MAX_LISTED]
    lines = [
        f"{entry.type:9}  {entry.size:>12}  {entry.modified}  {entry.name}"
        + ("/" if entry.is_dir else "")
        for entry in shown
    ]
    if len(entries) > len(shown):
        lines.append(
            f"[... {len(entries) - len(shown)} more entries not shown: narrow the listing with "
            "command_run (e.g. `ls DIR | grep PATTERN`)]"
        )
    return _answer("\n".join(lines) or "(the directory is empty)")


TOOLS: tuple[SandboxTool, ...] = (
    SandboxTool(
        name="sandbox_create",
        title="Create a sandbox",
        description=(
            "Start a new isolated Linux sandbox (a container under gVisor or runc) with a live "
            "Python interpreter and a /workspace directory; returns its sandbox_id, which "
            "every other tool takes. Variables, imports and files persist in it from one call "
            "to the next until it is killed (sandbox_kill) or its timeout removes it. Create "
            "one per task and reuse it; list existing ones with sandbox_list."
        ),
        schema=_object(
            {
                "runtime": {
                    "type": "string",
                    "enum": ["runsc", "runc"],
                    "description": "runsc (gVisor, the stronger isolation) or runc; "
                    "default: the server's setting.",
                },
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": MAX_LIFETIME,
                    "description": "Seconds after which the sandbox is removed, whatever it "
                    "does (at most the server's time to live); default: that time to live.",
                },
                "metadata": METADATA
                | {
                    "description": f'Your own labels, e.g. {{"task": "t-42"}}, to find it '
                    f"again with sandbox_list (at most {MAX_METADATA}; values at most "
                    f"{MAX_LABEL} characters)."
                },
            }
        ),
        run=_sandbox_create,
    ),
    SandboxTool(
        name="sandbox_list",
        title="List sandboxes",
        description=(
            "List your sandboxes: id, status, runtime, when created, when removed, and their "
            "labels. Use it to find a sandbox_id again or to see what is still running."
        ),
        schema=_object(
            {
                "metadata": METADATA
                | {
                    "description": "Only sandboxes whose labels include every one of these "
                    "(as given to sandbox_create)."
                }
            }
        ),
        run=_sandbox_list,
        read_only=True,
    ),
    SandboxTool(
        name="sandbox_kill",
        title="Kill a sandbox",
        description=(
            "Stop a sandbox and remove it with its files and interpreter state, for good. "
            "Call it when the task is done."
        ),
        schema=_object({"sandbox_id": SANDBOX_ID}, ("sandbox_id",)),
        run=_sandbox_kill,
        destructive=True,
    ),
    SandboxTool(
        name="run_code",
        title="Run Python code",
        description=(
            "Run Python code in the sandbox's live interpreter (IPython: `!cmd` and `%magics` "
            "work), as a notebook cell: it sees the variables and imports earlier runs left. "
            "Returns what it printed (stdout, stderr), the value of its last expression, "
            "images it displayed (a matplotlib figure) as images, and its exception with the "
            "traceback, if it raised (an error result; the state stays). Past `timeout` "
            "seconds it is interrupted."
        ),
        schema=_object(
            {
                "sandbox_id": SANDBOX_ID,
                "code": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_CODE,
                    "description": f"Python code (at most {MAX_CODE} characters; write a "
                    "longer program to a file with file_write and run it with %run FILE).",
                },
                "timeout": TIMEOUT
                | {
                    "description": f"Seconds the code may run (at most {MAX_TIMEOUT}; default "
                    f"{DEFAULT_TIMEOUT})."
                },
            },
            ("sandbox_id", "code"),
        ),
        run=_run_code,
    ),
    SandboxTool(
        name="command_run",
        title="Run a shell command",
        description=(
            "Run a shell command (by /bin/sh -c) in the sandbox to its end, as the sandbox's "
            "user, in /workspace unless `cwd` says otherwise. Returns its exit code, stdout "
            "and stderr; a non-zero exit code is an answer, not a failure of the tool. Past "
            "`timeout` seconds it is killed with everything it started."
        ),
        schema=_object(
            {
                "sandbox_id": SANDBOX_ID,
                "command": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_COMMAND,
                    "pattern": "^[^\\x00]*$",
                    "description": f"The command line, e.g. `ls -la && python3 job.py` (at "
                    f"most {MAX_COMMAND} characters).",
                },
                "timeout": TIMEOUT
                | {
                    "description": f"Seconds the command may run (at most {MAX_TIMEOUT}; "
                    f"default {DEFAULT_TIMEOUT})."
                },
                "cwd": PATH | {"description": "The directory to run it in (default /workspace)."},
                "stdin": {
                    "type": "string",
                    "maxLength": MAX_FILE_TEXT,
                    "description": f"Text given as its whole standard input (at most "
                    f"{MAX_FILE_TEXT} characters).",
                },
            },
            ("sandbox_id", "command"),
        ),
        run=_command_run,
    ),
    SandboxTool(
        name="file_read",
        title="Read a file",
        description=(
            f"Read a file in the sandbox: UTF-8 text (at most {MAX_TEXT} characters) as text, "
            f"a PNG, JPEG, GIF or WebP image (by its extension; at most {MAX_FILE_READ} bytes) "
            "as an image. Read parts of a larger file, or a binary one, with command_run "
            "(head, sed -n, xxd)."
        ),
        schema=_object({"sandbox_id": SANDBOX_ID, "path": PATH}, ("sandbox_id", "path")),
        run=_file_read,
        read_only=True,
    ),
    SandboxTool(
        name="file_write",
        title="Write a file",
        description=(
            "Write text to a file in the sandbox, whole, as UTF-8: missing directories are "
            "made and a file already there is replaced. Relative paths start at /workspace."
        ),
        schema=_object(
            {
                "sandbox_id": SANDBOX_ID,
                "path": PATH,
                "content": {
                    "type": "string",
                    "maxLength": MAX_FILE_TEXT,
                    "description": f"The file's whole text (at most {MAX_FILE_TEXT} "
                    "characters; make a larger file in the sandbox with run_code or "
                    "command_run).",
                },
            },
            ("sandbox_id", "path", "content"),
        ),
        run=_file_write,
        destructive=True,
    ),
    SandboxTool(
        name="file_list",
        title="List a directory",
        description=(
            f"List a directory in the sandbox: each entry's type, size in bytes, time of "
            f"change and name (at most {MAX_LISTED} entries)."
        ),
        schema=_object(
            {
                "sandbox_id": SANDBOX_ID,
                "path": PATH | {"description": "The directory (default /workspace)."},
            },
            ("sandbox_id",),
        ),
        run=_file_list,
        read_only=True,
    ),
)

TOOLS_BY_NAME: dict[str, SandboxTool] = {tool.name: tool for tool in TOOLS}

"""The code interpreter's ``POST /execute``: code run in the sandbox's live interpreter (the
core's code runs, sandbox/operations/code_runs.py: the same kernel a notebook attached to the sandbox
uses), answered as E2B's NDJSON stream, one JSON object a line as it comes:

``{"type": "stdout"|"stderr", "text", "timestamp"}``, ``{"type": "result", "is_main_result",
"text", "png", ...}`` (a display or the cell's result as a MIME bundle, by E2B's names),
``{"type": "error", "name", "value", "traceback"}``, ``{"type": "number_of_executions",
"execution_count"}``, ``{"type": "end_of_execution"}``.

The sandbox has one interpreter, Python: another language or context, or environment
variables for one run, are refused (E2BUnsupportedError) rather than run differently.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncGenerator
from typing import Any

from jupyter_sandbox.e2b_api.errors import E2BUnsupportedError
from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.code_runs import CodeRequest, stream_code
from jupyter_sandbox.sandbox.operations.commands import MAX_TIMEOUT

# E2B's name of each MIME type of a bundle; others go under "extra".
MIME_NAMES = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}
FIELDS = ("code", "context_id", "language", "env_vars")
DEFAULT_CONTEXT = "default"
STREAMS = ("stdout", "stderr")


def code_request(body: Any) -> CodeRequest:
    """The run an /execute body asks for; what cannot be honoured is E2BUnsupportedError."""
    if not isinstance(body, dict):
        raise InvalidRequestError('the body must be a JSON object: {"code": "1 + 1"}')
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise InvalidRequestError(f"unknown field(s) {', '.join(unknown)}; known: {FIELDS}")
    language = body.get("language")
    if language not in (None, "python", "py"):
        raise E2BUnsupportedError(
            f"language {language!r} is not available: the sandbox's interpreter is Python"
        )
    context = body.get("context_id")
    if context not in (None, DEFAULT_CONTEXT):
        raise E2BUnsupportedError(
            "a sandbox has one interpreter context: leave context out (its id is 'default')"
        )
    if body.get("env_vars"):
        raise E2BUnsupportedError(
            "environment variables for one run (envs=) are not supported: set os.environ in "
            "the code, or give envs when creating the sandbox"
        )
    # The client's own timeout ends a run by closing the connection, which interrupts it.
    return CodeRequest.from_json({"code": body.get("code"), "timeout": MAX_TIMEOUT, "stream": True})


async def execute_lines(
    manager: SandboxManager, owner: str, sandbox_id: str, request: CodeRequest
) -> AsyncGenerator[dict[str, Any], None]:
    """E2B's messages for the run of ``request``, as they come. A SandboxError before the
    first is raised (an ordinary error answer); after it, it becomes an error line."""
    events = stream_code(manager, owner, sandbox_id, request)
    lines = StreamLines()
    try:
        async for name, data in events:
            if name in STREAMS:
                for stream, text in lines.add(name, str(data.get("text", ""))):
                    yield {"type": stream, "text": text, "timestamp": _now()}
                continue
            for stream, text in lines.flush():
                yield {"type": stream, "text": text, "timestamp": _now()}
            for line in _lines(name, data):
                yield line
    finally:
        await events.aclose()


class StreamLines:
    """Output cut into whole lines, as E2B's ``on_stdout`` and ``on_stderr`` get them: a
    kernel may publish ``print``'s text and its newline apart. What is left of a line goes when
    the other stream or anything else is published, and at the end, so nothing is held back
    past the next event and the order of outputs is kept."""

    def __init__(self) -> None:
        self._partial: dict[str, str] = {}

    def add(self, stream: str, text: str) -> list[tuple[str, str]]:
        """The pieces to send now for ``text`` of ``stream``: the other stream's rest, then
        this stream's whole lines."""
        out = self.flush(keep=stream)
        pending = self._partial.pop(stream, "") + text
        *whole, rest = pending.split("\n")
        if rest:
            self._partial[stream] = rest
        return out + [(stream, line + "\n") for line in whole]

    def flush(self, keep: str = "") -> list[tuple[str, str]]:
        left = [(stream, rest) for stream, rest in self._partial.items() if stream != keep]
        for stream, _ in left:
            del self._partial[stream]
        return left


def _lines(name: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    if name == "display":
        if data.get("type") == "update_display_data":
            return []  # E2B's stream has no updates of an earlier display
        return [result_of(data.get("data") or {}, data.get("type") == "execute_result")]
    if name == "result":
        lines: list[dict[str, Any]] = []
        error = data.get("error")
        if error:
            lines.append(
                {
                    "type": "error",
                    "name": str(error.get("ename", "")),
                    "value": str(error.get("evalue", "")),
                    "traceback": "\n".join(map(str, error.get("traceback", []))),
                }
            )
        if data.get("execution_count") is not None:
            lines.append(
                {"type": "number_of_executions", "execution_count": data["execution_count"]}
            )
        return [*lines, {"type": "end_of_execution"}]
    if name == "error":  # the run failed after output was sent (sandbox stopped, too much)
        return [
            {
                "type": "error",
                "name": str(data.get("code", "SandboxError")),
                "value": str(data.get("message", "")),
                "traceback": "",
            }
        ]
    return []  # clear_output: E2B's stream has no way to say it


def result_of(bundle: dict[str, Any], main: bool) -> dict[str, Any]:
    """E2B's result for a MIME bundle: each type by E2B's name, the others under extra."""
    result: dict[str, Any] = {"type": "result", "is_main_result": main}
    extra = {}
    for mime, value in bundle.items():
        name = MIME_NAMES.get(mime)
        if name is None:
            extra[mime] = value
        else:
            result[name] = value
    if extra:
        result["extra"] = extra
    return result


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()

"""What files.py and file_watch.py both check: a path a caller names, and the error the
program in the sandbox reports. Kept apart so that each imports it, and neither the other.
"""

from __future__ import annotations

from typing import Any

from jupyter_sandbox.protocol import strict_json
from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    SandboxFileError,
    SandboxFileExistsError,
    SandboxFileNotFoundError,
    SandboxFilePermissionError,
    SandboxFileTypeError,
)
from jupyter_sandbox.sandbox.backends.base import WORKSPACE_DIR

MAX_PATH_BYTES = 4096
MAX_ERROR_REPORT_BYTES = 64 * 1024  # the program's error report: a code and a message


def check_path(path: Any) -> str:
    """``path`` if it can name a file in a sandbox; InvalidRequestError saying why otherwise."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise InvalidRequestError(
            "path must be a non-empty string without NUL: a path in the sandbox, relative to "
            f"{WORKSPACE_DIR} or absolute"
        )
    try:
        encoded = path.encode()
    except UnicodeEncodeError:
        raise InvalidRequestError("path must be valid UTF-8") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise InvalidRequestError(f"path must be at most {MAX_PATH_BYTES} bytes")
    return path


def reported_error(stderr: bytes, sandbox_id: str) -> SandboxFileError:
    """The error the program in the sandbox reported (its stderr is the sandbox's to write, so
    it is only ever shown as text, never trusted for more than picking the error class)."""
    try:  # MalformedJSONError is a ValueError
        report = strict_json.loads(stderr, max_bytes=MAX_ERROR_REPORT_BYTES)
        code, message = str(report["error"]), str(report["message"])[:1000]
    except (ValueError, KeyError, TypeError):
        code, message = "", stderr.decode(errors="replace").strip()[:500]
    message = f"sandbox {sandbox_id}: {message}"
    if code == "not_found":
        return SandboxFileNotFoundError(message)
    if code == "file_exists":
        return SandboxFileExistsError(message)
    if code in ("is_a_directory", "not_a_directory", "not_a_file"):
        return SandboxFileTypeError(message)
    if code == "permission_denied":
        return SandboxFilePermissionError(message)
    return SandboxFileError(message)

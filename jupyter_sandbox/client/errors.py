"""The errors the client raises: the core's own SandboxError classes, chosen by the ``code`` of
the server's JSON answer ``{"code", "message"}``, so that agent code catches the same
``SandboxNotFoundError`` or ``SandboxConflictError`` the server raised, with its message.

transport.py calls :func:`error_from_answer` for every error answer and raises
:class:`SandboxConnectionError` when the server cannot be reached; agent code imports the
classes from ``jupyter_sandbox.client`` (or this module).

The classes live in ``jupyter_sandbox/protocol/errors.py`` and, for snapshots,
``jupyter_sandbox/protocol/snapshot_errors.py``, stdlib-only modules; the core
package loads the rest of itself (the manager: jupyter_client, pyzmq, traitlets) only when one
of its names is used, so importing the errors alone costs an agent's machine nothing else
(tests/client/test_init.py checks).
"""

from __future__ import annotations

from typing import Any

from jupyter_sandbox.protocol import errors as core
from jupyter_sandbox.protocol import snapshot_errors as snapshot_errors
from jupyter_sandbox.protocol.errors import (
    CommandNotFoundError,
    ContextBusyError,
    CredentialNotFoundError,
    EngineTimeoutError,
    EngineUnavailableError,
    FileTooLargeError,
    HostCapError,
    HostFilesTimeoutError,
    ImageBuildError,
    ImageNotFoundError,
    InvalidRequestError,
    InvalidSettingError,
    KernelNotFoundError,
    NetworkRequestNotFoundError,
    NetworkSetupError,
    OutputTooLargeError,
    PortNotListeningError,
    PortOpenerError,
    ProcessNotFoundError,
    QuotaExceededError,
    RequestTooLargeError,
    RuntimeUnavailableError,
    SandboxConflictError,
    SandboxDiedError,
    SandboxError,
    SandboxFileError,
    SandboxFileExistsError,
    SandboxFileNotFoundError,
    SandboxFilePermissionError,
    SandboxFileTypeError,
    SandboxNotFoundError,
    SandboxStartError,
    SandboxStartTimeoutError,
    SocketReplacedError,
    TooManyCommandsError,
    TooManyKernelsError,
    TooManyStreamsError,
    TooManyTerminalsError,
    TooManyWatchesError,
)
from jupyter_sandbox.protocol.snapshot_errors import (
    ArchiveTooLargeError,
    MemorySnapshotRefusedError,
    MemorySnapshotUnsupportedError,
    SnapshotFailedError,
    SnapshotIntegrityError,
    SnapshotNotFoundError,
    SnapshotStorageFullError,
    SnapshotTooLargeError,
    UnsafeArchiveError,
)


def error_classes() -> dict[str, type[SandboxError]]:
    """Every SandboxError class the core defines (its errors and its snapshots'), by name."""
    return {
        name: value
        for module in (core, snapshot_errors)
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, SandboxError)
        and value.__module__ == module.__name__
    }


# The class for each code the server may answer with, built from the classes themselves: each
# one names its own code (a class added to errors.py is known here without an edit).
ERRORS_BY_CODE: dict[str, type[SandboxError]] = {
    cls.code: cls for cls in error_classes().values() if "code" in vars(cls)
}


class SandboxConnectionError(SandboxError, ConnectionError):
    """The client could not reach the server, or the connection broke or timed out before
    the answer was whole; the message names the URL. Raised by the client only."""

    code = "connection_failed"
    http_status = 0  # no HTTP answer


def error_from_answer(status: int | None, answer: Any, request: str) -> SandboxError:
    """The error for an HTTP error answer: the class of its ``code``, with the server's
    ``message`` and the class's fields (UnsafeArchiveError's ``member`` and ``rule``; empty
    when the answer lacks them). An unknown code gives a SandboxError carrying that code; an
    answer that is not one of the API's (a proxy's page, Jupyter's own refusal) one naming
    ``request`` ("METHOD URL") and its status. ``http_status`` is set to the answer's status
    (``status`` None: an error event of a stream, whose answer was a 200: the class's own)."""
    code = answer.get("code") if isinstance(answer, dict) else None
    message = answer.get("message") if isinstance(answer, dict) else None
    if isinstance(code, str) and isinstance(message, str):
        cls = ERRORS_BY_CODE.get(code, SandboxError)
        # Made from the server's message as it is (UnsafeArchiveError's constructor takes the
        # parts the message is composed of), then given the fields the answer carries.
        error = cls.from_message(message)
        error.code = code  # the server's, also for a code this client does not know
        for name in cls.fields:
            value = answer.get(name)
            setattr(error, name, value if isinstance(value, str) else "")
    else:
        error = SandboxError(_unexplained(status or 0, message or answer, request))
    if status is not None:
        error.http_status = status
    return error


def _unexplained(status: int, detail: Any, request: str) -> str:
    text = detail if isinstance(detail, str) else ""
    text = " ".join(text.split())[:300] or "no explanation in the answer"
    if status in (401, 403):
        return (
            f"{request} was refused ({status}: {text}): check the token (SandboxClient's "
            "token, or JUPYTER_TOKEN) and that this user may use the server's sandboxes"
        )
    if status == 404:
        return (
            f"{request} answered 404 ({text}): check the URL (the Jupyter Server's, with its "
            "base URL, e.g. https://hub.example.com/user/NAME/) and that the server has "
            "the jupyter_sandbox extension enabled"
        )
    return f"{request} answered {status}: {text}"


# The errors the client raises, by name: the core's classes (tests/client/test_errors.py checks
# that errors.py has no others) and this module's own. The package exports this list as it is;
# error_from_answer and ERRORS_BY_CODE are the client modules' helpers, not agent code's.
__all__ = [
    "ArchiveTooLargeError",
    "CommandNotFoundError",
    "ContextBusyError",
    "CredentialNotFoundError",
    "EngineTimeoutError",
    "EngineUnavailableError",
    "FileTooLargeError",
    "HostCapError",
    "HostFilesTimeoutError",
    "ImageBuildError",
    "ImageNotFoundError",
    "InvalidRequestError",
    "InvalidSettingError",
    "KernelNotFoundError",
    "MemorySnapshotRefusedError",
    "MemorySnapshotUnsupportedError",
    "NetworkRequestNotFoundError",
    "NetworkSetupError",
    "OutputTooLargeError",
    "PortNotListeningError",
    "PortOpenerError",
    "ProcessNotFoundError",
    "QuotaExceededError",
    "RequestTooLargeError",
    "RuntimeUnavailableError",
    "SandboxConflictError",
    "SandboxConnectionError",
    "SandboxDiedError",
    "SandboxError",
    "SandboxFileError",
    "SandboxFileExistsError",
    "SandboxFileNotFoundError",
    "SandboxFilePermissionError",
    "SandboxFileTypeError",
    "SandboxNotFoundError",
    "SandboxStartError",
    "SandboxStartTimeoutError",
    "SnapshotFailedError",
    "SnapshotIntegrityError",
    "SnapshotNotFoundError",
    "SnapshotStorageFullError",
    "SnapshotTooLargeError",
    "SocketReplacedError",
    "TooManyCommandsError",
    "TooManyKernelsError",
    "TooManyStreamsError",
    "TooManyTerminalsError",
    "TooManyWatchesError",
    "UnsafeArchiveError",
]

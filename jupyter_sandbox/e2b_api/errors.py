"""E2B's error answers, and the errors only the E2B API raises.

Every error is a SandboxError (the project's one root); this module says how each is shown to
an E2B client, which tells errors apart by HTTP status and, on envd's Connect services, by
Connect code (the SDK maps 401/``unauthenticated`` to its AuthenticationException, 404/
``not_found`` to NotFoundException, 502/``unavailable`` naming a sandbox "not found" to
SandboxNotRunningException, 400/``invalid_argument`` to InvalidArgumentException):

* control plane: E2B's ``Error`` model, ``{"code": HTTP_STATUS, "message": ...}``;
* envd's unary Connect calls: ``{"code": CONNECT_CODE, "message": ...}`` with the status the
  Connect protocol gives that code; its streams end with ``{"error": {...}}`` (connect_protocol);
* the data plane's plain HTTP routes (``/files``, ``/health``, ``/execute``): the control
  plane's form; a sandbox that is gone is a 502 saying it "was not found", as E2B's proxy says.
"""

from __future__ import annotations

from typing import Any

from tornado import web

from jupyter_sandbox.protocol.errors import SandboxError, SandboxNotFoundError

# Connect's codes for the statuses our errors carry (connectrpc.com/docs/protocol#error-codes).
CONNECT_CODES = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "failed_precondition",
    413: "resource_exhausted",
    429: "resource_exhausted",
    501: "unimplemented",
    503: "unavailable",
    504: "deadline_exceeded",
}
# And back: the HTTP status of a unary Connect error answer, as the protocol sets it.
CONNECT_STATUSES = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "already_exists": 409,
    "failed_precondition": 412,
    "resource_exhausted": 429,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "deadline_exceeded": 504,
}


class E2BAuthenticationError(SandboxError):
    """An E2B API key or sandbox access token that this server did not issue or accept."""

    code = "e2b_unauthenticated"
    http_status = 401


class E2BUnsupportedError(SandboxError):
    """An E2B feature or option jupyter-sandbox does not honour (docs/how-to/e2b.md lists
    them): refused, never silently answered differently."""

    code = "e2b_unsupported"
    http_status = 400


class E2BAlreadyExistsError(SandboxError):
    """What envd's MakeDir answers for a directory that is there already."""

    code = "e2b_already_exists"
    http_status = 409
    connect_code = "already_exists"


class E2BSandboxGoneError(SandboxError):
    """A data-plane request for a sandbox that is not (or no longer) there: E2B's proxy
    answers 502 with "was not found", which the SDK reads as the sandbox not running."""

    code = "e2b_sandbox_gone"
    http_status = 502


def gone(sandbox_id: str) -> E2BSandboxGoneError:
    return E2BSandboxGoneError(
        f"sandbox {sandbox_id} was not found: it was killed or reached its timeout; create "
        "another (Sandbox.create())"
    )


def as_sandbox_error(exc: BaseException | None, status: int) -> SandboxError:
    """``exc`` as a SandboxError: tornado's and Jupyter's own refusals (a body tornado could
    not parse, a 403 of the authorizer) keep their status and reason; anything else is a 500
    whose details stay in the server's log."""
    if isinstance(exc, SandboxError):
        return exc
    if isinstance(exc, web.HTTPError):
        error = SandboxError(exc.log_message or exc.reason or f"HTTP {exc.status_code}")
        error.http_status = exc.status_code
        return error
    error = SandboxError("the request failed on the server; its log says why")
    error.http_status = status if status >= 400 else 500
    return error


def data_plane_error(exc: SandboxError, sandbox_id: str) -> SandboxError:
    """What a data-plane request answers for ``exc``: an unknown sandbox is "gone" (502)."""
    if isinstance(exc, SandboxNotFoundError):
        return gone(sandbox_id)
    return exc


def api_error(exc: SandboxError) -> tuple[int, dict[str, Any]]:
    """E2B's ``Error`` model for ``exc``: (status, body)."""
    return exc.http_status, {"code": exc.http_status, "message": exc.message}


def connect_code(exc: SandboxError) -> str:
    """The Connect code of ``exc``."""
    explicit = getattr(exc, "connect_code", None)
    if isinstance(explicit, str):
        return explicit
    if exc.http_status == 502:
        return "unavailable"
    return CONNECT_CODES.get(exc.http_status, "internal")


def connect_error(exc: SandboxError) -> tuple[int, dict[str, Any]]:
    """A unary Connect call's error answer for ``exc``: (status, body)."""
    code = connect_code(exc)
    return CONNECT_STATUSES.get(code, 500), {"code": code, "message": exc.message}

"""The checks every request body goes through, wherever it arrives: a JSON object, its fields
known, its flags booleans, its time limits numbers of seconds in range.

The core (sandbox/operations/commands.py's CommandRequest, sandbox/operations/code_runs.py's
CodeRequest) and the server (server_extension/requests.py and the REST handlers) read requests
with these, so that a field is refused in the same words whichever front end sent it. Each
refusal is an InvalidRequestError (HTTP 400) that names the field and says what it takes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from jupyter_sandbox.protocol.errors import InvalidRequestError

# What ``"stream": true`` means, for the error that refuses another value (flag_of).
STREAM = (
    "send the output as it comes, as Server-Sent Events) or false (the default: all of it with "
    "the result"
)


def json_object(body: bytes, *, allow_empty: bool = False) -> dict[str, Any]:
    """The body as a JSON object, or a 400 that says what is wrong with it."""
    if not body.strip() and allow_empty:
        return {}
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequestError(
            f"the request body must be a JSON object, not {type(data).__name__}"
        )
    return data


def request_object(body: Any, fields: Iterable[str], takes: str, example: str) -> dict[str, Any]:
    """``body`` if it is a JSON object with no field but ``fields``; else an error saying what
    the request ``takes`` (e.g. "a run takes code, timeout and stream") with an ``example``."""
    if not isinstance(body, dict):
        raise InvalidRequestError(f"the body must be a JSON object, e.g. {example}")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise InvalidRequestError(f"unknown field(s) {', '.join(unknown)}: {takes}, e.g. {example}")
    return body


def flag_of(value: Any, name: str, meaning: str) -> bool:
    """``value`` if it is a boolean; else an error naming the field and what true means."""
    if isinstance(value, bool):
        return value
    raise InvalidRequestError(f"{name} must be true ({meaning}), not {value!r:.100}")


def seconds_of(value: Any, most: float, *, bound: str = "", advice: str = "") -> float:
    """A ``timeout`` field's ``value`` as seconds if it is a number in (0, ``most``]; else an
    error saying so, ``bound`` after the maximum (" (366 days)") and ``advice`` at its end."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= most:
        return float(value)
    raise InvalidRequestError(
        f"timeout must be a number of seconds above 0 and at most {most:g}{bound}, not "
        f"{value!r}{advice}"
    )

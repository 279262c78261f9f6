"""The checks every request body goes through, wherever it arrives: a JSON object, its fields
known, its flags booleans, its time limits numbers of seconds in range.

The core (sandbox/operations/commands.py's CommandRequest, sandbox/operations/code_runs.py's
CodeRequest) and the server (server_extension/requests.py and the REST handlers) read requests
with these, so that a field is refused in the same words whichever front end sent it. Each
refusal is an InvalidRequestError (HTTP 400) that names the field and says what it takes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jupyter_sandbox.protocol import strict_json
from jupyter_sandbox.protocol.errors import InvalidRequestError

# Bytes of a JSON request body, unless its route takes more (a command's stdin, a run's code):
# a sandbox's settings, a policy, a file's move, many times over. A body within it is parsed at
# once by json's C scanner, which holds the event loop every owner shares while it runs.
MAX_JSON_BODY = 1024**2

# What ``"stream": true`` means, for the error that refuses another value (flag_of).
STREAM = (
    "send the output as it comes, as Server-Sent Events) or false (the default: all of it with "
    "the result"
)


def json_object(
    body: bytes,
    *,
    allow_empty: bool = False,
    what: str = "the request body",
    max_bytes: int = MAX_JSON_BODY,
    in_steps: bool = False,
) -> dict[str, Any]:
    """The body as a JSON object, read strictly (protocol/strict_json.py: UTF-8, nesting within
    the stack, finite numbers, each key once), or a 400 that says what is wrong with it.
    ``in_steps``: with json's Python scanner, for a large body parsed in a thread
    (strict_json.loads_in_steps)."""
    if not body.strip() and allow_empty:
        return {}
    loads = strict_json.loads_in_steps if in_steps else strict_json.loads
    try:
        data = loads(body, max_bytes=max_bytes)
    except strict_json.MalformedJSONError as exc:
        raise InvalidRequestError(f"{what} is not valid JSON: {exc.message}") from None
    if not isinstance(data, dict):
        raise InvalidRequestError(f"{what} must be a JSON object, not {type(data).__name__}")
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


@dataclass(frozen=True)
class StringMapRules:
    """What a map of names to strings the server keeps may hold: a sandbox's metadata (saved in
    its state file, read on the event loop for every listing, quota count and culler pass) or its
    environment (in its container's spec, and inherited by every command run in it). The same
    rules for every front end that takes one (the REST API, the E2B API)."""

    key: re.Pattern[str]  # matched whole
    key_rule: str  # what the key pattern says, for the error
    entries: int  # at most this many
    value_most: int  # characters (chars_of_values) or UTF-8 bytes of one value
    total_bytes: int  # UTF-8 bytes of every key and value together
    example: str
    advice: str  # where larger data goes instead
    chars_of_values: bool = False  # measure a value in characters rather than bytes
    text_only: bool = False  # no NUL, and valid Unicode (an environment passed to a program)


# Characters of the name of a sandbox's own environment variable, as container_spec.py's
# MAX_ENV_NAME (which checks it again, with the server's own variables, at the container's start).
MAX_ENV_NAME = 128
# Metadata: the caller's own labels on a sandbox (which agent, task, user of a service made it),
# shown with it and matched by GET /api/sandboxes?metadata=KEY=VALUE, as E2B and OpenSandbox
# do. Its total lets every key and value be at their longest in plain ASCII; it binds only text
# of wider characters, so that the state file stays small enough to read at once.
METADATA_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")
METADATA_EXAMPLE = '{"agent": "planner", "task": "t-42"}'
METADATA = StringMapRules(
    key=METADATA_KEY,
    key_rule="1-128 letters, digits or . _ / - and begin with a letter or digit",
    entries=64,
    value_most=1024,
    total_bytes=64 * (128 + 1024),
    example=METADATA_EXAMPLE,
    advice="keep larger data in a file in the sandbox",
    chars_of_values=True,
)
# A sandbox's own environment, added to every program started in it: its kernel, and each
# command, whose own variables (sandbox/operations/commands.py, up to 1 MiB) and arguments come
# on top. Linux takes at most a quarter of the stack limit (8 MiB in the sandbox: 2 MiB) for a
# program's arguments and environment together, and runc refuses an exec request past 4 MiB: a
# larger environment would fail only when the container starts, or make every command fail.
ENVIRONMENT = StringMapRules(
    key=re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{MAX_ENV_NAME - 1}}}"),
    key_rule=f"a variable name: 1-{MAX_ENV_NAME} letters, digits and _, not starting with a digit",
    entries=256,
    value_most=32 * 1024,
    total_bytes=256 * 1024,
    example='{"MY_SETTING": "1"}',
    advice="pass larger data in a file (PUT /api/sandboxes/{id}/files/content)",
    text_only=True,
)


def string_map(value: Any, name: str, rules: StringMapRules) -> dict[str, str]:
    """``value`` (the field ``name``, e.g. "metadata" or "envVars") if it is a JSON object of
    strings within ``rules``; else an error that names the field and the limit it passed."""
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidRequestError(
            f"{name} must be an object of string values, e.g. {rules.example}"
        )
    if len(value) > rules.entries:
        raise InvalidRequestError(
            f"{name} may hold at most {rules.entries} entries, not {len(value)}"
        )
    total = 0
    for key, text in value.items():
        if not rules.key.fullmatch(key):
            raise InvalidRequestError(
                f"{name} key {key[:200]!r} must be {rules.key_rule}, e.g. {rules.example}"
            )
        try:
            data = text.encode()
        except UnicodeEncodeError:  # a lone surrogate, which JSON's \ud800 can write
            if rules.text_only:
                raise InvalidRequestError(
                    f"{name} {key}'s value is not valid Unicode text (it has a lone surrogate)"
                ) from None
            data = text.encode(errors="surrogatepass")
        if rules.text_only and "\0" in text:
            raise InvalidRequestError(f"{name} {key}'s value may not hold a NUL character")
        size, unit = (len(text), "characters") if rules.chars_of_values else (len(data), "bytes")
        if size > rules.value_most:
            raise InvalidRequestError(
                f"{name} value of {key!r} has {size} {unit}; at most {rules.value_most}: "
                f"{rules.advice}"
            )
        total += len(key) + len(data)
    if total > rules.total_bytes:
        raise InvalidRequestError(
            f"{name} holds {total} bytes of names and values (UTF-8); at most "
            f"{rules.total_bytes} together: {rules.advice}"
        )
    return dict(value)

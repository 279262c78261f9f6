"""JSON that a sandbox wrote, read on the host.

Everything a sandbox prints is hostile here, and ``json.loads`` alone lets through more than its
callers expect: nesting past the interpreter's stack raises RecursionError (not ValueError, so a
caller's ``except ValueError`` misses it and it becomes a 500); ``NaN``, ``Infinity`` and a number
too large for a float (``1e999``) become non-finite floats, which ``int()`` turns into
OverflowError and ``json.dumps`` writes as text no JSON reader takes; bytes are decoded as UTF-16
or UTF-32 when they look like it; a key given twice silently keeps the last. :func:`loads` refuses
all of these, after bounding the size, with one error (a ValueError too, so the callers' existing
``except ValueError`` clauses keep working); callers turn it into their own error that names the
sandbox, and still check every type and range of what they take.
"""

from __future__ import annotations

import json
import math
from typing import Any

from jupyter_sandbox.protocol.errors import SandboxError


class MalformedJSONError(SandboxError, ValueError):
    """What a sandbox wrote is not one bounded, strict JSON text (the message says how)."""

    code = "malformed_json"


def loads(raw: bytes, *, max_bytes: int) -> Any:
    """The one JSON value in ``raw`` (UTF-8, at most ``max_bytes``), or MalformedJSONError.

    Refused: more than ``max_bytes``; bytes that are not UTF-8; nesting deeper than the
    interpreter's stack; ``NaN``, ``Infinity`` and numbers no float holds; an object that names
    a key twice; anything ``json.loads`` refuses."""
    if len(raw) > max_bytes:
        raise MalformedJSONError(f"{len(raw)} bytes of JSON, more than the {max_bytes} allowed")
    try:
        return _STRICT.decode(raw.decode("utf-8"))
    except MalformedJSONError:
        raise
    except RecursionError:  # the C scanner's recursion guard: nesting past the stack
        raise MalformedJSONError("JSON nested too deeply") from None
    except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError, int digits past 4300
        raise MalformedJSONError(f"not JSON: {str(exc)[:200]}") from None


def _refuse_constant(name: str) -> Any:
    raise MalformedJSONError(f"{name} is not a JSON number")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e999 parses as inf
        raise MalformedJSONError(f"the number {literal[:40]} is too large")
    return value


def _object_without_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise MalformedJSONError("a JSON object names a key twice")
    return value


# One decoder for every call: json.loads with hooks builds a decoder and its scanner each time,
# which the relay would pay for every message header a sandbox sends.
_STRICT = json.JSONDecoder(
    parse_constant=_refuse_constant,
    parse_float=_finite_float,
    object_pairs_hook=_object_without_repeats,
)

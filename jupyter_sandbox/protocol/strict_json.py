"""JSON from outside the server, read strictly: what a sandbox wrote and what a user sent.

Both are hostile on the host, and ``json.loads`` alone lets through more than its callers
expect: nesting past the interpreter's stack raises RecursionError (not ValueError, so a caller's
``except ValueError`` misses it and it becomes a 500); ``NaN``, ``Infinity`` and a number too
large for a float (``1e999``) become non-finite floats, which ``int()`` turns into OverflowError
and ``json.dumps`` writes as text no JSON reader takes; bytes are decoded as UTF-16 or UTF-32
when they look like it; a key given twice silently keeps the last (``{"command": "ls",
"command": "rm -r x"}`` runs the second). :func:`loads` refuses all of these, after bounding the
size, with one error (a ValueError too, so the callers' existing ``except ValueError`` clauses
keep working); callers turn it into their own error, one that names the sandbox or, for a
request, an InvalidRequestError (400), and still check every type and range of what they take.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import math
from collections.abc import Callable
from typing import Any

from jupyter_sandbox.protocol.errors import SandboxError

# Values (strings, numbers, arrays, objects) in a text loads_in_steps reads: a large request
# carries its bytes in a few long strings; settings, policies and lists of arguments are far
# fewer values than this.
MAX_VALUES_IN_STEPS = 100_000


class MalformedJSONError(SandboxError, ValueError):
    """What was read is not one bounded, strict JSON text (the message says how)."""

    code = "malformed_json"


def loads(raw: bytes, *, max_bytes: int) -> Any:
    """The one JSON value in ``raw`` (UTF-8, at most ``max_bytes``), or MalformedJSONError.

    Refused: more than ``max_bytes``; bytes that are not UTF-8; nesting deeper than the
    interpreter's stack; ``NaN``, ``Infinity`` and numbers no float holds; an object that names
    a key twice; anything ``json.loads`` refuses."""
    return _decode(_STRICT, raw, max_bytes)


def loads_in_steps(raw: bytes, *, max_bytes: int, max_values: int = MAX_VALUES_IN_STEPS) -> Any:
    """:func:`loads` with json's pure-Python scanner, for a large text parsed in a thread; and
    at most ``max_values`` strings, numbers, arrays and objects in it.

    json's C scanner holds the interpreter's lock from a text's first byte to its last, so a
    thread running it stops the event loop as surely as the loop running it itself; the
    Python scanner gives the lock up between its steps, and the loop keeps its turns. It is
    slower on many small values, as fast on long strings (its string scanner matches runs of
    plain characters with one regular expression), which is what a large request carries: its
    values are counted as they are made, and a text of more is refused at the first one past
    the bound, before the garbage collector has millions of objects to walk (a walk that holds
    the lock too)."""
    return _decode(_counting_decoder(max_values), raw, max_bytes)


def _decode(decoder: json.JSONDecoder, raw: bytes, max_bytes: int) -> Any:
    if len(raw) > max_bytes:
        raise MalformedJSONError(f"{len(raw)} bytes of JSON, more than the {max_bytes} allowed")
    try:
        return decoder.decode(raw.decode("utf-8"))
    except MalformedJSONError:
        raise
    except RecursionError:  # the scanners' recursion guard: nesting past the stack
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


class _ValueCount:
    """The values one text has made so far, and the most it may."""

    def __init__(self, most: int) -> None:
        self.most, self.made = most, 0

    def one(self) -> None:
        self.made += 1
        if self.made > self.most:
            raise MalformedJSONError(f"more than {self.most} values in one JSON text")


class _CountingMemo(dict[str, str]):
    """The Python scanner's memo of an object's keys (one entry a distinct key), through which
    it passes every key it reads: each is counted as a value."""

    def __init__(self, count: _ValueCount) -> None:
        super().__init__()
        self.count = count

    def setdefault(self, key: str, default: str = "", /) -> str:
        self.count.one()
        return super().setdefault(key, default)


def _counting_decoder(max_values: int) -> json.JSONDecoder:
    """A strict decoder with json's Python scanner that refuses its ``max_values``-th value
    and more, keys included (one decoder a text: the count is that text's)."""
    decoder = json.JSONDecoder(
        parse_constant=_refuse_constant,
        parse_float=_finite_float,
        object_pairs_hook=_object_without_repeats,
    )
    count = _ValueCount(max_values)

    def counted(parse: Callable[..., Any]) -> Callable[..., Any]:
        def parse_one(*args: Any) -> Any:
            count.one()
            return parse(*args)

        return parse_one

    # What the Python scanner (py_make_scanner) calls for each value it makes; true, false and
    # null are the interpreter's own singletons, which cost nothing to make.
    decoder.parse_string = counted(json.decoder.py_scanstring)  # type: ignore[attr-defined]
    decoder.parse_array = counted(decoder.parse_array)  # type: ignore[attr-defined]
    decoder.parse_object = counted(decoder.parse_object)  # type: ignore[attr-defined]
    decoder.parse_int = counted(decoder.parse_int)
    decoder.parse_float = counted(decoder.parse_float)
    decoder.memo = _CountingMemo(count)  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    return decoder

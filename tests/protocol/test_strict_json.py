"""The host's strict reading of JSON a sandbox wrote (strict_json.py): every refusal is one
MalformedJSONError (a ValueError too) that says what was wrong, never RecursionError, a
non-finite float or a silently dropped key."""

from __future__ import annotations

import pytest

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.protocol.strict_json import MalformedJSONError, loads, loads_in_steps


def test_strict_json_is_read_as_json_reads_it() -> None:
    text = b'{"a": [1, 2.5, -3e2, true, null, "\\u00e9"], "b": {}}'
    assert loads(text, max_bytes=len(text)) == {
        "a": [1, 2.5, -300.0, True, None, "\u00e9"],
        "b": {},
    }


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"[" * 60_000, "nested too deeply"),  # json.loads raised RecursionError
        (b'{"a": ' * 30_000, "nested too deeply"),
        (b"NaN", "NaN is not a JSON number"),  # json.loads gave float('nan')
        (b"[Infinity]", "Infinity is not a JSON number"),
        (b'{"n": -Infinity}', "-Infinity is not a JSON number"),
        (b"1e999", "too large"),  # json.loads gave float('inf')
        (b'{"a": 1, "a": 2}', "names a key twice"),  # json.loads kept the last
        ('"\u00e9"'.encode("utf-16"), "not JSON"),  # json.loads took UTF-16 bytes
        (b'"\xff"', "not JSON"),
        (b"1" * 5000, "not JSON"),  # past int's 4300 digits
        (b"[1,]", "not JSON"),
        (b"", "not JSON"),
        (b" " * 101, "more than the 100 allowed"),
    ],
)
def test_what_json_loads_lets_through_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(MalformedJSONError, match=why) as refused:
        loads(raw, max_bytes=100 if len(raw) == 101 else 1024**2)
    assert isinstance(refused.value, SandboxError)
    assert isinstance(refused.value, ValueError)  # callers' except ValueError still catches it
    assert len(refused.value.message) < 300


def test_in_steps_a_text_is_read_alike_within_its_count_of_values() -> None:
    text = b'{"a": [1, 2.5, "x\\u00e9", {"b": null}, true], "c": "%s"}' % (b"y" * 100_000)
    assert loads_in_steps(text, max_bytes=len(text)) == loads(text, max_bytes=len(text))
    # 3 keys, 2 strings, 2 numbers, 2 objects, 1 array: 10 values (true and null uncounted)
    assert loads_in_steps(text, max_bytes=len(text), max_values=10)
    with pytest.raises(MalformedJSONError, match="more than 9 values"):
        loads_in_steps(text, max_bytes=len(text), max_values=9)
    keys = b"{" + b",".join(b'"k%d":null' % n for n in range(5000)) + b"}"
    with pytest.raises(MalformedJSONError, match="more than 1000 values"):
        loads_in_steps(keys, max_bytes=10**6, max_values=1000)
    with pytest.raises(MalformedJSONError, match="more than 1000 values"):
        loads_in_steps(b"[" + b"[]," * 5000 + b"[]]", max_bytes=10**6, max_values=1000)

"""The checks every request body goes through (protocol/requests.py), with no server: each
refusal names the field and says what it takes, in the same words for every front end."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.protocol.requests import (
    ENVIRONMENT,
    MAX_JSON_BODY,
    METADATA,
    STREAM,
    StringMapRules,
    flag_of,
    json_object,
    request_object,
    seconds_of,
    string_map,
)
from jupyter_sandbox.sandbox.operations.commands import timeout_of
from jupyter_sandbox.server_extension.requests import timeout_seconds


def test_a_body_is_a_json_object() -> None:
    assert json_object(b'{"a": 1}') == {"a": 1}
    assert json_object(b"  ", allow_empty=True) == {}
    with pytest.raises(InvalidRequestError, match="not valid JSON"):
        json_object(b"")
    with pytest.raises(InvalidRequestError, match="not valid JSON"):
        json_object(b"\xff")
    with pytest.raises(InvalidRequestError, match="must be a JSON object, not list"):
        json_object(b"[1]")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[" * 100_000, "nested too deeply"),
        (b'{"command": "ls", "command": "rm -r x"}', "names a key twice"),
        (b'{"timeout": NaN}', "NaN is not a JSON number"),
        (b'{"timeout": 1e999}', "too large"),
        ('{"a": 1}'.encode("utf-16"), "not JSON"),
        (b" " * (MAX_JSON_BODY + 1), "more than the"),
    ],
)
@pytest.mark.parametrize("in_steps", [False, True])
def test_a_body_is_read_strictly(body: bytes, says: str, in_steps: bool) -> None:
    """Each would have passed json.loads (as a RecursionError, a 500, for the first) and been
    taken with the last key, a non-finite number or a guessed encoding; the same with the
    Python scanner that large bodies are parsed with."""
    with pytest.raises(InvalidRequestError, match=says) as refused:
        json_object(body, what="a start", in_steps=in_steps)
    assert refused.value.message.startswith("a start is not valid JSON: ")


def test_a_large_body_is_read_alike_in_steps() -> None:
    body = b'{"stdin": "%s\\u00e9\\n", "env": {"A": "1"}, "n": [1, 2.5, true, null]}' % (
        b"x" * (2 * MAX_JSON_BODY)
    )
    assert json_object(body, max_bytes=3 * MAX_JSON_BODY, in_steps=True) == json_object(
        body, max_bytes=3 * MAX_JSON_BODY
    )


def test_a_request_names_its_unknown_fields_and_what_it_takes() -> None:
    body = {"code": "1"}
    assert request_object(body, ("code",), "a run takes code", "EX") is body
    with pytest.raises(InvalidRequestError) as refused:
        request_object({"code": "1", "z": 1, "b": 2}, ("code",), "a run takes code", "EX")
    assert refused.value.message == "unknown field(s) b, z: a run takes code, e.g. EX"
    with pytest.raises(InvalidRequestError) as refused:
        request_object(["code"], ("code",), "a run takes code", "EX")
    assert refused.value.message == "the body must be a JSON object, e.g. EX"


@pytest.mark.parametrize("value", [1, "true", None])
def test_a_flag_is_a_boolean(value: Any) -> None:
    assert flag_of(True, "stream", STREAM) is True
    with pytest.raises(InvalidRequestError) as refused:
        flag_of(value, "stream", STREAM)
    assert refused.value.message == f"stream must be true ({STREAM}), not {value!r}"


@pytest.mark.parametrize("value", [0, -1, 3601, True, "60", None, float("nan")])
def test_a_timeout_is_seconds_in_range(value: Any) -> None:
    assert seconds_of(3600, 3600) == 3600.0
    assert seconds_of(0.5, 3600) == 0.5
    with pytest.raises(InvalidRequestError) as refused:
        seconds_of(value, 3600, bound=" (an hour)", advice="; see X")
    assert refused.value.message == (
        f"timeout must be a number of seconds above 0 and at most 3600 (an hour), not "
        f"{value!r}; see X"
    )


def test_a_command_and_a_sandbox_say_their_own_bounds() -> None:
    with pytest.raises(InvalidRequestError) as command:
        timeout_of(0)
    assert command.value.message == (
        "timeout must be a number of seconds above 0 and at most 3600, not 0 (default 60)"
    )
    with pytest.raises(InvalidRequestError) as sandbox:
        timeout_seconds(0)
    assert sandbox.value.message == (
        "timeout must be a number of seconds above 0 and at most 3.16224e+07 (366 days), not "
        "0; leave it out for the server's time to live alone"
    )


# -- string_map: metadata and a sandbox's environment, as REST and E2B take them -------------


def test_a_string_map_within_its_bounds_is_taken_as_it_is() -> None:
    widest = {f"{n:02d}".ljust(128, "k"): "v" * 1024 for n in range(METADATA.entries)}
    assert string_map(widest, "metadata", METADATA) == widest
    env = {f"A{n}": "x" * ENVIRONMENT.value_most for n in range(7)}
    assert string_map(env, "envVars", ENVIRONMENT) == env
    assert string_map({}, "environment", ENVIRONMENT) == {}


@pytest.mark.parametrize(
    ("value", "rules", "says"),
    [
        (["a"], METADATA, "metadata must be an object of string values, e.g. {"),
        ({"a": 1}, METADATA, "metadata must be an object of string values"),
        ({f"k{n}": "" for n in range(65)}, METADATA, "at most 64 entries, not 65"),
        ({"a=b": ""}, METADATA, "metadata key 'a=b' must be 1-128 letters"),
        ({"k" * 129: ""}, METADATA, "must be 1-128 letters"),
        ({"a": "x" * 1025}, METADATA, "has 1025 characters; at most 1024"),
        ({f"k{n}": "\U0001f600" * 1024 for n in range(64)}, METADATA, "at most 73728 together"),
        ({"1A": ""}, ENVIRONMENT, "key '1A' must be a variable name"),
        ({"A" * 129: ""}, ENVIRONMENT, "must be a variable name: 1-128"),
        ({"A": "a\0b"}, ENVIRONMENT, "may not hold a NUL character"),
        ({"A": "\ud800"}, ENVIRONMENT, "not valid Unicode text"),
        ({"A": "\u00e9" * (16 * 1024 + 1)}, ENVIRONMENT, "has 32770 bytes; at most 32768"),
        ({f"A{n}": "" for n in range(257)}, ENVIRONMENT, "at most 256 entries"),
        ({f"A{n}": "x" * 32 * 1024 for n in range(8)}, ENVIRONMENT, "at most 262144 together"),
    ],
)
def test_a_string_map_past_a_bound_is_refused_naming_it(
    value: Any, rules: StringMapRules, says: str
) -> None:
    name = "environment" if rules is ENVIRONMENT else "metadata"
    with pytest.raises(InvalidRequestError, match=re.escape(says)):
        string_map(value, name, rules)


def test_metadata_may_hold_a_lone_surrogate_as_rest_always_took() -> None:
    # JSON can write one ("\ud800"); the state file keeps it escaped, as it kept it before.
    assert string_map({"a": "\ud800"}, "metadata", METADATA) == {"a": "\ud800"}

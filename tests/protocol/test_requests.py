"""The checks every request body goes through (protocol/requests.py), with no server: each
refusal names the field and says what it takes, in the same words for every front end."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.protocol.requests import (
    STREAM,
    flag_of,
    json_object,
    request_object,
    seconds_of,
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

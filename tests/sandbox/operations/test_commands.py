"""What a command request may hold (CommandRequest.from_json): its environment and working
directory above all. Running commands is tested against a real engine in
tests/server_extension/test_commands.py and tests/cli/test_sandboxes.py."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.operations.commands import (
    DEFAULT_TIMEOUT,
    MAX_CWD,
    MAX_ENV,
    MAX_ENV_VALUE,
    CommandRequest,
)
from jupyter_sandbox.sandbox.programs.exec_marks import EXEC_MARK


def test_a_request_without_env_or_cwd_runs_in_workspace_with_the_sandboxs_environment() -> None:
    request = CommandRequest.from_json({"command": "ls"})
    assert request == CommandRequest(["/bin/sh", "-c", "ls"], DEFAULT_TIMEOUT, None, {}, None)
    explicit = CommandRequest.from_json({"command": "ls", "env": None, "cwd": None})
    assert explicit == request


def test_env_and_cwd_are_taken_as_given() -> None:
    env = {
        "DEBUG": "1",
        "_private": "",
        "HTTP_PROXY": "http://elsewhere:3128",  # the sandbox's own; only the command sees it
        "ARGS": "a=b c\nd ü",
        "LONG": "x" * MAX_ENV_VALUE,
    }
    cwd = "/workspace/a dir/../b"  # resolved by the sandbox, where the command runs
    request = CommandRequest.from_json({"command": ["make"], "env": env, "cwd": cwd})
    assert (request.argv, request.env, request.cwd) == (["make"], env, cwd)
    assert request.env is not env  # a copy: the caller's dict is not kept
    many = {f"V{index}": "" for index in range(MAX_ENV)}
    assert CommandRequest.from_json({"command": "true", "env": many}).env == many
    longest = "/" + "d" * (MAX_CWD - 1)
    assert CommandRequest.from_json({"command": "true", "cwd": longest}).cwd == longest


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("env", ["DEBUG=1"], "env must be a JSON object of variable names to string values"),
        ("env", "DEBUG=1", "env must be a JSON object"),
        ("env", {"1ST": "x"}, "env name '1ST' is not a variable name"),
        ("env", {"": "x"}, "env name '' is not a variable name"),
        ("env", {"A-B": "x"}, "use letters, digits and _"),
        ("env", {"A=B": "x"}, "is not a variable name"),
        ("env", {"DEBUG\n": "x"}, "env name 'DEBUG\\n' is not a variable name"),
        ("env", {"ÜBER": "x"}, "is not a variable name"),
        (
            "env",
            {"DEBUG": 1},
            'env DEBUG must be a string without NUL characters (numbers too: "DEBUG": "1")',
        ),
        ("env", {"DEBUG": None}, "env DEBUG must be a string"),
        ("env", {"DEBUG": "a\0b"}, "without NUL characters"),
        ("env", {"BIG": "x" * (MAX_ENV_VALUE + 1)}, "a value may hold at most 32 KiB"),
        ("env", {"BIG": "ü" * (MAX_ENV_VALUE // 2 + 1)}, "a value may hold at most 32 KiB"),
        ("env", {f"V{index}": "" for index in range(MAX_ENV + 1)}, "at most 256 variables"),
        (
            "env",
            {f"V{index}": "x" * MAX_ENV_VALUE for index in range(40)},
            "all its variables together may hold at most 1 MiB",
        ),
        ("env", {EXEC_MARK: "x"}, f"env may not set {EXEC_MARK}"),
        ("env", {"BAD": "a\ud800"}, "env BAD is not valid Unicode text"),  # JSON "\ud800"
        ("stdin", "a\ud800", "stdin is not valid Unicode text"),
        ("cwd", "/a\ud800", "cwd is not valid Unicode text"),
        ("cwd", "workspace", "cwd must be an absolute path in the sandbox"),
        ("cwd", "", "cwd must be an absolute path"),
        ("cwd", 5, "cwd must be an absolute path"),
        ("cwd", ["/workspace"], "cwd must be an absolute path"),
        ("cwd", "/workspace/a\0b", "no NUL characters"),
        ("cwd", "/" + "d" * MAX_CWD, "cwd may hold at most 4096 bytes"),
        ("cwd", "/" + "ü" * (MAX_CWD // 2), "cwd may hold at most 4096 bytes"),
    ],
)
def test_a_bad_env_cwd_or_stdin_is_refused_saying_what_to_send(
    field: str, value: Any, says: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        CommandRequest.from_json({"command": "true", field: value})
    assert says in refused.value.message


def test_the_marker_is_refused_by_its_exact_name_only() -> None:
    # Variable names are case-sensitive: this one is not the mark, and marks nothing.
    lower = {EXEC_MARK.lower(): "x", EXEC_MARK + "_2": "y"}
    assert CommandRequest.from_json({"command": "true", "env": lower}).env == lower


def test_an_unknown_field_names_the_ones_a_command_takes() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        CommandRequest.from_json({"command": "true", "workdir": "/tmp"})
    assert (
        "unknown field(s) workdir: a command takes command, timeout, stdin, env, cwd, stream and "
        "background" in refused.value.message
    )


def test_stream_is_a_boolean_and_off_unless_asked() -> None:
    assert CommandRequest.from_json({"command": "ls"}).stream is False
    assert CommandRequest.from_json({"command": "ls", "stream": True}).stream is True
    assert CommandRequest.from_json({"command": "ls", "stream": False}).stream is False
    for value in ("true", 1, 0, None, [], {}):
        with pytest.raises(InvalidRequestError) as refused:
            CommandRequest.from_json({"command": "ls", "stream": value})
        assert refused.value.message.startswith(
            "stream must be true (send the output as it comes, as Server-Sent Events) or false"
        ), value


def test_a_background_command_takes_no_stdin_stream_or_timeout() -> None:
    request = CommandRequest.from_json({"command": "serve", "background": True, "cwd": "/tmp"})
    assert (request.background, request.cwd, request.stream) == (True, "/tmp", False)
    for extra in ({"stdin": "x"}, {"stream": False}, {"timeout": 5}):
        with pytest.raises(InvalidRequestError, match="takes no stdin, stream or timeout"):
            CommandRequest.from_json({"command": "serve", "background": True, **extra})
    with pytest.raises(InvalidRequestError, match="background must be true"):
        CommandRequest.from_json({"command": "serve", "background": "yes"})

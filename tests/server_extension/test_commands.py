"""/api/sandboxes/{id}/commands, against a real server and a real engine: every answer is
checked against openapi.yaml by ``api``."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_sandbox.sandbox.commands import MAX_ENV_VALUE, MAX_OUTPUT
from jupyter_sandbox.sandbox.container_spec import PROXY_URL
from jupyter_sandbox.sandbox.exec_deadline import EXEC_MARK

from .conftest import Fetch, api
from .test_auth_and_spec import with_named_users
from .test_snapshots import ALICE, BOB

pytestmark = pytest.mark.integration


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return with_named_users(jp_server_config)


async def command(fetch: Fetch, sandbox_id: str, body: Any, **who: Any) -> tuple[int, Any]:
    return await api(fetch, "POST", sandbox_id, "commands", body=body, **(who or ALICE))


async def test_a_command_runs_as_the_sandbox_user_and_its_outcome_comes_back(
    jp_fetch: Fetch,
) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]

    script = "id -u; pwd; echo 'to stderr' >&2; printf 'ü' > made.txt; exit 3"
    status, ran = await command(jp_fetch, sandbox_id, {"command": script})
    assert status == 200, ran
    assert ran["stdout"].split() == ["10001", "/workspace"]  # its user, in its /workspace
    assert (ran["stderr"], ran["exit_code"], ran["timed_out"]) == ("to stderr\n", 3, False)

    # A list runs as it is (no shell), with the given input; what it wrote is the sandbox's.
    body = {"command": ["python3", "-c", "import sys; print(sys.stdin.read()[::-1])"]}
    status, ran = await command(jp_fetch, sandbox_id, {**body, "stdin": "abc"})
    assert (status, ran["stdout"], ran["exit_code"]) == (200, "cba\n", 0), ran
    status, ran = await command(jp_fetch, sandbox_id, {"command": ["cat", "made.txt"]})
    assert (status, ran["stdout"]) == (200, "ü"), ran

    # Its time limit kills it, with what it started.
    slow = {"command": "sleep 300 & sleep 300", "timeout": 1}
    status, ran = await command(jp_fetch, sandbox_id, slow)
    assert (status, ran["timed_out"]) == (200, True), ran
    assert ran["duration"] < 30
    status, ran = await command(jp_fetch, sandbox_id, {"command": "pgrep -x sleep || echo none"})
    assert ran["stdout"] == "none\n", ran

    # A program that is not there says so; another user's sandbox is not found.
    status, ran = await command(jp_fetch, sandbox_id, {"command": ["no-such-program"]})
    assert status == 200, ran
    assert ran["exit_code"] != 0
    assert "could not be started" in ran["stderr"]
    status, error = await command(jp_fetch, sandbox_id, {"command": "true"}, **BOB)
    assert (status, error["code"]) == (404, "sandbox_not_found"), error


async def test_output_past_the_cap_is_refused_naming_the_files_api(jp_fetch: Fetch) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    too_much = f"head -c {MAX_OUTPUT + 1} /dev/zero | tr '\\0' a"
    status, error = await command(jp_fetch, made["id"], {"command": too_much})
    assert (status, error["code"]) == (413, "output_too_large"), error
    assert "/files/content" in error["message"]
    status, ran = await command(
        jp_fetch, made["id"], {"command": f"head -c {MAX_OUTPUT} /dev/zero | tr '\\0' a"}
    )
    assert (status, len(ran["stdout"])) == (200, MAX_OUTPUT)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('"ls"', "must be a JSON object"),
        ({}, "command must be a non-empty string"),
        ({"command": ""}, "command must be a non-empty string"),
        ({"command": ["ls", 1]}, "or a non-empty list of strings"),
        ({"command": "ls", "timeout": 0}, "timeout must be a number of seconds above 0"),
        ({"command": "ls", "timeout": 7200}, "at most 3600"),
        ({"command": "ls", "timeout": True}, "timeout must be"),
        ({"command": "ls", "stdin": 5}, "stdin must be a string"),
        ({"command": "ls", "workdir": "/"}, "unknown field(s) workdir"),
    ],
)
async def test_a_bad_request_says_what_to_send(jp_fetch: Fetch, body: Any, says: str) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    status, error = await command(jp_fetch, made["id"], body)
    assert (status, error["code"]) == (400, "invalid_request"), error
    assert says in error["message"]


async def test_a_paused_sandbox_is_a_conflict_naming_the_fix(jp_fetch: Fetch) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    status, _ = await api(jp_fetch, "POST", made["id"], "pause", **ALICE)
    assert status == 200
    status, error = await command(jp_fetch, made["id"], {"command": "true"})
    assert (status, error["code"]) == (409, "sandbox_conflict"), error
    assert "resume it first" in error["message"]


@pytest.mark.parametrize("runtime", ["runc", pytest.param("runsc", marks=pytest.mark.runsc)])
async def test_env_and_cwd_are_the_commands_own(jp_fetch: Fetch, runtime: str) -> None:
    status, made = await api(jp_fetch, "POST", body={"runtime": runtime}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]
    show = 'printf "%s|%s|%s|%s" "$GREETING" "$HTTP_PROXY" "$HOME" "$PWD"'

    # Added to the sandbox's environment for this command; a name it has is replaced.
    env = {"GREETING": "hi there=ü\n", "HTTP_PROXY": "http://elsewhere.invalid:3128"}
    status, ran = await command(jp_fetch, sandbox_id, {"command": show, "env": env})
    assert (status, ran["exit_code"]) == (200, 0), ran
    assert ran["stdout"] == "hi there=ü\n|http://elsewhere.invalid:3128|/workspace|/workspace"
    # ... for that command alone: the next sees the sandbox's own again.
    status, ran = await command(jp_fetch, sandbox_id, {"command": show})
    assert ran["stdout"] == f"|{PROXY_URL}|/workspace|/workspace", ran

    # The deadline's mark cannot be named; with other variables it still marks the command,
    # whose time limit kills it with what it started.
    status, error = await command(
        jp_fetch, sandbox_id, {"command": "true", "env": {EXEC_MARK: "mine"}}
    )
    assert (status, error["code"]) == (400, "invalid_request"), error
    assert f"env may not set {EXEC_MARK}" in error["message"]
    slow = {"command": "sleep 300 & sleep 300", "timeout": 1, "env": {"PATH": "/usr/bin:/bin"}}
    status, ran = await command(jp_fetch, sandbox_id, slow)
    assert (status, ran["timed_out"]) == (200, True), ran
    status, ran = await command(jp_fetch, sandbox_id, {"command": "pgrep -x sleep || echo none"})
    assert ran["stdout"] == "none\n", ran
    status, ran = await command(
        jp_fetch, sandbox_id, {"command": f"env | grep -c ^{EXEC_MARK}=", "env": {"A": "1"}}
    )
    assert ran["stdout"] == "1\n", ran  # the mark, once, whatever else was added

    # cwd: the command starts there; relative paths are its.
    status, ran = await command(jp_fetch, sandbox_id, {"command": "mkdir -p 'sub dir/inner'"})
    assert (status, ran["exit_code"]) == (200, 0), ran
    in_sub = {"command": ["sh", "-c", "pwd; ls; touch here"], "cwd": "/workspace/sub dir"}
    status, ran = await command(jp_fetch, sandbox_id, in_sub)
    assert (status, ran["stdout"], ran["exit_code"]) == (200, "/workspace/sub dir\ninner\n", 0)
    status, ran = await command(jp_fetch, sandbox_id, {"command": "ls 'sub dir'", "cwd": "/tmp"})
    assert ran["exit_code"] != 0, ran  # /tmp/sub dir: relative to the cwd given
    status, ran = await command(jp_fetch, sandbox_id, {"command": "ls 'sub dir'"})
    assert ran["stdout"] == "here\ninner\n", ran  # the default is still /workspace

    # A cwd the sandbox lacks: a 404 saying what to do; the command never ran, nothing was made.
    status, before = await command(jp_fetch, sandbox_id, {"command": "ls -AR /workspace"})
    assert status == 200, before
    missing = {"command": ["touch", "ran"], "cwd": "/workspace/missing"}
    status, error = await command(jp_fetch, sandbox_id, missing)
    assert (status, error["code"]) == (404, "file_not_found"), error
    assert error["message"].startswith(
        "cwd /workspace/missing does not exist in the sandbox: create it first"
    )
    assert "or leave cwd out" in error["message"]
    status, after = await command(jp_fetch, sandbox_id, {"command": "ls -AR /workspace"})
    assert after["stdout"] == before["stdout"]  # no /workspace/missing, no "ran"
    if runtime == "runc":  # runsc starts a command in a file, whose relative paths then fail
        status, error = await command(jp_fetch, sandbox_id, {**missing, "cwd": "/etc/passwd"})
        assert (status, error["code"]) == (400, "file_error"), error
        assert "cwd /etc/passwd is not a directory" in error["message"]

    # A program missing from a cwd that exists is still the program's fault, as without cwd.
    status, ran = await command(jp_fetch, sandbox_id, {"command": ["nope"], "cwd": "/tmp"})
    assert (status, ran["exit_code"], ran["stdout"]) == (200, 126, ""), ran
    assert "'nope' could not be started" in ran["stderr"]


async def test_a_bad_env_or_cwd_is_a_400_and_nothing_runs(jp_fetch: Fetch) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]
    runs = ["touch", "/workspace/ran"]  # what would show that a refused request ran
    bodies = [
        ({"env": ["DEBUG=1"]}, "env must be a JSON object of variable names to string values"),
        ({"env": {"NOT-A-NAME": "1"}}, "env name 'NOT-A-NAME' is not a variable name"),
        ({"env": {"DEBUG": 1}}, "env DEBUG must be a string without NUL characters"),
        ({"env": {"BIG": "x" * (MAX_ENV_VALUE + 1)}}, "a value may hold at most 32 KiB"),
        ({"env": {f"V{n}": "" for n in range(257)}}, "env may hold at most 256 variables"),
        ({"cwd": "workspace"}, "cwd must be an absolute path in the sandbox"),
        ({"cwd": "/" + "d" * 4096}, "cwd may hold at most 4096 bytes"),
    ]
    for body, says in bodies:
        status, error = await command(jp_fetch, sandbox_id, {"command": runs, **body})
        assert (status, error["code"]) == (400, "invalid_request"), (body, error)
        assert says in error["message"], (says, error["message"])
        assert "e.g." in error["message"] or "at most" in error["message"], error["message"]
    status, ran = await command(jp_fetch, sandbox_id, {"command": "ls /workspace/ran || echo no"})
    assert (status, ran["stdout"]) == (200, "no\n"), ran

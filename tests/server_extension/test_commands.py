"""/api/sandboxes/{id}/commands, against a real server and a real engine: every answer is
checked against openapi.yaml by ``api``."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_sandbox.sandbox.commands import MAX_OUTPUT

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
        ({"command": "ls", "cwd": "/"}, "unknown field(s) cwd"),
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

"""What an E2B create may make the server keep: its metadata (in the sandbox's state file, read
on the event loop by every listing, quota count and culler pass), its envVars (in the
container's environment and every command's) and its templateID, held to our REST API's
bounds (protocol/requests.py's string_map), sent as raw HTTP on both runtimes. Each refusal is
a 400 in E2B's error form that names the bound, before anything starts."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from jupyter_sandbox.protocol.requests import MAX_JSON_BODY
from tests.e2b_api.conftest import e2b_server_config
from tests.e2b_api.test_hostile_input import send

pytestmark = pytest.mark.integration


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], runtime: str) -> dict[str, Any]:
    return e2b_server_config(jp_server_config, runtime)


async def refused(api_url: str, body: dict[str, Any], status: int = 400) -> str:
    """The message of the ``status`` a create of ``body`` is refused with, in E2B's error
    form."""
    response = await send(
        f"{api_url}/v2/sandboxes", body=json.dumps(body).encode(), X_API_KEY="e2b_alice"
    )
    answer = json.loads(response.body)
    assert (response.code, answer["code"]) == (status, status), (list(body), answer)
    message: str = answer["message"]
    return message


async def listed(api_url: str) -> list[dict[str, Any]]:
    response = await send(f"{api_url}/v2/sandboxes", method="GET", X_API_KEY="e2b_alice")
    assert response.code == 200, response.body
    models: list[dict[str, Any]] = json.loads(response.body)
    return models


@pytest.mark.checklist(
    row=134,
    attack="E2B creates whose metadata would fill the sandbox's state file: 65 entries, a key "
    "'a=b', a value of 1025 characters, one of 2 MiB, 64 values of 1024 wide characters, and a "
    "templateID of 100 kB",
    expected="each refused 400 in E2B's error form naming the bound (64 entries, the key's "
    "form, 1024 characters, a JSON body's bytes, 73728 bytes together, 256 characters), "
    "nothing started; metadata at every bound at once is kept and listed",
)
async def test_metadata_and_template_past_their_bounds_are_refused(
    e2b_env: str, observe: Callable[..., None]
) -> None:
    cases = {
        "65 entries": ({"metadata": {f"k{n}": "v" for n in range(65)}}, "at most 64 entries"),
        "a=b": ({"metadata": {"a=b": "v"}}, "metadata key 'a=b' must be 1-128 letters"),
        "1025": ({"metadata": {"a": "x" * 1025}}, "1025 characters; at most 1024"),
        "wide": (
            {"metadata": {f"k{n}": "\u00e9" * 1024 for n in range(64)}},
            "at most 73728 together",
        ),
        "template": ({"templateID": "t" * 100_000}, "at most 256 characters"),
        "not a map": ({"metadata": ["a"]}, "metadata must be an object of string values"),
    }
    for name, (body, says) in cases.items():
        assert says in await refused(e2b_env, body), name
    # Past the bound of any JSON body: refused before it is parsed.
    too_large = {"metadata": {"a": "x" * 2 * 1024**2}}
    assert f"more than the {MAX_JSON_BODY}" in await refused(e2b_env, too_large)
    assert await listed(e2b_env) == []
    widest = {f"{n:02d}".ljust(128, "k"): "v" * 1024 for n in range(64)}
    response = await send(
        f"{e2b_env}/v2/sandboxes",
        body=json.dumps({"templateID": "base", "metadata": widest}).encode(),
        X_API_KEY="e2b_alice",
    )
    assert response.code == 201, response.body
    made = json.loads(response.body)
    try:
        assert [model["metadata"] for model in await listed(e2b_env)] == [widest]
    finally:
        deleted = await send(
            f"{e2b_env}/sandboxes/{made['sandboxID']}", method="DELETE", X_API_KEY="e2b_alice"
        )
        assert deleted.code == 204
    observe(
        f"{len(cases) + 1} creates refused 400; metadata at its bounds kept",
        cases=len(cases) + 1,
    )


@pytest.mark.checklist(
    row=135,
    attack="E2B creates whose envVars would fail the container's start (or every command in "
    "it): a 64 KiB value, 257 variables, 288 KiB in all, a name '1A', a NUL in a value",
    expected="each refused 400 in E2B's error form naming the bound (32768 bytes, 256 "
    "entries, 262144 bytes together, a variable name, no NUL) before anything starts, never "
    "a 500 sandbox_start_failed",
)
async def test_env_vars_past_their_bounds_are_refused(
    e2b_env: str, observe: Callable[..., None]
) -> None:
    cases = {
        "64 KiB": ({"A": "x" * 64 * 1024}, "envVars value of 'A' has 65536 bytes; at most 32768"),
        "257": ({f"A{n}": "" for n in range(257)}, "envVars may hold at most 256 entries"),
        "288 KiB": ({f"A{n}": "x" * 32 * 1024 for n in range(9)}, "at most 262144 together"),
        "1A": ({"1A": "x"}, "envVars key '1A' must be a variable name"),
        "NUL": ({"A": "a\0b"}, "may not hold a NUL character"),
        "not strings": ({"A": 1}, "envVars must be an object of string values"),
    }
    for name, (env, says) in cases.items():
        assert says in await refused(e2b_env, {"envVars": env}), name
    assert await listed(e2b_env) == []
    observe(f"{len(cases)} creates refused 400 before any start", cases=len(cases))

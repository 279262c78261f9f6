"""JSON request bodies are read within their route's bound, after authentication, and parsed
without holding the event loop every owner shares (server_extension/base.py, JsonBodyHandler).

tornado read every body whole (up to Jupyter Server's 512 MiB) before a handler looked at it,
and json's C scanner then held the loop while it parsed: a body of many small values held it
for seconds, and every owner's requests, streams and kernels with it."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from jupyter_sandbox.protocol.requests import MAX_JSON_BODY
from jupyter_sandbox.protocol.strict_json import MAX_VALUES_IN_STEPS
from jupyter_sandbox.sandbox.operations.commands import MAX_STDIN
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.test_auth_and_spec import with_named_users

pytestmark = pytest.mark.integration

# A well-formed sandbox id nobody has: the body is read and refused before any lookup.
NOBODYS = "0123456789ab"


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return with_named_users(jp_server_config)


async def raw_head(server_url: str, path: str, length: int) -> tuple[int, bytes]:
    """Send only the head of a JSON POST of ``length`` bytes as alice; the answer's status and
    bytes, read within 10 s (none of the body is ever sent)."""
    url = urllib.parse.urlsplit(server_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(
            f"POST {url.path}{path} HTTP/1.1\r\nHost: {url.netloc}\r\n"
            "Authorization: token alice\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n".encode()
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()
    return int(answer.split(b" ", 2)[1]), answer


@pytest.mark.checklist(
    row=150,
    attack="one owner declares JSON bodies past their route's bound (600 MiB to /commands, "
    "2 MiB to /network and to a create) and sends none of them",
    expected="each refused 413 (request_too_large) from its head, saying the route's bound "
    "and, for a command, to upload large input as a file; no body byte is read",
)
async def test_a_body_past_its_routes_bound_is_refused_from_its_head(
    server_url: str, observe: Callable[..., None]
) -> None:
    cases = {
        f"api/sandboxes/{NOBODYS}/commands": 600 * 1024**2,
        f"api/sandboxes/{NOBODYS}/network": 2 * MAX_JSON_BODY,
        "api/sandboxes": 2 * MAX_JSON_BODY,
    }
    for path, length in cases.items():
        status, answer = await raw_head(server_url, path, length)
        assert status == 413, answer[:400]
        assert b"request_too_large" in answer, answer[:400]
    _, answer = await raw_head(server_url, f"api/sandboxes/{NOBODYS}/commands", 600 * 1024**2)
    assert f"at most {MAX_JSON_BODY + 2 * MAX_STDIN} bytes".encode() in answer, answer[:400]
    assert b"files/content" in answer, answer[:400]
    observe(f"{len(cases)} bodies past their route's bound refused 413 from the head alone")


@pytest.mark.checklist(
    row=151,
    attack="one owner posts a 12 MiB JSON command of a million small values (an env object "
    "of 0-byte strings), which json's C scanner parsed in seconds on the shared event loop",
    expected="refused 400 at its 100,001st value; while it is read the server's event loop "
    "never stalls for more than half a second (it is parsed in a thread by json's Python "
    "scanner, which counts the values it makes, in one of the owner's upload turns)",
)
async def test_a_large_body_is_parsed_without_holding_the_event_loop(
    jp_fetch: Fetch, observe: Callable[..., None]
) -> None:
    entries = 1_000_000
    env = ",".join(f'"V{n}":""' for n in range(entries))
    body = f'{{"command": "true", "env": {{{env}}}}}'.encode()
    assert MAX_JSON_BODY < len(body) <= MAX_JSON_BODY + 2 * MAX_STDIN
    stalls: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:  # the loop's longest gap between two of its turns
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            stalls.append(now - last)
            last = now

    ticking = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.2)
    try:
        started = time.monotonic()
        status, error = await api(
            jp_fetch,
            "POST",
            NOBODYS,
            "commands",
            body=body,
            request_timeout=120,
            headers={"Authorization": "token alice"},
        )
        took = time.monotonic() - started
    finally:
        done.set()
        await ticking
    assert (status, error["code"]) == (400, "invalid_request"), error
    assert f"more than {MAX_VALUES_IN_STEPS} values" in error["message"], error
    assert max(stalls) < 0.5, f"the event loop stalled {max(stalls):.2f} s"
    observe(
        f"a {len(body) >> 20} MiB body of {entries} values refused in {took:.1f} s; the loop's "
        f"longest stall meanwhile {max(stalls) * 1000:.0f} ms",
    )

"""Connections one owner can hold open in the shared server: relays through port links (HTTP
and WebSocket) and code runs. Each holds server descriptors (two sockets for a relay; a kernel
client's sockets and thread for a run) for as long as it lasts, so each must end when its
client leaves or nothing moves, and one owner's must be capped, answered 429 at once past the
cap, while another owner's are served. Real server, real engine, two named owners.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from jupyter_sandbox.sandbox.host.fair_share import OwnerCap
from jupyter_sandbox.server_extension import SandboxExtension
from tests.security.rest.test_denial_of_service import (
    ALICE,
    BOB,
    BOUND,
    HELD,
    HeldRequest,
    make_sandbox,
)
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.test_auth_and_spec import with_named_users
from tests.server_extension.test_ports import follow

pytestmark = pytest.mark.integration

PORT = 8000
# A server for the sandbox (stdlib only) that goes silent: a GET gets its answer's head and one
# byte of its body, a WebSocket upgrade its 101, then nothing more; a POST's body is never read.
# It counts the silent connections the host closed, and tells the count at GET /closed.
SILENT = r"""
import socket, sys, threading

closed = 0
lock = threading.Lock()

def serve(conn):
    global closed
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        line = data.split(b"\r\n", 1)[0]
        if line.startswith(b"GET /closed "):
            body = str(closed).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            return
        if line.startswith(b"POST "):
            threading.Event().wait()
        if b"upgrade: websocket" in data.lower():
            conn.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\n\r\n"
            )
        else:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nx")
        while conn.recv(65536):
            pass
    with lock:
        closed += 1

server = socket.create_server(("127.0.0.1", int(sys.argv[1])), backlog=128)
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""
UPGRADE = "Upgrade: websocket\r\nConnection: Upgrade\r\n"


@pytest.fixture
def jp_server_config(
    jp_server_config: dict[str, Any], runtime: str, tmp_path: Path
) -> dict[str, Any]:
    config = with_named_users(jp_server_config)
    return {
        **config,
        "SandboxSettings": {**config["SandboxSettings"], "runtime": runtime},
        "SandboxQuotas": {"max_sandboxes": 0, "max_memory": "", "max_cpus": 0.0},
    }


@pytest.fixture
async def held() -> AsyncIterator[list[HeldRequest]]:
    """Requests held open, closed (the client leaving) whatever the test's end."""
    requests: list[HeldRequest] = []
    yield requests
    await asyncio.gather(*(request.close() for request in requests))


async def silent_server(
    fetch: Fetch, extension: SandboxExtension, who: dict[str, Any], owner: str
) -> str:
    """A new sandbox of ``who`` with SILENT listening in it; its port's link."""
    sandbox_id = await make_sandbox(fetch, who)
    manager = extension.manager
    await manager.backend.spawn(sandbox_id, ["python", "-c", SILENT, str(PORT)], environment={})
    for _ in range(300):
        if PORT in [found.port for found in await manager.ports.listening(owner, sandbox_id)]:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the sandbox's server did not listen")
    status, made = await api(fetch, "GET", sandbox_id, "ports", str(PORT), **who)
    assert status == 200, made
    return str(made["url"])


async def open_link(
    server_url: str, link: str, path: str = "x", *, head: str = "", body: bytes = b""
) -> HeldRequest:
    """A request through ``link`` on a connection of its own, as a browser sends it (no token
    of Jupyter's: the link is the credential)."""
    url = urlsplit(server_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    method = "POST" if body else "GET"
    writer.write(
        f"{method} {link}{path} HTTP/1.1\r\nHost: {url.netloc}\r\n{head}"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    writer.write(body)
    return HeldRequest(reader, writer)


async def closed_by_host(server_url: str, link: str) -> int:
    """How many silent connections the sandbox's server saw the host close."""
    answer = await follow(server_url, link, "closed")
    assert answer.code == 200, answer.body
    return int(answer.body)


async def closed_count_is(server_url: str, link: str, expected: int) -> bool:
    return await closed_by_host(server_url, link) == expected


async def until(what: str, check: Callable[[], Awaitable[bool]], seconds: float) -> float:
    """Seconds until ``check()`` is true; AssertionError past ``seconds``."""
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < seconds, f"not within {seconds} s: {what}"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def nobody_holds(cap: OwnerCap, owner: str) -> bool:
    return owner not in cap.held


@pytest.mark.checklist(
    row=130,
    attack="browsers that read the head and one byte of a sandbox server's answer and leave, "
    "the server then silent; a browser that stays while the server stays silent; a request "
    "body sent to a server that never reads it",
    expected="each relay ends and its socket into the sandbox is closed as its browser "
    "leaves; a silent relay is closed after SandboxExtension.port_relay_idle_timeout; the "
    "unread body is answered 504 after it",
)
async def test_a_relay_ends_when_its_browser_leaves_or_nothing_moves(
    jp_fetch: Fetch,
    server_url: str,
    extension: SandboxExtension,
    held: list[HeldRequest],
    observe: Callable[..., None],
) -> None:
    link = await silent_server(jp_fetch, extension, ALICE, "alice")
    relays = extension.port_relays
    # Only the browser's leaving can end these relays: no idle limit.
    extension.port_relay_idle_timeout = 0.0
    browsers = [await open_link(server_url, link) for _ in range(3)]
    held.extend(browsers)
    for browser in browsers:
        assert await browser.read_until(b"\r\n\r\nx", BOUND), browser.seen
        assert browser.status == 200
    assert relays.held.get("alice") == 3
    assert await closed_by_host(server_url, link) == 0
    for browser in browsers:
        await browser.close()
    ended = await until("the relays ended", lambda: nobody_holds(relays, "alice"), BOUND)
    closed = await until(
        "the sandbox's server saw its connections closed",
        lambda: closed_count_is(server_url, link, 3),
        BOUND,
    )

    # A browser that stays, the server silent: both connections are closed at the idle limit.
    extension.port_relay_idle_timeout = 1.0
    staying = await open_link(server_url, link)
    held.append(staying)
    assert await staying.read_until(b"\r\n\r\nx", BOUND), staying.seen
    started = time.monotonic()
    assert not await staying.read_until(b"never", BOUND), staying.seen  # closed, answer cut
    cut = time.monotonic() - started
    await until(
        "the idle relay's socket closed", lambda: closed_count_is(server_url, link, 4), BOUND
    )

    # A body the server never reads: its writes are not waited on past the idle limit.
    unread = await open_link(server_url, link, "upload", body=bytes(32 * 1024**2))
    held.append(unread)
    assert await unread.read_until(b"port_relay_idle_timeout", BOUND * 3), unread.seen[:300]
    assert unread.status == 504
    await until("the unread body's relay ended", lambda: nobody_holds(relays, "alice"), BOUND)
    observe(
        f"3 browsers left after the head: their relays ended within {ended:.2f} s and the "
        f"sandbox's server saw all 3 connections closed {closed:.2f} s later; with a 1 s idle "
        f"limit a silent relay was cut after {cut:.2f} s and an unread 32 MiB body answered 504",
        cases=5,
    )


@pytest.mark.checklist(
    row=131,
    attack="one owner's port link opens more relays (HTTP requests and WebSockets, held open "
    "by a silent server) than SandboxExtension.max_port_relays_per_owner",
    expected="the one past the cap answers 429 naming the setting, before anything connects; "
    "once one of hers closes a new one is admitted; another owner's link is served meanwhile; "
    "past max_port_relays every owner's new relay answers 429",
)
async def test_an_owners_relays_are_capped_and_another_owners_served(
    jp_fetch: Fetch,
    server_url: str,
    extension: SandboxExtension,
    held: list[HeldRequest],
    observe: Callable[..., None],
) -> None:
    alices = await silent_server(jp_fetch, extension, ALICE, "alice")
    bobs = await silent_server(jp_fetch, extension, BOB, "bob")
    relays = extension.port_relays
    cap = 3
    extension.max_port_relays_per_owner = cap
    opened = [await open_link(server_url, alices, head=UPGRADE)]  # a WebSocket counts too
    opened += [await open_link(server_url, alices) for _ in range(cap - 1)]
    held.extend(opened)
    for request, marker in zip(opened, [b"\r\n\r\n"] + [b"\r\n\r\nx"] * (cap - 1), strict=True):
        assert await request.read_until(marker, BOUND), request.seen
    assert [request.status for request in opened] == [101] + [200] * (cap - 1)
    assert relays.held == {"alice": cap}

    refused = await open_link(server_url, alices)
    held.append(refused)
    assert await refused.read_until(b"close one first", BOUND), refused.seen
    assert refused.status == 429
    assert b"SandboxExtension.max_port_relays_per_owner" in refused.seen
    assert relays.held == {"alice": cap}  # the refused one held nothing
    assert await closed_count_is(server_url, bobs, 0)  # bob's link is served meanwhile
    bobs_relay = await open_link(server_url, bobs)
    held.append(bobs_relay)
    assert await bobs_relay.read_until(b"\r\n\r\nx", BOUND), bobs_relay.seen
    assert bobs_relay.status == 200

    # The server's cap: all of them held now, so anyone's next is refused (hers too, her
    # own cap lifted).
    extension.max_port_relays, extension.max_port_relays_per_owner = cap + 1, 0
    for link in (alices, bobs):
        over = await open_link(server_url, link)
        held.append(over)
        assert await over.read_until(b"try again later", BOUND), over.seen
        assert over.status == 429
        assert b"SandboxExtension.max_port_relays" in over.seen
    extension.max_port_relays, extension.max_port_relays_per_owner = 0, cap

    await opened[0].close()  # her WebSocket ends: a new relay of hers is admitted
    await until("her closed relay was given back", lambda: holds(relays, "alice", cap - 1), BOUND)
    again = await open_link(server_url, alices)
    held.append(again)
    assert await again.read_until(b"\r\n\r\nx", BOUND), again.seen
    assert again.status == 200
    observe(
        f"with a cap of {cap} relays per owner, alice's 4th (after a WebSocket and "
        f"{cap - 1} HTTP relays held by a silent server) was answered 429 and connected "
        "nothing; bob's relay was served; with the server's cap reached both got 429; once "
        "her WebSocket closed her next relay was admitted",
        cases=cap + 5,
    )


async def holds(cap: OwnerCap, owner: str, count: int) -> bool:
    return cap.held.get(owner, 0) == count


@pytest.mark.checklist(
    row=132,
    attack="one owner sends more concurrent non-streamed code runs to its sandbox than "
    "SandboxExtension.max_event_streams_per_owner, behind a long run, each holding a kernel "
    "client while it waits in the kernel's queue",
    expected="runs past the owner's cap answer 429 at once, before a kernel client is "
    "opened; another owner's run completes promptly",
)
async def test_an_owners_waiting_code_runs_are_capped(
    jp_fetch: Fetch,
    server_url: str,
    extension: SandboxExtension,
    held: list[HeldRequest],
    observe: Callable[..., None],
) -> None:
    bobs = await make_sandbox(jp_fetch, BOB)
    alices = await make_sandbox(jp_fetch, ALICE)
    streams = extension.event_streams
    cap = 3
    extension.max_event_streams_per_owner = cap
    path = f"api/sandboxes/{alices}/execute"
    long = {"code": f"import time; time.sleep({HELD})", "timeout": HELD}
    held.append(await HeldRequest.open(server_url, "POST", path, "alice", long))
    await until("her long run began", lambda: holds(streams, "alice", 1), BOUND * 3)

    # cap + 1 more, all at once: cap - 1 of them wait behind the long run, 2 are refused.
    more = [
        await HeldRequest.open(server_url, "POST", path, "alice", {"code": "1+1"})
        for _ in range(cap + 1)
    ]
    held.extend(more)
    started = time.monotonic()
    answers = {
        asyncio.ensure_future(request.read_until(b"}", BOUND * 3)): request for request in more
    }
    refused: list[HeldRequest] = []
    pending = set(answers)
    while len(refused) < 2:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            assert task.result(), answers[task].seen
            refused.append(answers[task])
    refusing = time.monotonic() - started
    assert [request.status for request in refused] == [429, 429]
    for request in refused:
        assert b'"too_many_streams"' in request.seen
        assert b"SandboxExtension.max_event_streams_per_owner" in request.seen
    assert streams.held == {"alice": cap}
    assert not any(task.done() for task in pending)  # the admitted ones wait for the long run

    started = time.monotonic()
    status, ran = await api(jp_fetch, "POST", bobs, "execute", body={"code": "1+1"}, **BOB)
    bobs_run = time.monotonic() - started
    assert status == 200, ran
    assert [output["data"]["text/plain"] for output in ran["outputs"]] == ["2"], ran
    assert bobs_run < BOUND
    for task in pending:
        task.cancel()
    status, _ = await api(jp_fetch, "DELETE", alices, request_timeout=180, **ALICE)
    assert status == 204
    observe(
        f"with a cap of {cap} per owner, alice's long run and {cap - 1} more waited in her "
        f"kernel's queue; the other 2 were answered 429 within {refusing:.2f} s; bob's run of "
        f"1+1 completed in {bobs_run:.2f} s",
        cases=cap + 2,
    )

"""Rows 57-59 through a real server and a real sandbox's server: what a sandbox answers on a port
link reaches the browser only rebuilt from parsed parts (issue 31: a bare LF in a WebSocket's
101 line planted an ``_xsrf`` cookie on Jupyter's origin, a ``Location: //other.host/`` was
passed on, and a port written ``²`` was a 500)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import quote, urlsplit

import pytest

from jupyter_sandbox.server_extension import SandboxExtension
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.test_ports import PORT, follow, start_server

pytestmark = pytest.mark.integration

# The sandbox's server (stdlib only), answering raw bytes: a 101 whose status line carries a
# bare LF and a Set-Cookie after it, a proper 101 (then an echo, upper-cased), a 200 with the
# same bare LF, and a redirect to whatever ?Location it is asked for.
SERVER = r"""
import socket, sys, threading
from urllib.parse import unquote

SMUGGLED = b"HTTP/1.1 101 Switching Protocols\nSet-Cookie: _xsrf=planted; Path=/\r\n"
UPGRADE = b"Upgrade: websocket\r\nConnection: Upgrade\r\n"

def serve(conn):
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        path, _, query = data.split(b" ", 2)[1].decode().partition("?")
        if path == "/ws-smuggle":
            conn.sendall(SMUGGLED + UPGRADE + b"\r\n")
        elif path == "/ws":
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nSet-Cookie: _xsrf=planted\r\n"
                         + UPGRADE + b"X-Mine: kept\r\n\r\n")
            while chunk := conn.recv(65536):
                conn.sendall(chunk.upper())
        elif path == "/http-smuggle":
            conn.sendall(b"HTTP/1.1 200 OK\nSet-Cookie: _xsrf=planted; Path=/\r\n"
                         b"Content-Length: 2\r\n\r\nok")
        elif path == "/redirect":
            location = unquote(query).encode("latin-1")
            conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: " + location
                         + b"\r\nContent-Length: 0\r\n\r\n")
        else:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")

listener = socket.create_server(("127.0.0.1", int(sys.argv[1])))
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


async def sandbox_with_server(fetch: Fetch, extension: SandboxExtension, runtime: str) -> str:
    """A sandbox whose server listens on PORT; its link."""
    status, created = await api(fetch, "POST", body={"runtime": runtime})
    assert status == 201
    sandbox_id = created["id"]
    await start_server(extension, sandbox_id, SERVER)
    status, made = await api(fetch, "GET", sandbox_id, "ports", str(PORT))
    assert status == 200
    return str(made["url"])


async def upgrade(server_url: str, path: str, send: bytes = b"") -> bytes:
    """What the browser receives for a WebSocket upgrade of ``path`` (after sending ``send``
    once the head is in), until the relay closes or 2 s pass quietly."""
    address = urlsplit(server_url)
    assert address.hostname == "127.0.0.1"
    reader, writer = await asyncio.open_connection("127.0.0.1", address.port)
    try:
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\n\r\n".encode()
        )
        received = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        if send:
            writer.write(send)
        while True:
            try:
                chunk = await asyncio.wait_for(reader.read(65536), 2)
            except asyncio.TimeoutError:
                return received
            if not chunk:
                return received
            received += chunk
    finally:
        writer.close()


@pytest.mark.checklist(
    row=57,
    attack="a sandbox's server answers a port link's WebSocket upgrade with a 101 status line "
    "holding a bare LF and a Set-Cookie after it (and a 200 likewise)",
    expected="502 from the relay, no Set-Cookie reaches the browser; a proper 101 is rebuilt "
    "without its Set-Cookie",
)
async def test_a_bare_lf_in_an_answer_head_plants_no_cookie(
    jp_fetch: Fetch,
    extension: SandboxExtension,
    server_url: str,
    runtime: str,
    observe: Callable[..., None],
) -> None:
    link = await sandbox_with_server(jp_fetch, extension, runtime)
    smuggled = await upgrade(server_url, link + "ws-smuggle")
    assert smuggled.startswith(b"HTTP/1.1 502 "), smuggled
    assert b"set-cookie" not in smuggled.lower()
    assert b"_xsrf" not in smuggled

    plain = await follow(server_url, link, "http-smuggle")
    assert plain.code == 502
    assert "Set-Cookie" not in plain.headers
    assert b"bare CR or LF" in plain.body

    relayed = await upgrade(server_url, link + "ws", b"through the sandbox")
    head, _, body = relayed.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 101 Switching Protocols"
    assert b"Upgrade: websocket" in lines
    assert b"X-Mine: kept" in lines
    assert b"set-cookie" not in head.lower()
    assert body == b"THROUGH THE SANDBOX"
    observe(
        "the 101 and the 200 with a bare LF: 502 without their Set-Cookie; a proper 101: "
        "rebuilt, its Set-Cookie left out, bytes relayed",
        cases=3,
    )


# Where a sandbox's redirect may send the browser: paths under the link only.
AWAY = [
    "//evil.example/x",
    "/\\evil.example/x",
    "https://evil.example/",
    "http://localhost@evil.example/",
    "javascript:alert(1)",
    "/../../api/contents",
    "/%2e%2e/%2E%2E/api/contents",
    "../../../../api/contents",
    "/x\tfoo",
]


@pytest.mark.checklist(
    row=58,
    attack="a sandbox's server redirects through a port link to //other.host/, /\\other.host, "
    "another origin, a javascript: URL, or out of the link with dot segments",
    expected="the answer reaches the browser without its Location; redirects within the "
    "server stay under the link",
)
async def test_redirects_stay_under_the_link(
    jp_fetch: Fetch,
    extension: SandboxExtension,
    server_url: str,
    runtime: str,
    observe: Callable[..., None],
) -> None:
    link = await sandbox_with_server(jp_fetch, extension, runtime)
    for location in AWAY:
        answer = await follow(server_url, link, "redirect?" + quote(location, safe=""))
        assert answer.code == 302, location
        assert "Location" not in answer.headers, (location, answer.headers.get("Location"))
    kept = {
        "/landing?x=1": link + "landing?x=1",
        "http://localhost:8000/next": link + "next",
        "landing": link + "landing",
        "./a/../b": link + "b",
    }
    for location, expected in kept.items():
        answer = await follow(server_url, link, "redirect?" + quote(location, safe=""))
        assert answer.headers.get("Location") == expected, location
    observe(f"{len(AWAY)} redirects away: no Location passed on; 4 within: under the link", 13)


@pytest.mark.checklist(
    row=59,
    attack="a port written in other digits than ASCII (superscript two, Arabic-Indic and "
    "fullwidth digits) in the REST API and in a port link",
    expected="400 saying a port is 1 to 65535 in ASCII digits; never a 500",
)
async def test_ports_in_other_digits_are_refused(
    jp_fetch: Fetch,
    extension: SandboxExtension,
    server_url: str,
    runtime: str,
    observe: Callable[..., None],
) -> None:
    link = await sandbox_with_server(jp_fetch, extension, runtime)
    sandbox_id = link.rstrip("/").split("/")[-3]
    # Superscript two (int() refuses it), Arabic-Indic 8000 and fullwidth 8000 (int() takes them).
    for port in ("\u00b2", "\u0668\u0660\u0660\u0660", "\uff18\uff10\uff10\uff10"):
        status, error = await api(jp_fetch, "GET", sandbox_id, "ports", port)
        assert status == 400, port
        assert error["code"] == "invalid_request"
        assert "ASCII digits" in error["message"]
        other = link.replace(f"/{PORT}/", f"/{quote(port)}/")
        answer = await follow(server_url, other)
        assert answer.code == 400, port
        assert b"ASCII digits" in answer.body
    observe("400 'a whole number from 1 to 65535 in ASCII digits' from REST and the link", 6)

"""A sandbox's ports over REST and through the proxy, on a real server and a real engine: links
listed and made, a server in the sandbox reached without the user's login, with the user's
credentials kept from it and its origin-wide headers kept from the browser, WebSockets
relayed, and every wrong link answered alike."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import urlsplit

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPResponse

from jupyter_sandbox.sandbox.host.fair_share import current_owner
from jupyter_sandbox.sandbox.manager import default_owner
from jupyter_sandbox.server_extension import SandboxExtension
from jupyter_sandbox.server_extension.port_links import MASK
from jupyter_sandbox.server_extension.port_relay import SANDBOX_POLICY
from tests.server_extension.conftest import Fetch, api

pytestmark = pytest.mark.integration

PORT = 8000
# A server for the sandbox (stdlib only): it tells what it received, answers with headers a
# proxy must not pass on, redirects to its own root, echoes bodies, and accepts an upgrade,
# after which it echoes raw bytes.
SERVER = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, body, status=200, headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.headers.get("Upgrade") == "websocket":
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Set-Cookie", "planted=1; Path=/")
            self.end_headers()
            self.wfile.flush()
            while data := self.rfile.read1(65536):
                self.wfile.write(data.upper())
                self.wfile.flush()
            return
        if self.path == "/redirect":
            return self.answer(b"", 302, [("Location", "/landing?x=1")])
        if self.path == "/away":
            return self.answer(b"", 302, [("Location", "https://example.org/")])
        extra = [
            ("Set-Cookie", "_xsrf=planted; Path=/"),
            ("Clear-Site-Data", '"cookies"'),
            ("Strict-Transport-Security", "max-age=31536000"),
            ("Content-Type", "application/json"),
            ("X-Mine", "kept"),
        ]
        seen = {"path": self.path, "headers": dict(self.headers.items())}
        self.answer(json.dumps(seen).encode(), 200, extra)

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.answer(body[::-1], 201, [("Content-Type", "application/octet-stream")])

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


async def start_server(extension: SandboxExtension, sandbox_id: str, program: str = SERVER) -> None:
    """``program`` (Python source taking the port) started in the sandbox and listening."""
    manager = extension.manager
    await manager.backend.spawn(sandbox_id, ["python", "-c", program, str(PORT)], environment={})
    for _ in range(300):
        listed = await manager.ports.listening(default_owner(), sandbox_id)
        if PORT in [found.port for found in listed]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the test server did not listen")


async def follow(server_url: str, link: str, path: str = "", **kwargs: Any) -> HTTPResponse:
    """Request ``link`` + ``path`` as a browser would, with no token: any status returned."""
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(server_url))
    kwargs.setdefault("follow_redirects", False)
    return await AsyncHTTPClient().fetch(origin + link + path, raise_error=False, **kwargs)


async def test_a_link_serves_the_sandboxs_server_without_the_users_credentials(
    jp_fetch: Fetch,
    extension: SandboxExtension,
    server_url: str,
    runtime: str,
    jp_base_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    status, created = await api(jp_fetch, "POST", body={"runtime": runtime})
    assert status == 201
    sandbox_id = created["id"]
    status, made = await api(jp_fetch, "GET", sandbox_id, "ports", str(PORT))
    assert status == 200
    link = made["url"]
    assert link.startswith(f"{jp_base_url}sandbox-ports/{sandbox_id}/{PORT}/")
    assert await api(jp_fetch, "GET", sandbox_id, "ports") == (200, {"ports": []})
    nothing = await follow(server_url, link)
    assert nothing.code == 502
    assert b"nothing listens on port 8000" in nothing.body
    assert nothing.headers["X-Content-Type-Options"] == "nosniff"

    await start_server(extension, sandbox_id)
    status, listed = await api(jp_fetch, "GET", sandbox_id, "ports")
    assert status == 200
    [entry] = listed["ports"]
    assert (entry["port"], entry["url"]) == (PORT, link)
    assert "python -c" in entry["command"]

    # What the sandbox's server receives: its own path, none of the user's credentials.
    answer = await follow(
        server_url,
        link,
        "headers?q=1",
        headers={
            "Cookie": "jupyter-session=secret",
            "Authorization": "token secret",
            "Origin": "null",  # what the app's own pages send, from their opaque origin
        },
    )
    assert answer.code == 200
    seen = json.loads(answer.body)
    assert seen["path"] == "/headers?q=1"
    assert {name.lower() for name in seen["headers"]}.isdisjoint({"cookie", "authorization"})
    assert seen["headers"]["X-Forwarded-Prefix"] == link.rstrip("/")
    assert seen["headers"]["Origin"] == "{0.scheme}://{0.netloc}".format(urlsplit(server_url))
    foreign = await follow(server_url, link, "headers", headers={"Origin": "https://x.example"})
    assert json.loads(foreign.body)["headers"]["Origin"] == "https://x.example"
    # What the browser receives: an opaque origin, nothing that acts on Jupyter's origin.
    assert answer.headers["Content-Security-Policy"] == SANDBOX_POLICY
    assert answer.headers["X-Mine"] == "kept"
    assert len(answer.headers.get_list("Date")) == 1
    for name in ("Set-Cookie", "Clear-Site-Data", "Strict-Transport-Security"):
        assert name not in answer.headers

    redirect = await follow(server_url, link, "redirect")
    assert (redirect.code, redirect.headers["Location"]) == (302, link + "landing?x=1")
    away = await follow(server_url, link, "away")  # another origin: no Location passed on
    assert (away.code, away.headers.get("Location")) == (302, None)
    bare = await follow(server_url, link.rstrip("/"))
    assert (bare.code, bare.headers["Location"]) == (302, link)
    posted = await follow(server_url, link, "echo", method="POST", body=b"0123456789" * 10000)
    assert (posted.code, posted.body) == (201, b"9876543210" * 10000)

    # Every wrong link answers the same 404, and no link reaches the log.
    token = link.rstrip("/").rsplit("/", 1)[1]
    page = "{0.scheme}://{0.netloc}".format(urlsplit(server_url)) + link  # a Referer with it
    for wrong in (
        link.replace(token, token[:-1] + ("A" if token[-1] != "A" else "B")),
        link.replace(f"/{PORT}/", "/8001/"),
        link.replace(sandbox_id, "0" * 12),
    ):
        refused = await follow(server_url, wrong, headers={"Referer": page})
        assert refused.code == 404, wrong
    assert token not in caplog.text
    assert MASK in caplog.text

    await websocket_round_trip(server_url, link)


async def websocket_round_trip(server_url: str, link: str) -> None:
    """An upgrade relayed to the sandbox's server, its 101 filtered, then bytes both ways."""
    address = urlsplit(server_url)
    assert address.hostname == "127.0.0.1"
    reader, writer = await asyncio.open_connection("127.0.0.1", address.port)
    try:
        writer.write(
            f"GET {link}ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nCookie: jupyter-session=secret\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.0 101") or head.startswith(b"HTTP/1.1 101"), head
        assert b"set-cookie" not in head.lower()
        assert SANDBOX_POLICY.encode() in head
        writer.write(b"hello through the sandbox")
        received = b""
        while len(received) < len(b"hello through the sandbox"):
            received += await asyncio.wait_for(reader.read(1024), 30)
        assert received == b"HELLO THROUGH THE SANDBOX"
    finally:
        writer.close()


async def test_bad_ports_are_refused(jp_fetch: Fetch, runtime: str) -> None:
    status, created = await api(jp_fetch, "POST", body={"runtime": runtime})
    assert status == 201
    for bad in ("0", "65536", "99999", "http", "-1"):
        status, error = await api(jp_fetch, "GET", created["id"], "ports", bad)
        assert (status, error["code"]) == (400, "invalid_request"), bad
    status, error = await api(jp_fetch, "GET", "0" * 12, "ports", "8000")
    assert (status, error["code"]) == (404, "sandbox_not_found")


async def test_revoking_ends_every_link_made_before(
    jp_fetch: Fetch, extension: SandboxExtension, server_url: str
) -> None:
    status, created = await api(jp_fetch, "POST", body={"runtime": "runc"})
    assert status == 201
    sandbox_id = created["id"]
    await start_server(extension, sandbox_id)
    old = {
        port: (await api(jp_fetch, "GET", sandbox_id, "ports", str(port)))[1]["url"]
        for port in (PORT, 9000)
    }
    assert (await follow(server_url, old[PORT], "headers")).code == 200
    assert await api(jp_fetch, "DELETE", sandbox_id, "ports") == (204, None)
    for link in old.values():  # every port's link, whether or not anything listened there
        assert (await follow(server_url, link, "headers")).code == 404
    status, listed = await api(jp_fetch, "GET", sandbox_id, "ports")
    [entry] = listed["ports"]
    assert entry["url"] != old[PORT]
    assert (await follow(server_url, entry["url"], "headers")).code == 200
    # Twice is fine, and the sandbox is untouched; another's sandbox or a gone one: 404.
    assert await api(jp_fetch, "DELETE", sandbox_id, "ports") == (204, None)
    assert (await follow(server_url, entry["url"], "headers")).code == 404
    status, error = await api(jp_fetch, "DELETE", "0" * 12, "ports")
    assert (status, error["code"]) == (404, "sandbox_not_found")
    assert (await api(jp_fetch, "GET", sandbox_id))[1]["status"] == "running"


async def test_a_links_engine_calls_count_to_the_sandboxs_owner(
    jp_fetch: Fetch, extension: SandboxExtension, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link's requests carry no user, yet what they ask of the engine is its owner's to wait
    for (fair_share.py): never the server's own share, which the culler and the pools use."""
    status, created = await api(jp_fetch, "POST", body={"runtime": "runc"})
    assert status == 201
    sandbox_id = created["id"]
    await start_server(extension, sandbox_id)
    link = (await api(jp_fetch, "GET", sandbox_id, "ports", str(PORT)))[1]["url"]
    engine = extension.manager.backend.engine  # type: ignore[attr-defined]
    counted_to: list[str] = []
    run = engine.run

    async def recording(*args: Any, **kwargs: Any) -> Any:
        counted_to.append(current_owner.get())
        return await run(*args, **kwargs)

    monkeypatch.setattr(engine, "run", recording)
    assert (await follow(server_url, link, "headers")).code == 200
    assert counted_to, "the link's request asked nothing of the engine"
    assert set(counted_to) == {default_owner()}, counted_to

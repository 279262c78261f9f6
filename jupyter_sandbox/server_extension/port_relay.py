"""Relaying one browser request to a server inside a sandbox, and its answer back.

Plain HTTP goes through tornado's own HTTP/1.1 client connection (``HTTP1Connection``) over the
socket the core joined to the sandbox's port (sandbox/ports.py): one request per connection,
its answer streamed to the browser as it arrives (a slow browser holds the sandbox's server
back rather than filling the server's memory). A WebSocket upgrade is relayed byte for byte
once the sandbox's server has answered ``101``.

Everything the sandbox sends is untrusted, and the page it serves lives on Jupyter's own
host. So, in both directions, headers are filtered:

* to the sandbox go neither the user's credentials (``Cookie``, ``Authorization``, XSRF
  headers: the sandbox would hold the user's Jupyter session) nor hop-by-hop headers;
* to the browser go no headers that act on the whole origin (``Set-Cookie`` could plant or
  shadow Jupyter's cookies, ``Clear-Site-Data`` could log the user out, HSTS, Alt-Svc,
  reporting endpoints, a Service-Worker scope), and every answer carries
  ``Content-Security-Policy: sandbox ...`` without ``allow-same-origin``: the page runs in an
  opaque origin that can neither read Jupyter's cookies nor call its API with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from tornado import httputil, iostream
from tornado.http1connection import HTTP1Connection, HTTP1ConnectionParameters
from tornado.web import RequestHandler

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# The user's credentials for Jupyter, which the sandbox must never see.
CREDENTIALS = frozenset({"cookie", "authorization", "x-xsrftoken", "x-csrftoken"})
# What would act on Jupyter's whole origin rather than on the sandbox's page.
ORIGIN_WIDE = frozenset(
    {
        "set-cookie",
        "set-cookie2",
        "clear-site-data",
        "strict-transport-security",
        "alt-svc",
        "service-worker-allowed",
        "nel",
        "report-to",
        "reporting-endpoints",
        "public-key-pins",
    }
)
# An opaque origin: scripts and forms work, Jupyter's cookies and same-origin API stay out.
SANDBOX_POLICY = (
    "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads "
    "allow-pointer-lock allow-presentation"
)
MAX_HEAD = 64 * 1024  # bytes of an answer's status line and headers, at most
HEAD_TIMEOUT = 60.0  # seconds the sandbox's server has to begin its answer
CHUNK = 1024 * 1024  # bytes moved per read, at most


def request_headers(
    headers: httputil.HTTPHeaders, *, prefix: str, origin: str, keep: Iterable[str] = ()
) -> httputil.HTTPHeaders:
    """The browser's headers as the sandbox's server gets them: no credentials, no hop-by-hop
    header (but those in ``keep``), and the prefix it is served under.

    The app's own pages run in an opaque origin, so the browser says ``Origin: null`` for their
    requests: that becomes ``origin`` (the link's), or an app that checks its requests come
    from its own pages (Streamlit, Bokeh, tornado's WebSockets) would refuse its own. What the
    check guards against, a foreign page using the app, the link's token guards against now;
    a real foreign origin goes through as it is, for the app to refuse."""
    kept = {name.lower() for name in keep}
    out = httputil.HTTPHeaders()
    for name, value in headers.get_all():
        lower = name.lower()
        if lower in CREDENTIALS or (lower in HOP_BY_HOP and lower not in kept):
            continue
        if lower == "referer":
            continue  # it holds the link's token
        if lower == "origin" and value == "null":
            value = origin
        out.add(name, value)
    out["X-Forwarded-Prefix"] = prefix.rstrip("/")
    return out


def origin_of(request: httputil.HTTPServerRequest) -> str:
    """The origin the browser reached the link at (scheme and host, as it sent them)."""
    return f"{request.protocol}://{request.host}"


def answer_headers(
    headers: httputil.HTTPHeaders, prefix: str, *, keep: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """The sandbox's answer headers as the browser may get them, redirects kept under
    ``prefix``, and the sandbox's policy added."""
    kept = {name.lower() for name in keep}
    out = []
    for name, value in headers.get_all():
        lower = name.lower()
        if lower in ORIGIN_WIDE or (lower in HOP_BY_HOP and lower not in kept):
            continue
        if lower == "location":
            value = under_prefix(value, prefix)
        out.append((name, value))
    out.append(("Content-Security-Policy", SANDBOX_POLICY))
    out.append(("Referrer-Policy", "no-referrer"))  # the link's token stays in the address
    out.append(("X-Content-Type-Options", "nosniff"))
    return out


def under_prefix(location: str, prefix: str) -> str:
    """A redirect to the server's own root (``/next``, ``http://localhost:8000/next``) taken
    to the same place under ``prefix``; a redirect elsewhere, or a relative one, as it is."""
    parts = urlsplit(location)
    local = not parts.netloc or (parts.hostname or "") in {"localhost", "127.0.0.1", "::1"}
    if not local or not parts.path.startswith("/") or location.startswith("//"):
        return location
    rest = location[location.index(parts.path) :]
    return prefix.rstrip("/") + rest


class _AnswerRelay(httputil.HTTPMessageDelegate):
    """Writes the sandbox's answer into ``handler`` as it arrives."""

    def __init__(self, handler: RequestHandler, prefix: str) -> None:
        self.handler = handler
        self.prefix = prefix

    def headers_received(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
    ) -> None:
        assert isinstance(start_line, httputil.ResponseStartLine)
        handler = self.handler
        handler.clear()
        handler.clear_header("Content-Type")  # the sandbox's, or none
        handler.clear_header("Server")
        if "Date" in headers:  # one Date: the sandbox server's, or else tornado's
            handler.clear_header("Date")
        handler.set_status(start_line.code, start_line.reason or "Unknown")
        for name, value in answer_headers(headers, self.prefix):
            with contextlib.suppress(ValueError):  # a header tornado refuses to send: left out
                handler.add_header(name, value)

    def data_received(self, chunk: bytes) -> Any:
        self.handler.write(chunk)
        return self.handler.flush()  # waits while the browser reads slowly


async def relay_http(
    handler: RequestHandler, sock: socket.socket, path: str, prefix: str, body_limit: int
) -> None:
    """Send ``handler``'s request to the sandbox's server on ``sock`` (at ``path``) and relay
    the answer; the handler is finished after."""
    request = handler.request
    stream = iostream.IOStream(sock, read_chunk_size=CHUNK)
    try:
        connection = HTTP1Connection(
            stream,
            True,
            HTTP1ConnectionParameters(
                no_keep_alive=True,
                chunk_size=CHUNK,  # tornado's default 64 KiB: four times the Python per byte
                max_header_size=MAX_HEAD,
                header_timeout=HEAD_TIMEOUT,
                max_body_size=body_limit,
                decompress=False,  # compressed bytes go to the browser as they are
            ),
        )
        headers = request_headers(request.headers, prefix=prefix, origin=origin_of(request))
        body = request.body or b""
        headers.pop("Content-Length", None)
        if body or request.method in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(body))
        headers["Connection"] = "close"
        assert request.method is not None
        start = httputil.RequestStartLine(request.method, path, "HTTP/1.1")
        await connection.write_headers(start, headers)
        if body:
            await connection.write(body)
        connection.finish()
        relay = _AnswerRelay(handler, prefix)
        if not await connection.read_response(relay):
            raise iostream.StreamClosedError()
        if not handler._finished:
            handler.finish()
    finally:
        stream.close()


async def relay_websocket(
    handler: RequestHandler, sock: socket.socket, path: str, prefix: str
) -> None:
    """Relay a WebSocket upgrade: the request head to the sandbox's server; if it answers 101,
    its (filtered) head to the browser and then the bytes both ways until either side ends;
    otherwise a 502 to the browser."""
    request = handler.request
    upstream = iostream.IOStream(sock, read_chunk_size=CHUNK)
    client = handler.detach()
    try:
        headers = request_headers(
            request.headers,
            prefix=prefix,
            origin=origin_of(request),
            keep=("connection", "upgrade"),
        )
        lines = [f"{request.method} {path} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in headers.get_all()]
        await upstream.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head = await asyncio.wait_for(
            upstream.read_until(b"\r\n\r\n", max_bytes=MAX_HEAD), HEAD_TIMEOUT
        )
        status_line, _, rest = head.decode("latin-1").partition("\r\n")
        if status_line.split(" ")[1:2] != ["101"]:
            message = b"the sandbox's server did not accept the WebSocket\n"
            await client.write(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(message)}\r\n\r\n".encode()
                + message
            )
            return
        answer = httputil.HTTPHeaders.parse(rest)
        kept = answer_headers(answer, prefix, keep=("connection", "upgrade"))
        out = [status_line] + [f"{name}: {value}" for name, value in kept]
        await client.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
        await asyncio.gather(_pump(client, upstream), _pump(upstream, client))
    except (iostream.StreamClosedError, asyncio.TimeoutError, ValueError, OSError):
        pass
    finally:
        client.close()
        upstream.close()


async def _pump(source: iostream.IOStream, target: iostream.IOStream) -> None:
    """``source`` -> ``target`` until either closes; then both are closed."""
    try:
        while True:
            chunk = await source.read_bytes(CHUNK, partial=True)
            await target.write(chunk)  # waits while the target reads slowly
    except iostream.StreamClosedError:
        pass
    finally:
        source.close()
        target.close()

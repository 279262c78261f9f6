"""Relaying one browser request to a server inside a sandbox, and its answer back.

Plain HTTP goes through tornado's own HTTP/1.1 client connection (``HTTP1Connection``) over the
socket the core joined to the sandbox's port (sandbox/operations/ports.py): one request per connection,
its answer streamed to the browser as it arrives (a slow browser holds the sandbox's server
back rather than filling the server's memory). A WebSocket upgrade is relayed byte for byte
once the sandbox's server has answered ``101``. On both ways the answer's head is read by one
strict parser (sandbox/operations/port_answer.py) and the browser gets a head rebuilt from its parts,
never the sandbox's bytes.

An HTTP relay that moves nothing for its idle time (the request's body unread by the
sandbox's server, its answer stalled, or the browser reading none of it) is closed with both its
connections (:class:`IdleTimer`); so is one whose browser leaves (the handler closes the
stream to the sandbox): either way nothing waits on for nobody.

Everything the sandbox sends is untrusted, and the page it serves lives on Jupyter's own
host. So, in both directions, headers are filtered:

* to the sandbox go neither the user's credentials (``Cookie``, ``Authorization``, XSRF
  headers: the sandbox would hold the user's Jupyter session) nor hop-by-hop headers;
* to the browser go only the headers on port_answer.ALLOWED, none that acts on the whole origin
  (``Set-Cookie`` could plant or shadow Jupyter's cookies, ``Clear-Site-Data`` could log the
  user out, HSTS, Alt-Svc, reporting endpoints, a Service-Worker scope), a ``Location`` only as
  a path under the link, and every answer carries
  ``Content-Security-Policy: sandbox ...`` without ``allow-same-origin``: the page runs in an
  opaque origin that can neither read Jupyter's cookies nor call its API with them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from tornado import httputil, iostream
from tornado.http1connection import HTTP1Connection, HTTP1ConnectionParameters
from tornado.web import RequestHandler

from jupyter_sandbox.sandbox.operations.port_answer import (
    MAX_HEAD,
    MalformedAnswer,
    browser_headers,
    parse_answer_head,
)

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
# An opaque origin: scripts and forms work, Jupyter's cookies and same-origin API stay out.
SANDBOX_POLICY = (
    "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads "
    "allow-pointer-lock allow-presentation"
)
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
    headers: Iterable[tuple[str, str]], prefix: str, base: str, *, keep: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """The sandbox's answer headers as the browser may get them (port_answer.browser_headers:
    ``base`` is the path the browser asked for), and the sandbox's policy added."""
    out = browser_headers(headers, prefix, base, keep=keep)
    out.append(("Content-Security-Policy", SANDBOX_POLICY))
    out.append(("Referrer-Policy", "no-referrer"))  # the link's token stays in the address
    out.append(("X-Content-Type-Options", "nosniff"))
    return out


class _StrictConnection(HTTP1Connection):
    """tornado's client connection, but the answer's head is read by parse_answer_head (tornado
    takes a bare LF for a line end, as a browser might not) and handed on rebuilt."""

    malformed: MalformedAnswer | None = None

    def _parse_headers(self, data: bytes) -> tuple[str, httputil.HTTPHeaders]:
        try:
            answer = parse_answer_head(data)
        except MalformedAnswer as exc:
            self.malformed = exc
            raise httputil.HTTPInputError(exc.message) from None
        headers = httputil.HTTPHeaders()
        for name, value in answer.headers:
            headers.add(name, value)
        return f"HTTP/1.1 {answer.code} {answer.reason}", headers


class IdleTimer:
    """Calls ``expire`` once nothing moved for ``idle`` seconds (0: never): :meth:`restart` at
    each move. A stalled read or write of an iostream cannot be given a timeout of its own, but
    closing the stream ends it (StreamClosedError), wherever it waits."""

    def __init__(self, idle: float, expire: Callable[[], None]) -> None:
        self.idle = idle
        self.expired = False
        self._expire = expire
        self._handle: asyncio.TimerHandle | None = None
        self.restart()

    def restart(self) -> None:
        self.cancel()
        if self.idle > 0:
            self._handle = asyncio.get_running_loop().call_later(self.idle, self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self.expired = True
        self._expire()


class RelayIdleError(Exception):
    """An HTTP relay moved nothing for its idle time and was closed."""

    def __init__(self, idle: float) -> None:
        super().__init__(
            f"the sandbox's server neither read the request nor answered for {idle:g} s "
            "(SandboxExtension.port_relay_idle_timeout), so the relay was closed: make it "
            "answer sooner, or ask the server's administrator to raise that setting"
        )


class _AnswerRelay(httputil.HTTPMessageDelegate):
    """Writes the sandbox's answer into ``handler`` as it arrives; each chunk, once the
    browser took it, restarts ``timer``."""

    def __init__(self, handler: RequestHandler, prefix: str, base: str, timer: IdleTimer) -> None:
        self.handler = handler
        self.prefix = prefix
        self.base = base
        self.timer = timer

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
        handler.set_status(start_line.code, start_line.reason)
        for name, value in answer_headers(headers.get_all(), self.prefix, self.base):
            with contextlib.suppress(ValueError):  # a header tornado refuses to send: left out
                handler.add_header(name, value)

    async def data_received(self, chunk: bytes) -> None:
        self.timer.restart()
        self.handler.write(chunk)
        try:
            await self.handler.flush()  # waits while the browser reads slowly
        except iostream.StreamClosedError:
            # The browser left: its handler closes the stream to the sandbox, which ends the
            # relay at its next read (raised here, tornado would log it as an uncaught error).
            return
        self.timer.restart()


async def relay_http(
    handler: RequestHandler,
    stream: iostream.IOStream,
    path: str,
    prefix: str,
    body_limit: int,
    idle: float,
) -> None:
    """Send ``handler``'s request to the sandbox's server on ``stream`` (at ``path``) and relay
    the answer; the handler is finished after, the stream closed. MalformedAnswer when the
    server's answer head is not one the relay reads; RelayIdleError when nothing moved for
    ``idle`` seconds (0: no limit), the browser's connection closed too (part of an answer
    may have reached it, which it must not take for the whole)."""
    request = handler.request

    def expire() -> None:
        stream.close()
        if handler._headers_written and isinstance(request.connection, HTTP1Connection):
            # Part of the answer went out: only a cut connection tells the browser it is not
            # all (and it ends a flush waiting on a browser that reads nothing).
            request.connection.close()

    timer = IdleTimer(idle, expire)
    try:
        connection = _StrictConnection(
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
        # In chunks, each one restarting the timer: a server that takes the body slowly is
        # waited for, one that reads none of it is not.
        for offset in range(0, len(body), CHUNK):
            await connection.write(body[offset : offset + CHUNK])
            timer.restart()
        connection.finish()
        relay = _AnswerRelay(handler, prefix, prefix + path, timer)
        if not await connection.read_response(relay):
            raise connection.malformed or iostream.StreamClosedError()
        if not handler._finished:
            handler.finish()
    except iostream.StreamClosedError:
        if timer.expired:
            raise RelayIdleError(idle) from None
        raise
    finally:
        timer.cancel()
        stream.close()


async def relay_websocket(
    handler: RequestHandler, upstream: iostream.IOStream, path: str, prefix: str
) -> None:
    """Relay a WebSocket upgrade: the request head to the sandbox's server on ``upstream``; if
    it answers 101, its (filtered) head to the browser and then the bytes both ways until
    either side ends; otherwise a 502 to the browser. Both streams are closed after."""
    request = handler.request
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
        try:
            answer = parse_answer_head(head)
        except MalformedAnswer:
            answer = None
        upgrade = answer.get("Upgrade") if answer is not None else None
        if answer is None or answer.code != 101 or (upgrade or "").lower() != "websocket":
            message = b"the sandbox's server did not accept the WebSocket\n"
            await client.write(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(message)}\r\n\r\n".encode()
                + message
            )
            return
        # Rebuilt from the parsed parts: the status line is the relay's, Upgrade and
        # Connection say what the relay does, the rest is what the browser may get.
        out = ["HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade"]
        kept = answer_headers(answer.headers, prefix, prefix + path)
        out += [f"{name}: {value}" for name, value in kept]
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

"""TLS inspection of one CONNECT: the proxy is the server to the sandbox and the client upstream.

After the proxy has decided a CONNECT (egress_proxy.py) and answered it 200, it does TLS as the
server with a leaf for the CONNECT host signed by the sandbox's own CA (tls_ca.py), reads one
HTTP/1.1 request, and sends it over its own TLS to the real host, verifying the host's
certificate and name with the host's trust store (``ssl.create_default_context()``). On the way
it refuses what would send the request, or a credential, somewhere else than the name the
policy judged: a TLS server name (SNI) or a ``Host`` that is not the CONNECT host is a ``421``
(domain fronting); an upstream certificate that does not verify is a ``502``; each refusal goes
to the audit with its reason. It adds the credential headers for the host (replacing headers of
the same names the sandbox sent) and records their names, never their values.

One request per connection: the request goes upstream with ``Connection: close`` and the
answer comes back with it, so the answer's body is simply everything until the server closes
(no framing of the answer to get wrong) and every request is decided with its own connection;
urllib, requests, pip and curl open the next connection themselves. The request's body is
streamed by its framing (Content-Length or chunked), never buffered whole. Heads are read
strictly, as request_head.py reads the proxy's own requests (CRLF only, ASCII digits, one Host,
MAX_HEAD bytes within HEAD_TIMEOUT).

Each inspected connection runs on a thread of its own with blocking sockets (the relay's
threads, forwarder.Workers): OpenSSL releases the GIL while it encrypts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from jupyter_sandbox.sandbox.host.http_head import TOKEN, split_head
from jupyter_sandbox.sandbox.network.credentials import credential_names
from jupyter_sandbox.sandbox.network.forwarder import Workers
from jupyter_sandbox.sandbox.network.request_head import (
    AUTHORITY,
    BUFFER,
    HEAD_TIMEOUT,
    MAX_HEAD,
    MAX_HEADERS,
    BadRequest,
    answer_bytes,
    check_host,
    split_request,
)
from jupyter_sandbox.sandbox.network.sni import Incomplete, is_tls, read_first_record, server_name
from jupyter_sandbox.sandbox.network.tls_ca import LeafMinter

# Origin-form only (a path): the CONNECT named the authority.
_REQUEST_LINE = re.compile(rb"(" + TOKEN + rb") (/[\x21-\x7e]*) (HTTP/1\.1)")
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: [\t\x20-\x7e\x80-\xff]*)?")
# Hop-by-hop headers, and Expect (the proxy answers 100 Continue itself): not sent upstream.
_DROPPED = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"upgrade",
    b"expect",
}
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,15})(;[\t\x20-\x7e]*)?")
MAX_LINE = 8192  # bytes of a chunk-size or trailer line
MAX_TRAILERS = 100

_WORKERS = Workers()
log = logging.getLogger(__name__)


class Refusal(Exception):
    """A request the proxy answers itself: ``status``, ``reason`` and the audited ``rule``."""

    def __init__(self, status: int, reason: str, rule: str) -> None:
        super().__init__(rule)
        self.status = status
        self.reason = reason
        self.rule = rule


@dataclass(frozen=True)
class InspectedRequest:
    method: str
    head: bytes  # rewritten for upstream
    length: int | None  # Content-Length, or None
    chunked: bool
    expects_continue: bool
    added: tuple[str, ...]  # names of the credential headers added


def rewrite_request(
    head: bytes, host: str, port: int, credentials: list[tuple[str, str]]
) -> InspectedRequest:
    """The request ``head`` read inside a CONNECT to ``host:port``, checked and rewritten for
    upstream with ``credentials`` (header name, value) added. BadRequest for a malformed head,
    Refusal for a Host that is not the CONNECT host."""
    line, fields = split_request(
        head, _REQUEST_LINE, "send METHOD /path HTTP/1.1 (origin-form) inside the tunnel"
    )
    hosts = [value for name, value in fields if name.lower() == b"host"]
    if not hosts:
        raise BadRequest("a request without a Host header")
    authority = AUTHORITY.fullmatch(hosts[0])
    shown = hosts[0].decode("latin-1")[:100]
    if authority is None:
        raise Refusal(421, "Misdirected Request", f"Host {shown} is not a host[:port]")
    try:
        named = check_host(authority[1])
    except BadRequest:
        named = ""
    named_port = 443 if authority[2] is None else int(authority[2])
    if named != host or named_port != port:
        raise Refusal(
            421, "Misdirected Request", f"Host {shown} is not the CONNECT host {host}:{port}"
        )
    length: int | None = None
    chunked = False
    expects = False
    replaced = {name.lower().encode("ascii") for name, _ in credentials}
    out = [line[0]]
    for name, value in fields:
        lower = name.lower()
        if lower == b"content-length":
            if not value.isdigit() or len(value) > 18:
                raise BadRequest("Content-Length must be ASCII digits")
            length = int(value)
        elif lower == b"transfer-encoding":
            if value.lower() != b"chunked":
                raise BadRequest("the only Transfer-Encoding accepted is chunked")
            chunked = True
        elif lower == b"expect":
            if value.lower() != b"100-continue":
                raise Refusal(417, "Expectation Failed", "only Expect: 100-continue is known")
            expects = True
        if lower in _DROPPED or lower in replaced:
            continue
        out.append(name + b": " + value)
    out += [f"{name}: {value}".encode("latin-1") for name, value in credentials]
    out.append(b"Connection: close")
    return InspectedRequest(
        line[1].decode("ascii"),
        b"\r\n".join(out) + b"\r\n\r\n",
        length,
        chunked,
        expects,
        tuple(sorted({name for name, _ in credentials})),
    )


def rewrite_response(head: bytes) -> tuple[int, bytes]:
    """An upstream answer's status and head, with ``Connection: close`` as its only
    connection header. ValueError for a malformed head."""
    line, fields = split_head(head, _STATUS_LINE, MAX_HEADERS, {b"content-length"})
    if line is None:
        raise ValueError("a malformed status line")
    out = [head.split(b"\r\n", 1)[0]]
    out += [name + b": " + value for name, value in fields if name.lower() not in _DROPPED]
    out.append(b"Connection: close")
    return int(line[1]), b"\r\n".join(out) + b"\r\n\r\n"


class Stream:
    """Buffered reads and writes over a blocking socket, in TLS (an SSLObject on memory BIOs,
    so that bytes the proxy read before the handshake are fed in first) or plain."""

    def __init__(self, sock: socket.socket, tls: ssl.SSLObject | None, received: bytes) -> None:
        self.sock = sock
        self.tls = tls
        self.buffer = bytearray()
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._plain = bytearray(BUFFER)  # what recv decrypts into
        if tls is None:
            self.buffer += received
        else:
            self._in.write(received)

    @classmethod
    def server(cls, sock: socket.socket, context: ssl.SSLContext, received: bytes) -> Stream:
        stream = cls(sock, None, b"")
        stream.tls = context.wrap_bio(stream._in, stream._out, server_side=True)
        stream._in.write(received)
        return stream

    @classmethod
    def client(cls, sock: socket.socket, context: ssl.SSLContext, host: str) -> Stream:
        stream = cls(sock, None, b"")
        stream.tls = context.wrap_bio(stream._in, stream._out, server_hostname=host)
        return stream

    def _flush(self) -> None:
        data = self._out.read()
        if data:
            self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(BUFFER)
        if chunk:
            self._in.write(chunk)
        else:
            self._in.write_eof()

    def handshake(self) -> None:
        assert self.tls is not None
        while True:
            try:
                self.tls.do_handshake()
            except ssl.SSLWantReadError:
                self._flush()
                self._fill()
                continue
            self._flush()
            return

    def recv(self) -> bytes:
        """What is buffered, else the next bytes to come; b"" at the end. In TLS, everything
        that the bytes read so far decrypt to (up to BUFFER), many records at once, so that the
        other side encrypts and sends them in one go (docs/explanation/performance.md, "HTTPS
        through TLS inspection", has what one record at a time cost)."""
        if self.buffer:
            data = bytes(self.buffer)
            self.buffer.clear()
            return data
        if self.tls is None:
            return self.sock.recv(BUFFER)
        out = self._plain
        view = memoryview(out)
        filled = 0
        while True:
            try:
                while filled < len(out):
                    # With a buffer, read returns the count (typeshed says bytes).
                    count = cast(int, self.tls.read(len(out) - filled, view[filled:]))
                    if not count:
                        break
                    filled += count
                return bytes(view[:filled])
            except ssl.SSLWantReadError:
                if filled:
                    return bytes(view[:filled])
                self._flush()
                self._fill()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return bytes(view[:filled])

    def send(self, data: bytes) -> None:
        if self.tls is None:
            self.sock.sendall(data)
            return
        view = memoryview(data)
        while view:
            written = self.tls.write(view)
            view = view[written:]
            self._flush()

    def close(self) -> None:
        """Ends TLS with a close_notify (a client may otherwise take the end for a cut)."""
        if self.tls is not None:
            with contextlib.suppress(ssl.SSLError, OSError):
                self.tls.unwrap()
                self._flush()

    def read_head(self, deadline: float, loop_time: Callable[[], float]) -> bytes:
        """One head (to its empty line), at most MAX_HEAD bytes, by ``deadline``."""
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                if end + 4 > MAX_HEAD:
                    raise BadRequest("request head too large")
                head = bytes(self.buffer[: end + 4])
                del self.buffer[: end + 4]
                return head
            if len(self.buffer) > MAX_HEAD:
                raise BadRequest("head too large")
            left = deadline - loop_time()
            if left <= 0:
                raise TimeoutError("no whole head in time")
            self.sock.settimeout(left)
            chunk = self._recv_raw()
            if not chunk:
                raise EOFError("closed before a whole head")
            self.buffer += chunk

    def _recv_raw(self) -> bytes:
        saved = bytes(self.buffer)
        self.buffer.clear()
        data = self.recv()
        self.buffer += saved
        return data

    def read_line(self) -> bytes:
        """A line ending in CRLF (returned without it), at most MAX_LINE bytes."""
        while True:
            end = self.buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 2]
                if b"\r" in line or b"\n" in line:
                    raise BadRequest("a bare CR or LF in the chunked body")
                return line
            if len(self.buffer) > MAX_LINE:
                raise BadRequest("a chunk line too long")
            chunk = self._recv_raw()
            if not chunk:
                raise EOFError("closed inside the body")
            self.buffer += chunk

    def copy_exactly(self, count: int, to: Stream) -> None:
        while count:
            if not self.buffer:
                chunk = self._recv_raw()
                if not chunk:
                    raise EOFError("closed inside the body")
                self.buffer += chunk
            piece = bytes(self.buffer[:count])
            del self.buffer[: len(piece)]
            to.send(piece)
            count -= len(piece)

    def copy_chunked(self, to: Stream) -> None:
        """A chunked body, passed on as it is framed, to its last chunk and trailers."""
        while True:
            line = self.read_line()
            match = _CHUNK_LINE.fullmatch(line)
            if match is None:
                raise BadRequest("a malformed chunk size line")
            size = int(match[1], 16)
            to.send(line + b"\r\n")
            if size == 0:
                break
            self.copy_exactly(size, to)
            if self.read_line() != b"":
                raise BadRequest("a chunk not followed by CRLF")
            to.send(b"\r\n")
        for _ in range(MAX_TRAILERS + 1):
            trailer = self.read_line()
            to.send(trailer + b"\r\n")
            if trailer == b"":
                return
        raise BadRequest("too many trailer lines")

    def copy_to_end(self, to: Stream) -> None:
        while chunk := self.recv():
            to.send(chunk)


@dataclass
class Inspection:
    """What one inspected CONNECT needs from the proxy."""

    host: str
    port: int
    minter: LeafMinter
    upstream_context: ssl.SSLContext
    credentials: Callable[[str, int], list[tuple[str, str]]]
    # Audit one decision: (method, allowed, rule, names of the credentials added).
    record: Callable[[str, bool, str, list[str]], None]


def upstream_context(extra_ca_file: str = "") -> ssl.SSLContext:
    """The host's trust store (``ssl.create_default_context()``: the certificate and its
    name verified), HTTP/1.1; ``extra_ca_file``: one more CA, for tests only."""
    context = ssl.create_default_context()
    if extra_ca_file:
        context.load_verify_locations(extra_ca_file)
    context.set_alpn_protocols(["http/1.1"])
    return context


async def inspect(
    client: socket.socket, received: bytes, upstream: socket.socket, inspection: Inspection
) -> None:
    """Serve one inspected CONNECT (already answered 200) on a thread; the caller closes the
    sockets."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def finish(error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def run() -> None:
        error: BaseException | None = None
        try:
            serve(client, received, upstream, inspection)
        except Exception as exc:  # reported on the loop, where the tunnel keeper logs it
            error = exc
        finally:
            loop.call_soon_threadsafe(finish, error)

    client.setblocking(True)
    upstream.setblocking(True)
    _WORKERS.submit(run)
    try:
        await done
    finally:  # cancelled (the proxy stops): end the thread's waits
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _answer(stream: Stream, status: int, reason: str, text: str, denied: str = "") -> None:
    """The proxy's own answer (request_head.answer_bytes) inside the sandbox's TLS, and the end
    of it."""
    with contextlib.suppress(OSError, ssl.SSLError):
        stream.send(answer_bytes(status, reason, text, denied))
        stream.close()


def serve(
    client: socket.socket, received: bytes, upstream: socket.socket, inspection: Inspection
) -> None:
    """Blocking: TLS with the sandbox, one request, TLS upstream, the answer back."""
    host, port = inspection.host, inspection.port
    deadline = time.monotonic() + HEAD_TIMEOUT
    client.settimeout(HEAD_TIMEOUT)
    # The server name the client asks for, read off its ClientHello (sni.py) before the
    # handshake: a context shared by connections has no place for one connection's name.
    try:
        first = read_first_record(client, received)
    except (OSError, TimeoutError):
        return
    if not is_tls(first):
        inspection.record("CONNECT", False, "not TLS inside a CONNECT that is inspected", [])
        return
    try:
        name = server_name(first)
    except (ValueError, Incomplete):
        inspection.record("CONNECT", False, "an unreadable TLS ClientHello", [])
        return
    sandbox = Stream.server(client, inspection.minter.context(host), first)
    try:
        sandbox.handshake()
    except (ssl.SSLError, OSError, TimeoutError) as exc:
        inspection.record("CONNECT", False, f"TLS with the sandbox's client failed: {exc}", [])
        return
    if name is not None and name.lower().rstrip(".") != host:
        rule = f"TLS server name {name[:100]} is not the CONNECT host {host}"
        inspection.record("CONNECT", False, rule, [])
        # The request is read (within the head's bounds) before the answer: closing on bytes
        # not read resets the connection, and the client would see the reset, not the 421.
        with contextlib.suppress(BadRequest, EOFError, TimeoutError, OSError, ssl.SSLError):
            sandbox.read_head(deadline, time.monotonic)
        _answer(sandbox, 421, "Misdirected Request", f"refused: {rule}", rule)
        return
    try:
        head = sandbox.read_head(deadline, time.monotonic)
    except BadRequest as exc:
        _answer(sandbox, 400, "Bad Request", f"bad request inside the tunnel: {exc}")
        return
    except (EOFError, TimeoutError, OSError, ssl.SSLError):
        return
    try:
        headers = inspection.credentials(host, port)  # fresh for each request
    except Exception as exc:  # a broken store refuses the request; it never leaks
        # Only the type: a message of a broken store's parser could quote its content.
        log.error("credentials for %s:%s unreadable: %s", host, port, type(exc).__name__)
        rule = "the owner's credentials could not be read (see the server's log)"
        inspection.record("CONNECT", False, rule, [])
        _answer(sandbox, 502, "Bad Gateway", f"{host}:{port}: {rule}")
        return
    names = (credential_names(headers) or ["(unnamed)"]) if headers else []
    try:
        request = rewrite_request(head, host, port, headers)
    except Refusal as refusal:
        inspection.record("CONNECT", False, refusal.rule, [])
        _answer(sandbox, refusal.status, refusal.reason, f"refused: {refusal.rule}", refusal.rule)
        return
    except BadRequest as exc:
        _answer(sandbox, 400, "Bad Request", f"bad request inside the tunnel: {exc}")
        return
    client.settimeout(None)  # the body and the answer take what they take, as in a tunnel
    upstream.settimeout(HEAD_TIMEOUT)
    server = Stream.client(upstream, inspection.upstream_context, host)
    try:
        server.handshake()
    except ssl.SSLCertVerificationError as exc:
        rule = f"the upstream certificate of {host} did not verify: {exc.verify_message}"
        inspection.record(request.method, False, rule, [])
        _answer(sandbox, 502, "Bad Gateway", f"refused: {rule}", rule)
        return
    except (ssl.SSLError, OSError, TimeoutError) as exc:
        rule = f"TLS with {host} failed: {exc}"
        inspection.record(request.method, False, rule, [])
        _answer(sandbox, 502, "Bad Gateway", rule)
        return
    upstream.settimeout(None)
    added = ", ".join(request.added)
    inspection.record(
        request.method, True, f"inspected; added {added}" if added else "inspected", names
    )
    try:
        server.send(request.head)
        if request.expects_continue:
            sandbox.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        if request.chunked:
            sandbox.copy_chunked(server)
        elif request.length:
            sandbox.copy_exactly(request.length, server)
        while True:
            upstream.settimeout(HEAD_TIMEOUT * 10)
            status, answer_head = rewrite_response(
                server.read_head(time.monotonic() + HEAD_TIMEOUT * 10, time.monotonic)
            )
            upstream.settimeout(None)
            if 100 <= status < 200 and status != 101:
                continue  # an interim answer (the proxy sent its own 100 Continue)
            sandbox.send(answer_head)
            break
        server.copy_to_end(sandbox)
        sandbox.close()
    except BadRequest as exc:
        _answer(sandbox, 400, "Bad Request", f"bad request inside the tunnel: {exc}")
    except ValueError as exc:
        _answer(sandbox, 502, "Bad Gateway", f"{host} sent a malformed answer: {exc}")
    except (EOFError, TimeoutError, OSError, ssl.SSLError):
        return

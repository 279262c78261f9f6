"""What a sandbox's program asks the egress proxy, as the proxy reads it: one request head.

A client of the proxy sends either ``CONNECT host:port`` (a tunnel, for https) or a plain HTTP
request with an absolute ``http://`` URI. Only the head is read (at most MAX_HEAD bytes, within
HEAD_TIMEOUT); anything else is a ``400`` that says what the proxy accepts. For plain HTTP the
head is rewritten for the upstream server: the path instead of the URI, a ``Host`` header taken
from the URI's authority (so the name the policy judged is the name the server is asked for,
whatever ``Host`` the client sent), no hop-by-hop or proxy headers, and ``Connection: close``
(one request per connection, so each one is decided and audited).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.host.http_head import TOKEN, split_head
from jupyter_sandbox.sandbox.host.timeouts import within
from jupyter_sandbox.sandbox.network.policy import normalize_host

MAX_HEAD = 64 * 1024  # bytes a request head may take
MAX_HEADERS = 100  # header lines a request head may have
HEAD_TIMEOUT = 30.0  # seconds from a request's first byte to the end of its head
BUFFER = 256 * 1024  # bytes asked for per read
_HOST = re.compile(r"^[a-z0-9_]([a-z0-9_.-]{0,252})$")
_DROPPED = {b"proxy-authorization", b"proxy-connection", b"connection", b"keep-alive", b"host"}
_REQUEST_LINE = re.compile(rb"(" + TOKEN + rb") ([\x21-\x7e]+) (HTTP/1\.[01])")
# host:port, the host a name or a bracketed IPv6 literal, the port 1 to 5 ASCII digits.
AUTHORITY = re.compile(rb"(\[[0-9A-Fa-f:.]+\]|[^\[\]:@/?#]+)(?::([0-9]{1,5}))?")
_ABSOLUTE = re.compile(rb"[hH][tT][tT][pP]://([^/?#]*)([/?][^#]*)?(#.*)?")
_PROXY_SCHEMES = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://")
# Headers whose second copy would let the proxy and the server disagree on the body's length.
_ONCE = {b"content-length", b"transfer-encoding", b"host"}


class BadRequest(SandboxError):
    """A request the proxy cannot parse; answered with 400 by the proxy itself (no REST
    handler sees it, but it is caught as a SandboxError like every other error of the core)."""

    code = "bad_proxy_request"
    http_status = 400


@dataclass(frozen=True)
class ProxyRequest:
    method: str
    host: str
    port: int
    head: bytes  # for plain HTTP: the rewritten head to send upstream; empty for CONNECT


def split_request(
    head: bytes, request_line: re.Pattern[bytes], remedy: str
) -> tuple[re.Match[bytes], list[tuple[bytes, bytes]]]:
    """``head``'s request line, which must match ``request_line``, and its header fields, read
    strictly (CRLF only, at most MAX_HEADERS, one Host, Content-Length and Transfer-Encoding
    each); BadRequest otherwise, saying ``remedy`` for a malformed request line."""
    try:
        line, fields = split_head(head, request_line, MAX_HEADERS, _ONCE)
    except ValueError as exc:
        raise BadRequest(f"malformed request head: {exc}") from None
    if line is None:
        raise BadRequest(f"malformed request line: {remedy}")
    return line, fields


def parse_head(head: bytes) -> ProxyRequest:
    """The target of a proxy request head (request line and headers, ending in the blank line).

    Strict, because the head is the sandbox's and a lenient reading is where the proxy and the
    server could disagree (a bare LF that the server takes for a line end smuggles a header past
    the proxy): lines end in CRLF only, the request line and each header line are exactly their
    grammar (ASCII tokens, ASCII digits), at most MAX_HEADERS headers, one Host, one
    Content-Length and no Transfer-Encoding beside it. Everything else is BadRequest."""
    request_line, headers = split_request(
        head, _REQUEST_LINE, "send METHOD target HTTP/1.1, the target in printable ASCII"
    )
    method, version = request_line[1].decode("ascii"), request_line[3].decode("ascii")
    if method == "CONNECT":
        authority = AUTHORITY.fullmatch(request_line[2])
        if authority is None or authority[2] is None:
            raise BadRequest("CONNECT needs host:port (the port in ASCII digits)")
        host, port = check_host(authority[1]), _check_port(authority[2], "CONNECT needs host:port")
        return ProxyRequest(method, host, port, b"")
    url = _ABSOLUTE.fullmatch(request_line[2])
    if url is None:
        if _PROXY_SCHEMES.match(request_line[2]):
            raise BadRequest(
                "send an absolute http:// URI to the proxy (https goes through CONNECT)"
            )
        raise BadRequest("send an absolute http:// URI to the proxy, not a path")
    authority = AUTHORITY.fullmatch(url[1])
    if authority is None:
        raise BadRequest("invalid host or port in the URI (host, host:port or [IPv6]:port)")
    host = check_host(authority[1])
    port = 80 if authority[2] is None else _check_port(authority[2], "invalid port in the URI")
    path = (url[2] or b"/").decode("ascii")
    if not path.startswith("/"):  # http://host?query
        path = "/" + path
    host_header = f"[{host}]" if ":" in host else host
    if port != 80:
        host_header += f":{port}"
    out = [f"{method} {path} {version}".encode("ascii"), b"Host: " + host_header.encode("ascii")]
    out += [name + b": " + value for name, value in headers if name.lower() not in _DROPPED]
    out.append(b"Connection: close")
    return ProxyRequest(method, host, port, b"\r\n".join(out) + b"\r\n\r\n")


def with_headers(head: bytes, added: list[tuple[str, str]]) -> bytes:
    """``head`` (a head parse_head rewrote for the upstream) with the ``added`` headers (the
    owner's credentials), each replacing every header of the same name the sandbox sent: the
    upstream then sees one copy, the proxy's, and the sandbox cannot choose which one it reads.
    A name or value that could end a header line is refused (ValueError), never sent."""
    if not added:
        return head
    names: set[bytes] = set()
    lines: list[bytes] = []
    for key, value in added:
        raw_key, raw_value = key.encode("ascii", "replace"), value.encode("ascii", "replace")
        if (
            not (key + value).isascii()
            or not re.fullmatch(TOKEN, raw_key)
            or not re.fullmatch(rb"[\x20-\x7e]*", raw_value)
            or raw_key.lower() in _DROPPED | _ONCE
        ):
            raise ValueError("a credential's header name or value is not a valid header")
        names.add(raw_key.lower())
        lines.append(raw_key + b": " + raw_value)
    request_line, *headers = head[: -len(b"\r\n\r\n")].split(b"\r\n")
    kept = [line for line in headers if line.split(b":", 1)[0].lower() not in names]
    # Before the proxy's Connection: close, the last line parse_head writes.
    return b"\r\n".join([request_line, *kept[:-1], *lines, kept[-1]]) + b"\r\n\r\n"


def _check_port(digits: bytes, message: str) -> int:
    port = int(digits)  # ASCII digits: the pattern said so
    if not 0 < port < 65536:
        raise BadRequest(f"{message} (a port from 1 to 65535)")
    return port


def is_address(host: str) -> bool:
    """Whether ``host`` is an IP literal (v4 or v6) rather than a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def check_host(raw: bytes) -> str:
    """The host of an authority (a name or a bracketed IPv6 literal), normalized."""
    if raw.startswith(b"["):
        try:  # a literal with a zone (%eth0) or a bad form is no address to connect to
            return str(ipaddress.IPv6Address(raw[1:-1].decode("ascii")))
        except ValueError:
            raise BadRequest("invalid host name (an IPv6 literal in [brackets])") from None
    host = normalize_host(raw.decode("latin-1"))
    if not _HOST.match(host):
        raise BadRequest("invalid host name")
    return host


async def read_head(
    client: socket.socket, received: bytes, started: Callable[[], None]
) -> tuple[bytes, bytes]:
    """The request head from ``client`` (starting with ``received``, bytes read already) and
    the bytes after it; ``started()`` is called once its first byte is in (an idle tunnel may
    wait for that indefinitely; the head's time limit starts then)."""
    loop = asyncio.get_running_loop()
    data = bytearray(received)
    if not data:
        first = await loop.sock_recv(client, BUFFER)  # an idle tunnel waits here
        if not first:
            raise ClientClosed("the client closed the connection before sending a request")
        data += first
    started()
    deadline = loop.time() + HEAD_TIMEOUT
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            raise BadRequest("request head too large")
        chunk = await within(loop.sock_recv(client, BUFFER), deadline - loop.time())
        if not chunk:
            raise ClientClosed("the client closed the connection before sending a request")
        data += chunk
    end = data.index(b"\r\n\r\n") + 4
    if end > MAX_HEAD:  # one read brings up to BUFFER bytes: the head may be past the limit
        raise BadRequest("request head too large")
    return bytes(data[:end]), bytes(data[end:])


class ClientClosed(BadRequest):
    """The client went away before sending a request: nothing to answer."""


def answer_bytes(status: int, reason: str, body: str, denied: str = "") -> bytes:
    """The proxy's own answer: ``status`` and a one-line text ``body``; ``denied`` (the rule
    that refused the request) also goes in the X-Jupyter-Sandbox-Denied header."""
    payload = (body + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n"
    )
    if denied:
        head += f"X-Jupyter-Sandbox-Denied: {denied[:200]}\r\n"
    return head.encode("latin-1", "replace") + b"\r\n" + payload


async def answer(
    client: socket.socket, status: int, reason: str, body: str, denied: str = ""
) -> None:
    """Answer ``client`` with :func:`answer_bytes`, whatever state the client is in."""
    with contextlib.suppress(OSError):
        await asyncio.get_running_loop().sock_sendall(
            client, answer_bytes(status, reason, body, denied)
        )

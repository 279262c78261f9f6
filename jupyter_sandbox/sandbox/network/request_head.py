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
from urllib.parse import urlsplit

from ..timeouts import within
from .policy import normalize_host

MAX_HEAD = 64 * 1024  # bytes a request head may take
HEAD_TIMEOUT = 30.0  # seconds from a request's first byte to the end of its head
BUFFER = 256 * 1024  # bytes asked for per read
_HOST = re.compile(r"^[a-z0-9_]([a-z0-9_.-]{0,252})$")
_DROPPED = {"proxy-authorization", "proxy-connection", "connection", "keep-alive", "host"}


class BadRequest(Exception):
    """A request the proxy cannot parse; answered with 400."""


@dataclass(frozen=True)
class ProxyRequest:
    method: str
    host: str
    port: int
    head: bytes  # for plain HTTP: the rewritten head to send upstream; empty for CONNECT


def parse_head(head: bytes) -> ProxyRequest:
    """The target of a proxy request head (request line and headers, up to the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("malformed request line")
    method, target, version = parts
    if method == "CONNECT":
        host, sep, port_text = target.rpartition(":")
        if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise BadRequest("CONNECT needs host:port")
        return ProxyRequest(method, _check_host(host), int(port_text), b"")
    url = urlsplit(target)
    if url.scheme.lower() != "http" or not url.hostname:
        raise BadRequest("send an absolute http:// URI to the proxy (https goes through CONNECT)")
    try:
        port = url.port or 80
    except ValueError:
        raise BadRequest("invalid port in the URI") from None
    host = _check_host(url.hostname)
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    authority = f"[{host}]" if ":" in host else host
    if port != 80:
        authority += f":{port}"
    headers = [f"{method} {path} {version}", f"Host: {authority}"]
    for line in lines[1:]:
        if not line:
            continue
        name, sep, _value = line.partition(":")
        if not sep or name != name.strip():
            raise BadRequest("malformed header line")
        if name.lower() not in _DROPPED:
            headers.append(line)
    headers.append("Connection: close")
    return ProxyRequest(method, host, port, ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1"))


def is_address(host: str) -> bool:
    """Whether ``host`` is an IP literal (v4 or v6) rather than a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _check_host(host: str) -> str:
    host = normalize_host(host)
    if ":" in host:  # an IPv6 literal: ipaddress decides in the guard
        return host
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
            raise ClientClosed()
        data += first
    started()
    deadline = loop.time() + HEAD_TIMEOUT
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            raise BadRequest("request head too large")
        chunk = await within(loop.sock_recv(client, BUFFER), deadline - loop.time())
        if not chunk:
            raise ClientClosed()
        data += chunk
    end = data.index(b"\r\n\r\n") + 4
    return bytes(data[:end]), bytes(data[end:])


class ClientClosed(BadRequest):
    """The client went away before sending a request: nothing to answer."""


async def answer(
    client: socket.socket, status: int, reason: str, body: str, denied: str = ""
) -> None:
    """Answer ``client`` with ``status`` and a one-line text ``body``; ``denied`` (the rule
    that refused the request) also goes in the X-Jupyter-Sandbox-Denied header."""
    payload = (body + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n"
    )
    if denied:
        head += f"X-Jupyter-Sandbox-Denied: {denied[:200]}\r\n"
    with contextlib.suppress(OSError):
        await asyncio.get_running_loop().sock_sendall(
            client, head.encode("latin-1", "replace") + b"\r\n" + payload
        )

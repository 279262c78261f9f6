"""The egress proxy's reading of a sandbox's request head: CONNECT and absolute-form HTTP
(sandbox/network/request_head.py), and of the first bytes through a CONNECT when they are TLS
(the ClientHello's server name, sni.py: ValueError or Incomplete when it cannot be read).

BadRequest is the expected answer to anything malformed (the proxy answers it with a 400). A
head that parses must keep the proxy's promises to the upstream server: every line of the
rewritten head ends in CRLF with no other CR or LF, exactly one Host header (the proxy's own,
naming the host and port the policy judged), and a port from 1 to 65535.
"""

from __future__ import annotations

import ipaddress

from jupyter_sandbox.sandbox.network.request_head import MAX_HEAD, BadRequest, parse_head
from jupyter_sandbox.sandbox.network.sni import Incomplete, is_tls, server_name

MAX_LEN = 4096


def fuzz_one_input(data: bytes) -> None:
    if is_tls(data):
        try:
            name = server_name(data)
        except (ValueError, Incomplete):
            return
        assert name is None or isinstance(name, str)
        return
    try:
        request = parse_head(data)
    except BadRequest:
        return
    assert 0 < request.port < 65536, request
    assert request.host.isascii(), request
    if ":" in request.host:
        ipaddress.IPv6Address(request.host)
    if request.method == "CONNECT":
        assert request.head == b"", request
        return
    assert len(request.head) <= MAX_HEAD + 256, len(request.head)
    assert request.head.endswith(b"\r\n\r\n"), request.head
    lines = request.head[:-4].split(b"\r\n")
    assert not any(b"\r" in line or b"\n" in line for line in lines), request.head
    hosts = [line for line in lines[1:] if line.lower().startswith(b"host:")]
    authority = f"[{request.host}]" if ":" in request.host else request.host
    if request.port != 80:
        authority += f":{request.port}"
    assert hosts == [b"Host: " + authority.encode()], request.head
    assert lines[-1] == b"Connection: close", request.head

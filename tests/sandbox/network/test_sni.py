"""Reading the TLS server name (SNI) from a real ClientHello (no engine)."""

from __future__ import annotations

import socket
import ssl

import pytest

from jupyter_sandbox.sandbox.network.sni import (
    Incomplete,
    is_tls,
    read_first_record,
    server_name,
)


def client_hello(name: str | None) -> bytes:
    """The first bytes Python's own TLS client sends for ``name``."""
    context = ssl.create_default_context()
    if name is None:
        context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_server_name_of_a_real_client_hello() -> None:
    hello = client_hello("Allowed.Test")
    assert is_tls(hello)
    assert server_name(hello) == "allowed.test"
    assert server_name(client_hello(None)) is None


def test_partial_and_foreign_data() -> None:
    hello = client_hello("allowed.test")
    with pytest.raises(Incomplete):
        server_name(hello[:40])
    assert not is_tls(b"GET / HTTP/1.1\r\n")
    with pytest.raises(ValueError, match="ClientHello"):
        server_name(b"\x16\x03\x01\x00\x04\x02\x00\x00\x00")  # a ServerHello


def test_read_first_record_waits_for_the_whole_hello() -> None:
    hello = client_hello("allowed.test")
    a, b = socket.socketpair()
    with a, b:
        a.sendall(hello[:30])
        b.settimeout(10)
        a.sendall(hello[30:] + b"application data")
        data = read_first_record(b)
        assert data.startswith(hello)
        assert server_name(data) == "allowed.test"
        a.sendall(b"SSH-2.0-client\r\n")
        assert read_first_record(b) == b"SSH-2.0-client\r\n"

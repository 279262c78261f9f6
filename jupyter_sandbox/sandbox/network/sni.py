"""The server name a TLS client asks for (SNI), read from its first bytes through a CONNECT.

The proxy does not terminate TLS. It can still compare the name in the ClientHello with the
host the CONNECT named, and refuse a tunnel opened to an allowed host for TLS to another name
served at the same address (row 22 of the security checklist). Domain fronting proper (an
allowed name in SNI, another in the encrypted Host header) stays out of reach, as documented.
"""

from __future__ import annotations

import socket
import struct

MAX_RECORD = 5 + 16384 + 2048  # a TLS record header, its largest payload, and slack


class Incomplete(Exception):
    """More bytes are needed to read the ClientHello."""


def is_tls(first: bytes) -> bool:
    """Whether ``first`` starts a TLS handshake record (a ClientHello, when a client sends it)."""
    return len(first) >= 3 and first[0] == 0x16 and first[1] == 0x03


def read_first_record(sock: socket.socket, received: bytes = b"") -> bytes:
    """The client's first bytes on a blocking socket (after ``received``, read already): its
    whole first TLS record when it speaks TLS, else what the first read gave (b"" at EOF)."""
    data = received or sock.recv(MAX_RECORD)
    while data and is_tls(data) and len(data) < MAX_RECORD:
        try:
            server_name(data)
            break
        except Incomplete:
            more = sock.recv(MAX_RECORD - len(data))
            if not more:
                break
            data += more
        except ValueError:
            break
    return data


def server_name(data: bytes) -> str | None:
    """The SNI host name in the ClientHello that ``data`` starts with; None if it names none.

    Raises Incomplete when ``data`` holds only part of the record, ValueError when it is not a
    well-formed ClientHello.
    """
    if len(data) < 5:
        raise Incomplete()
    length = struct.unpack(">H", data[3:5])[0]
    if len(data) < 5 + length:
        raise Incomplete()
    body = data[5 : 5 + length]
    if len(body) < 4 or body[0] != 0x01:
        raise ValueError("not a ClientHello")
    pos = 4 + 2 + 32  # handshake header, client version, random
    pos = _skip(body, pos, 1)  # session id
    pos = _skip(body, pos, 2)  # cipher suites
    pos = _skip(body, pos, 1)  # compression methods
    if pos == len(body):
        return None  # no extensions
    end = pos + 2 + _read(body, pos, 2)
    pos += 2
    while pos + 4 <= end:
        kind, size = _read(body, pos, 2), _read(body, pos + 2, 2)
        pos += 4
        if kind == 0:  # server_name: a list of (type, name); type 0 is a host name
            names = body[pos : pos + size]
            at = 2
            while at + 3 <= len(names):
                name_type, name_length = names[at], _read(names, at + 1, 2)
                name = names[at + 3 : at + 3 + name_length]
                if name_type == 0:
                    return name.decode("ascii", "replace").lower().rstrip(".")
                at += 3 + name_length
            return None
        pos += size
    return None


def _read(data: bytes, pos: int, size: int) -> int:
    if pos + size > len(data):
        raise ValueError("truncated ClientHello")
    return int.from_bytes(data[pos : pos + size], "big")


def _skip(data: bytes, pos: int, size_bytes: int) -> int:
    return pos + size_bytes + _read(data, pos, size_bytes)

"""A sandbox server's answer head, as the port links' relay (server_extension/port_relay.py)
reads it and rebuilds it for the browser. Here, with no web framework, so that it is parsed and
fuzzed (fuzz/targets/port_relay_answer.py) on its own.

The answer is the sandbox's, and the browser that receives it holds the user's Jupyter session
on the same origin. Nothing of it is passed on as it came: the head is parsed strictly (CRLF
line ends only, so that the relay and the browser cannot disagree on where a line ends; a
status of three ASCII digits; header lines of a token, a colon and a value without control
characters; bounded in size and count; one of each header whose copies would be read
differently), and the browser gets a head rebuilt from the parsed parts: the status with the
standard reason, and only the headers on ALLOWED, a ``Location`` only as a path under the
link's prefix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import urljoin, urlsplit

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.host.http_head import split_head

MAX_HEAD = 64 * 1024  # bytes of an answer's status line and headers, at most
MAX_HEADERS = 100  # header lines of an answer, at most
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?: [\t\x20-\x7e\x80-\xff]*)?")
# Headers two copies of which a browser and the relay could read differently.
_ONCE = frozenset(
    {
        b"content-length",
        b"content-type",
        b"location",
        b"transfer-encoding",
        b"upgrade",
        b"sec-websocket-accept",
        b"sec-websocket-protocol",
        b"content-security-policy",
    }
)
# What the browser may get of a sandbox's answer: headers that act on this one answer or page
# (and X-... ones, which are the apps' own). Anything else (Set-Cookie, Clear-Site-Data, HSTS,
# Alt-Svc, reporting endpoints, a Service Worker's scope, WWW-Authenticate, whose login prompt
# would ask for credentials in Jupyter's name, and whatever browsers add next) is left out.
ALLOWED = frozenset(
    {
        "accept-ranges",
        "access-control-allow-credentials",
        "access-control-allow-headers",
        "access-control-allow-methods",
        "access-control-allow-origin",
        "access-control-expose-headers",
        "access-control-max-age",
        "age",
        "allow",
        "cache-control",
        "content-disposition",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-range",
        "content-security-policy",
        "content-type",
        "cross-origin-embedder-policy",
        "cross-origin-opener-policy",
        "cross-origin-resource-policy",
        "date",
        "etag",
        "expires",
        "last-modified",
        "link",
        "location",
        "permissions-policy",
        "pragma",
        "retry-after",
        "server-timing",
        "timing-allow-origin",
        "vary",
        "sec-websocket-accept",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
    }
)
# Set by the relay itself, whatever the sandbox says.
_OWN = frozenset({"x-content-type-options", "referrer-policy"})
# A path segment a browser reads as "." or ".." (WHATWG URL: %2e counts as a dot).
_DOT_SEGMENT = re.compile(r"(?:\.|%2e){1,2}", re.IGNORECASE)
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class MalformedAnswer(SandboxError):
    """A sandbox's server answered with a head that is not HTTP/1.1 as the relay reads it."""

    code = "bad_gateway"
    http_status = 502


@dataclass(frozen=True)
class AnswerHead:
    """An answer head's parts: the status code and the header lines, names as sent."""

    code: int
    headers: list[tuple[str, str]]

    @property
    def reason(self) -> str:
        """The standard reason for the code (the sandbox's own is not passed on)."""
        try:
            return HTTPStatus(self.code).phrase
        except ValueError:
            return "Unknown"

    def get(self, name: str) -> str | None:
        """The value of header ``name`` (any case), the first if it came more than once."""
        lower = name.lower()
        return next((value for key, value in self.headers if key.lower() == lower), None)


def parse_answer_head(head: bytes) -> AnswerHead:
    """The parts of an answer head (status line and headers, ending in an empty line);
    MalformedAnswer saying what is wrong otherwise."""
    if len(head) > MAX_HEAD:
        raise MalformedAnswer(f"the sandbox's server sent a head over {MAX_HEAD} bytes")
    try:
        status, fields = split_head(head, _STATUS_LINE, MAX_HEADERS, _ONCE)
    except ValueError as exc:
        raise MalformedAnswer(f"the sandbox's server sent {exc}") from None
    if status is None:
        raise MalformedAnswer("the sandbox's server sent a malformed status line")
    headers = [(name.decode("ascii"), value.decode("latin-1")) for name, value in fields]
    return AnswerHead(int(status[1]), headers)


def browser_headers(
    headers: Iterable[tuple[str, str]], prefix: str, base: str, *, keep: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """The headers of a sandbox's answer that the browser may get: those on ALLOWED (and in
    ``keep``), ``Location`` made a path under ``prefix`` (resolved against ``base``, the path
    the browser asked for) or left out."""
    allowed = ALLOWED | {name.lower() for name in keep}
    out = []
    for name, value in headers:
        lower = name.lower()
        if lower not in allowed and not (lower.startswith("x-") and lower not in _OWN):
            continue
        if lower == "location":
            location = under_prefix(value, prefix, base)
            if location is None:
                continue
            value = location
        out.append((name, value))
    return out


def under_prefix(location: str, prefix: str, base: str) -> str | None:
    """``location`` as a path under ``prefix``, or None where it would lead elsewhere.

    A redirect to the sandbox server's own root (``/next``, ``http://localhost:8000/next``) is
    the same place under the prefix; a relative one is resolved against ``base`` and must stay
    under the prefix. Another host, a scheme-relative ``//host/`` (``/\\host`` to a browser), a
    dot segment, anything but printable ASCII: None (the answer goes without its Location)."""
    if not location or not all("\x21" <= c <= "\x7e" for c in location) or "\\" in location:
        return None
    prefix = prefix.rstrip("/") + "/"
    try:
        parts = urlsplit(location)
        hostname = parts.hostname
    except ValueError:  # "http://]x": no URL the relay can vouch for (fuzz: port_relay_answer)
        return None
    if parts.scheme or parts.netloc or location.startswith("//"):
        if parts.scheme not in ("http", "https") or hostname not in _LOCAL_HOSTS:
            return None
        location = location[len(f"{parts.scheme}://{parts.netloc}") :] or "/"
    if location.startswith("/"):
        resolved = prefix + location.lstrip("/")
    else:
        resolved = urljoin(base, location)
    path = urlsplit(resolved).path
    if not resolved.startswith(prefix) or any(
        _DOT_SEGMENT.fullmatch(segment) for segment in path.split("/")
    ):
        return None
    return resolved

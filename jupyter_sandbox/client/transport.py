"""HTTP to one Jupyter Server's REST API (jupyter_sandbox/server_extension/openapi.yaml), with
urllib alone: what every object of the client (client.py, sandbox.py, execution.py,
commands.py, files.py, network.py) calls to reach the server.

One :class:`Transport` per :class:`~jupyter_sandbox.client.SandboxClient`, shared by the
sandboxes it hands out. Each call is one request on a connection of its own, so a transport
may be used from several threads at once. Every failure is a SandboxError: an error answer is
the class of its ``code`` with the server's message (errors.py), a server that cannot be
reached or a connection that breaks is a :class:`SandboxConnectionError` naming the URL.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Generator, Sequence
from typing import Any

from jupyter_sandbox._version import __version__
from jupyter_sandbox.client.errors import (
    FileTooLargeError,
    InvalidSettingError,
    SandboxConnectionError,
    SandboxError,
    error_from_answer,
)
from jupyter_sandbox.client.events import EventStreamError, ServerEvent, parse_events

# Seconds to wait for an answer (to connect, and between two pieces of it). Starting a sandbox
# takes seconds on an idle host; a loaded one, or a snapshot to restore, takes longer.
DEFAULT_TIMEOUT = 120.0
EVENT_STREAM = "text/event-stream"
# A query: pairs, so that a name may repeat (?metadata=a=1&metadata=b=2).
Query = Sequence[tuple[str, str]]
_NOTHING: Any = object()  # no JSON body (None is JSON's null)


class Transport:
    """Requests to the API of the Jupyter Server at ``url`` (its base URL: a JupyterHub
    user's server is ``https://HUB/user/NAME/``), authenticated by ``token`` (None: the
    ``JUPYTER_TOKEN`` environment variable; empty: none), each waiting ``timeout`` seconds for
    the server unless the call says otherwise."""

    def __init__(self, url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidSettingError(
                f"the server URL must start with http:// or https:// and name a host, e.g. "
                f"http://127.0.0.1:8888/ (with the server's base URL, if any), not {url!r}"
            )
        if not timeout > 0:
            raise InvalidSettingError(
                f"timeout must be a number of seconds above 0, not {timeout!r}"
            )
        self.url = url.rstrip("/") + "/"
        self.token = os.environ.get("JUPYTER_TOKEN", "") if token is None else token
        self.timeout = float(timeout)

    def __repr__(self) -> str:  # never the token
        return f"Transport({self.url!r})"

    def route(self, *path: str, query: Query = ()) -> str:
        """The URL of ``api/PATH...``, each part quoted whole (an id cannot add a segment)."""
        url = self.url + "api/" + "/".join(urllib.parse.quote(part, safe="") for part in path)
        return f"{url}?{urllib.parse.urlencode(query)}" if query else url

    def call(
        self,
        method: str,
        *path: str,
        body: Any = _NOTHING,
        query: Query = (),
        timeout: float | None = None,
    ) -> Any:
        """One request with an optional JSON body; its decoded JSON answer (None if empty)."""
        data = None if body is _NOTHING else json.dumps(body).encode()
        return self._json(method, path, data, "application/json", query, timeout)

    def send_bytes(self, method: str, *path: str, data: bytes, query: Query = ()) -> Any:
        """A request whose body is ``data`` as it is; its decoded JSON answer."""
        return self._json(method, path, data, "application/octet-stream", query, None)

    def read_bytes(self, *path: str, query: Query = (), limit: int | None = None) -> bytes:
        """The bytes a GET answers (a file's), whole; with ``limit``, FileTooLargeError when
        there are more than ``limit`` of them, found by reading one byte past it and no more
        (what a sandbox wrote may have grown since its size was looked up)."""
        url = self.route(*path, query=query)
        with self._open("GET", url, None, None, None) as response:
            data = self._read(response, f"GET {url}", None, None if limit is None else limit + 1)
        if limit is not None and len(data) > limit:
            raise FileTooLargeError(
                f"GET {url}: the file holds more than {limit} bytes, the most this read takes"
            )
        return data

    def events(
        self,
        *path: str,
        body: Any = _NOTHING,
        query: Query = (),
        timeout: float | None = None,
        opened: Callable[[http.client.HTTPResponse], None] | None = None,
    ) -> Generator[ServerEvent, None, None]:
        """POST ``body`` (with ``"stream": true``), or GET without one (a background command's
        output with ``follow=true``, a directory's watch), and yield the events of the answer
        as they come, up to the final one. Closing the iterator early closes the connection,
        which stops what runs on the server (a command is killed, code interrupted, a watch
        stopped; a follower only stops following). ``opened`` is given the answer once it
        came, so that another thread can cut its connection (file_watch.py)."""
        url = self.route(*path, query=query)
        method = "GET" if body is _NOTHING else "POST"
        request = f"{method} {url}"
        data = None if body is _NOTHING else json.dumps(body).encode()
        response = self._open(method, url, data, "application/json", timeout)
        if opened is not None:
            opened(response)
        with response:
            kind = response.headers.get_content_type()
            if kind != EVENT_STREAM:
                raise SandboxError(f"{request} answered {kind}, not {EVENT_STREAM}: {_WRONG_PLACE}")
            try:
                for event in parse_events(response):
                    yield event
                    if event.final:
                        return
            except EventStreamError as error:
                raise SandboxError(f"{request}: {error}") from None
            except (OSError, http.client.HTTPException) as error:
                raise self._broken(request, error, timeout) from error
        raise SandboxConnectionError(
            f"{request}: the stream of events ended before its result (the server stopped, or "
            "a proxy cut the connection); what ran may or may not have ended"
        )

    def _json(
        self,
        method: str,
        path: Sequence[str],
        data: bytes | None,
        content_type: str,
        query: Query,
        timeout: float | None,
    ) -> Any:
        url = self.route(*path, query=query)
        request = f"{method} {url}"
        if data is None and method in ("POST", "PUT"):
            data = b""
        with self._open(method, url, data, content_type, timeout) as response:
            answer = self._read(response, request, timeout)
            kind = response.headers.get_content_type()
        if not answer:
            return None
        try:
            return json.loads(answer)
        except ValueError:
            raise SandboxError(
                f"{request} answered {kind}, not JSON ({answer[:80]!r}...): {_WRONG_PLACE}"
            ) from None

    def _open(
        self,
        method: str,
        url: str,
        data: bytes | None,
        content_type: str | None,
        timeout: float | None,
    ) -> http.client.HTTPResponse:
        headers = {"User-Agent": f"jupyter-sandbox-client/{__version__}"}
        if self.token:
            headers["Authorization"] = f"token {self.token}"
        if data is not None and content_type:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            response: http.client.HTTPResponse = urllib.request.urlopen(
                request, timeout=timeout or self.timeout
            )
        except urllib.error.HTTPError as error:
            raise self._refusal(method, url, error) from None
        except (OSError, http.client.HTTPException) as error:  # URLError is an OSError
            raise self._broken(f"{method} {url}", error, timeout) from error
        return response

    def _read(
        self,
        response: http.client.HTTPResponse,
        request: str,
        timeout: float | None,
        limit: int | None = None,
    ) -> bytes:
        try:
            return response.read() if limit is None else response.read(limit)
        except (OSError, http.client.HTTPException) as error:
            raise self._broken(request, error, timeout) from error

    def _refusal(self, method: str, url: str, error: urllib.error.HTTPError) -> SandboxError:
        try:
            text = error.read()
        except (OSError, http.client.HTTPException):
            text = b""
        finally:
            error.close()
        try:
            answer: Any = json.loads(text)
        except ValueError:
            answer = text.decode(errors="replace")
        return error_from_answer(error.code, answer, f"{method} {url}")

    def _broken(self, request: str, error: BaseException, timeout: float | None) -> SandboxError:
        reason = error.reason if isinstance(error, urllib.error.URLError) else error
        if isinstance(reason, TimeoutError):
            return SandboxConnectionError(
                f"{request}: the server did not answer within {timeout or self.timeout:g} s; "
                "it may be overloaded, or the run longer than expected: pass a larger timeout "
                "(SandboxClient(url, timeout=SECONDS))"
            )
        what = str(reason) or type(reason).__name__
        return SandboxConnectionError(
            f"{request}: could not talk to the Jupyter Server at {self.url} ({what}): check "
            "that it runs and that the URL is its own, with its base URL "
            "(e.g. http://127.0.0.1:8888/ or https://HUB/user/NAME/)"
        )


_WRONG_PLACE = (
    "is the URL a Jupyter Server with the jupyter_sandbox extension (a JupyterHub user's server "
    "is https://HUB/user/NAME/), and is the token valid (a login page is HTML)?"
)

"""The data plane, ``{base_url}api/e2b/sandbox/...`` (``E2B_SANDBOX_URL``): what E2B's SDK sends
to a sandbox, routed as E2B's proxy routes it, by its own headers: ``E2b-Sandbox-Id`` (which
sandbox), ``E2b-Sandbox-Port`` (49983: envd, its Connect services, ``/files``, ``/health``;
49999: the code interpreter's ``/execute`` and ``/contexts``) and ``X-Access-Token`` (the
sandbox's access token, keys.py), checked on every request before anything else is read.

The request then acts as the owner the token names, through the same core calls as our REST
API: another owner's sandbox, or one that is gone, is a sandbox that "was not found" (502, as
E2B's proxy answers). Jupyter's login plays no part here: neither its cookies nor its tokens
are read, so its XSRF check (which guards cookie-authenticated requests) is skipped on these
routes alone; the access token is the credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from jupyter_server.auth.decorator import allow_unauthenticated
from tornado import web
from tornado.http1connection import HTTP1Connection
from tornado.iostream import StreamClosedError

from jupyter_sandbox.e2b_api import execute_stream, filesystem_service, process_service, pty_service
from jupyter_sandbox.e2b_api.connect_protocol import (
    STREAM_TYPE,
    Message,
    content_kind,
    end_of_stream,
    envelope,
    request_message,
)
from jupyter_sandbox.e2b_api.errors import (
    E2BUnsupportedError,
    api_error,
    as_sandbox_error,
    connect_code,
    connect_error,
    data_plane_error,
)
from jupyter_sandbox.e2b_api.file_transfer import (
    check_upload_size,
    max_upload_bytes,
    uploads,
    write_info,
)
from jupyter_sandbox.e2b_api.home import check_user, to_sandbox, user_of_authorization
from jupyter_sandbox.e2b_api.keys import AccessTokens
from jupyter_sandbox.e2b_api.process_service import Processes
from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    SandboxError,
)
from jupyter_sandbox.protocol.requests import MAX_JSON_BODY, json_object
from jupyter_sandbox.sandbox.host.fair_share import current_owner
from jupyter_sandbox.sandbox.identity import is_sandbox_id
from jupyter_sandbox.sandbox.operations.code_runs import MAX_CODE, CodeRequest
from jupyter_sandbox.sandbox.operations.commands import CommandRequest
from jupyter_sandbox.sandbox.use_cases import resume_sandbox
from jupyter_sandbox.server_extension.base import SandboxHandlerBase, TurnHoldingHandler
from jupyter_sandbox.server_extension.event_stream import stream_turn
from jupyter_sandbox.server_extension.file_handlers import send_file

log = logging.getLogger(__name__)
# Bytes of a run's body: its code at its most, a character being at most four bytes of UTF-8.
MAX_CODE_BODY = MAX_JSON_BODY + 4 * MAX_CODE

ENVD_PORT = "49983"
JUPYTER_PORT = "49999"
SANDBOX_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
NDJSON = "application/x-ndjson"


def e2b_state(settings: dict[str, Any]) -> tuple[AccessTokens, Processes]:
    """The server's access tokens and running processes, made at first use."""
    if "e2b_tokens" not in settings:
        extension = settings["sandbox_extension"]
        settings["e2b_tokens"] = AccessTokens.in_state_directory(
            extension.manager.settings.state_path
        )
        settings["e2b_processes"] = Processes()
    return settings["e2b_tokens"], settings["e2b_processes"]


class E2BSandboxHandler(SandboxHandlerBase):
    """Every request of the data plane; :meth:`_route` says which service answers it.

    Its bodies are small (a Connect message, a run's code) and read whole, as tornado reads
    them, before the token is checked: refused in prepare with the body still on its way,
    the connection would close under an SDK still writing it, which can meet a reset before
    it reads the answer. An upload's body is the one that is large: E2BFilesHandler reads it
    only once checked."""

    _sandbox_id = ""
    _owner_of_token = ""
    _connect = False  # whether errors are answered in Connect's form
    _running: process_service.Running | None = None  # the process this Start stream runs
    _client_left = False
    _streaming = False  # whether a stream's first message went out: errors then end the stream

    def check_xsrf_cookie(self) -> None:
        """Not cookie-authenticated (see the module's docstring): no XSRF to check."""

    @property
    def owner(self) -> str:
        return self._owner_of_token

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        await super().prepare(*args, **kwargs)
        route = self.path_kwargs.get("route", "")
        self._connect = "/" in route
        sandbox_id = self.request.headers.get("E2b-Sandbox-Id", "")
        if not SANDBOX_ID.fullmatch(sandbox_id):
            raise InvalidRequestError(
                "the E2b-Sandbox-Id header must name a sandbox (the sandbox id E2B returned)"
            )
        self._sandbox_id = sandbox_id
        tokens, _ = e2b_state(self.settings)
        self._owner_of_token = tokens.owner(self.request.headers.get("X-Access-Token"), sandbox_id)
        current_owner.set(self._owner_of_token)
        check_user(user_of_authorization(self.request.headers.get("Authorization")))
        await self._resume_if_paused_at_timeout()

    async def _resume_if_paused_at_timeout(self) -> None:
        """E2B's autoResume: a sandbox that the culler paused at its timeout, made with
        autoResume enabled, is resumed by this request and given its timeout anew (one read of
        its state file for every other request)."""
        if not is_sandbox_id(self._sandbox_id):
            return  # an unknown sandbox: the service called answers that it is gone
        state = self.manager.read_state(self._sandbox_id)
        if not (state.get("paused_at_timeout") and state.get("e2b_auto_resume")):
            return
        timeout = state.get("e2b_timeout")
        seconds = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else None
        await resume_sandbox(
            self.manager, self.owner, self._sandbox_id, seconds, self.extension.culler
        )
        log.info("sandbox %s resumed by a request: it was paused at its timeout", self._sandbox_id)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        exc = as_sandbox_error(exc, status_code)
        exc = data_plane_error(exc, self._sandbox_id or "?")
        status, body = connect_error(exc) if self._connect else api_error(exc)
        self.clear()
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    # Not Jupyter's login: the access token, checked in prepare (said so for jupyter_server,
    # which refuses unmarked methods of unauthenticated requests when
    # ServerApp.allow_unauthenticated_access is off).
    @allow_unauthenticated
    async def get(self, route: str) -> None:
        await self._route("GET", route)

    @allow_unauthenticated
    async def post(self, route: str) -> None:
        await self._route("POST", route)

    async def _route(self, method: str, route: str) -> None:
        port = self.request.headers.get("E2b-Sandbox-Port", ENVD_PORT)
        if port == JUPYTER_PORT:
            if (method, route) == ("POST", "execute"):
                await self._run_code()
            elif (method, route) == ("GET", "contexts"):
                self._write([{"id": "default", "language": "python", "cwd": "/home/user"}])
            elif route == "health":
                await self._health()
            else:
                raise E2BUnsupportedError(
                    f"{method} /{route[:200]} of the code interpreter is not supported: a sandbox has "
                    "one Python context (run_code without context or language)"
                )
            return
        if port != ENVD_PORT:
            raise E2BUnsupportedError(
                f"port {port[:16]!r} is not served by the E2B API: reach a sandbox's own ports "
                "through a port link (POST /api/sandboxes/{id}/ports)"
            )
        if route == "health" and method == "GET":
            await self._health()
        elif route == "files":
            await (self._download() if method == "GET" else self._upload())
        elif method == "POST" and route.startswith("process.Process/"):
            await self._process(route.partition("/")[2])
        elif method == "POST" and route.startswith("filesystem.Filesystem/"):
            message = self._unary_message()
            method_name = route.partition("/")[2]
            answer = await filesystem_service.call(
                self.manager, self.owner, self._sandbox_id, method_name, message
            )
            self._write(answer)
        else:
            raise E2BUnsupportedError(f"{method} /{route[:200]} is not an envd route served here")

    def _stream_turn(self) -> contextlib.AbstractContextManager[None]:
        """One of the owner's event streams (SandboxExtension.max_event_streams_per_owner),
        as our REST API's streams take (event_stream.py): one past the cap is a 429."""
        return stream_turn(self.extension, self.owner)

    # -- envd's HTTP routes ---------------------------------------------------------------------

    async def _health(self) -> None:
        await self.manager.running(self.owner, self._sandbox_id)
        self.set_status(204)
        self.finish()

    async def _download(self) -> None:
        check_user(self.get_query_argument("username", None))
        path = to_sandbox(self._path_argument())
        files = self.manager.files
        # Streamed, in the owner's turn, as the REST API's download (file_handlers.py).
        async with self.extension.downloads.slot(self.owner):
            if self._client_left:
                return  # left while waiting for the turn: nothing to read for it
            pieces = files.read_stream(self.owner, self._sandbox_id, path)
            try:
                first = await anext(pieces, b"")  # an error found before any byte: an answer
                self.set_header("Content-Type", "application/octet-stream")
                await send_file(self, first, pieces, files.timeout)
            finally:
                await pieces.aclose()  # stops the read in the sandbox if it still runs

    async def _upload(self) -> None:
        """Served by :class:`E2BFilesHandler`, which reads an upload's body in its turn."""
        raise E2BUnsupportedError("POST /files is served by its own route")

    def _path_argument(self) -> str:
        given = self.request.query_arguments.get("path", [])
        if len(given) != 1:
            raise InvalidRequestError("give the query argument path once: ?path=FILE")
        try:
            return given[0].decode()
        except UnicodeDecodeError:
            raise InvalidRequestError("the query argument path is not UTF-8") from None

    # -- envd's Connect services ------------------------------------------------------------------

    def _unary_message(self) -> Message:
        kind = content_kind(self.request.headers.get("Content-Type"))
        if kind != "unary":
            raise InvalidRequestError("this call is unary: send Content-Type application/json")
        route = self.path_kwargs.get("route", "")
        return Message(request_message(self.request.body, kind), route)

    async def _process(self, method: str) -> None:
        _, processes = e2b_state(self.settings)
        sandbox_id = self._sandbox_id
        if method == "List":
            self._unary_message().done()
            self._write(process_service.list_response(processes, sandbox_id))
            return
        if method == "SendSignal":
            self._write(process_service.signal(processes, sandbox_id, self._unary_message()))
            return
        if method == "SendInput":
            message = self._unary_message()
            self._write(await process_service.send_input(processes, sandbox_id, message))
            return
        if method == "Update":
            message = self._unary_message()
            self._write(await process_service.update(processes, sandbox_id, message))
            return
        if method not in ("Start", "Connect"):
            raise E2BUnsupportedError(
                f"process.Process/{method} is not supported by jupyter-sandbox's E2B API "
                "(Start, Connect, List, SendInput, Update and SendSignal are)"
            )
        kind = content_kind(self.request.headers.get("Content-Type"))
        if kind != "stream":
            raise InvalidRequestError(f"{method} is a stream: send Content-Type {STREAM_TYPE}")
        data = request_message(self.request.body, kind)
        timeout_ms = self.request.headers.get("Connect-Timeout-Ms")
        if method == "Connect":
            process_service.timeout_seconds(timeout_ms)  # checked; the process has its own
            events = process_service.connect_events(
                processes, sandbox_id, Message(data, "ConnectRequest")
            )
            with self._stream_turn():
                await self._send_stream(events)
            return
        if pty_service.wants_pty(data):
            pty = pty_service.pty_request(Message(data, "StartRequest"), timeout_ms)
            with self._stream_turn():
                await self._start(data.get("process", {}), pty.tag, pty)
            return
        request, tag = process_service.start_request(Message(data, "StartRequest"), timeout_ms)
        with self._stream_turn():
            await self._start(data.get("process", {}), tag, request)

    async def _start(
        self,
        config: dict[str, Any],
        tag: str | None,
        request: CommandRequest | pty_service.PtyRequest,
    ) -> None:
        """Run ``request`` (a command, or a PTY) as a Start stream, listed under its pid while
        it runs and followed by those who Connect to it."""
        _, processes = e2b_state(self.settings)
        running = processes.add(self._sandbox_id, config, tag)
        self._running = running
        try:
            owner, sandbox_id = self.owner, self._sandbox_id
            started = (
                pty_service.pty_events(self.manager, owner, sandbox_id, request, running)
                if isinstance(request, pty_service.PtyRequest)
                else process_service.start_events(self.manager, owner, sandbox_id, request, running)
            )
            events = process_service.published(running, started)
            running.task = asyncio.ensure_future(self._send_stream(events))
            await asyncio.wait({running.task})
            if not running.task.cancelled():
                running.task.result()
        finally:
            processes.discard(self._sandbox_id, running)

    async def _send_stream(self, messages: AsyncGenerator[dict[str, Any], None]) -> None:
        """A Connect server stream of ``messages``; an error before the first is raised for
        an ordinary error answer, after it ends the stream."""
        try:
            await self._write_each(messages, STREAM_TYPE, envelope)
            self.finish(end_of_stream())
        except SandboxError as exc:
            if not self._streaming:
                raise
            exc = data_plane_error(exc, self._sandbox_id)
            self.finish(end_of_stream({"code": connect_code(exc), "message": exc.message}))
        except StreamClosedError:
            log.info("the client left %s", self.request.path)
        except asyncio.CancelledError:
            # A signal stopped it (not the client, who left, nor a finished stream).
            if self._streaming and not self._finished and not self._client_left:
                self.finish(end_of_stream({"code": "canceled", "message": "killed by a signal"}))
            raise
        finally:
            await messages.aclose()

    def on_connection_close(self) -> None:
        """The client of a Start stream left: its process is stopped now, with all it started,
        not at its next output (a quiet PTY or command would run on to its timeout)."""
        self._client_left = True
        if self._running is not None and self._running.task is not None:
            self._running.task.cancel()
        super().on_connection_close()

    # -- the code interpreter -------------------------------------------------------------------

    async def _run_code(self) -> None:
        body = self.request.body
        with self._stream_turn():  # at most the owner's share of runs parse at once
            if len(body) <= MAX_JSON_BODY:
                data = json_object(body)
            else:  # code of megabytes: parsed off the loop (protocol/strict_json.py)
                data = await asyncio.to_thread(
                    json_object, body, max_bytes=MAX_CODE_BODY, in_steps=True
                )
            await self._send_lines(execute_stream.code_request(data))

    async def _send_lines(self, request: CodeRequest) -> None:
        lines = execute_stream.execute_lines(self.manager, self.owner, self._sandbox_id, request)
        try:
            await self._write_each(lines, NDJSON, _json_line)
            self.finish()
        except StreamClosedError:
            log.info("the client left %s: its code was interrupted", self.request.path)
        finally:
            await lines.aclose()

    async def _write_each(
        self,
        messages: AsyncIterator[dict[str, Any]],
        content_type: str,
        encode: Callable[[dict[str, Any]], bytes | str],
    ) -> None:
        """Send each of ``messages``, encoded, as it comes; the answer's ``content_type`` is set
        at the first, and until then an error can still be an ordinary error answer (see
        ``_streaming``)."""
        async for message in messages:
            if not self._streaming:
                self._streaming = True
                self.set_header("Content-Type", content_type)
            self.write(encode(message))
            await self.flush()

    def _write(self, data: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))


def _json_line(message: dict[str, Any]) -> str:
    """One line of the code interpreter's NDJSON answer."""
    return json.dumps(message, ensure_ascii=False) + "\n"


@web.stream_request_body
class E2BFilesHandler(TurnHoldingHandler, E2BSandboxHandler):
    """envd's ``/files`` (file_transfer.py), whose uploads' bodies are read only once checked
    and in their owner's turn (``SandboxExtension.uploads``), as the REST API's uploads are
    (server_extension/file_handlers.py). Read first, as tornado does by default, a body of up
    to the server's max_body_size was held whole, and parsed into a second copy, before even
    the access token was looked at, and while it waited for its turn. Here :meth:`prepare`
    checks the token, refuses a Content-Length past the cap (file_transfer.max_upload_bytes)
    and waits for the turn while the body stays unread in its connection; what comes past
    the cap without a Content-Length is refused as it passes it."""

    _refusal: SandboxError | None = None  # a refusal answered once the body has come

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        self._received = bytearray()
        await super().prepare(*args, **kwargs)  # the token, before any byte of the body
        if self.request.method != "POST":
            return
        max_file_bytes = self.manager.files.max_bytes
        declared = self.request.headers.get("Content-Length", "")
        if declared.isascii() and declared.isdigit():
            check_upload_size(int(declared), max_file_bytes)
        cap = max_upload_bytes(max_file_bytes)
        if cap and isinstance(self.request.connection, HTTP1Connection):
            # One past it, so that data_received sees it passed and says so.
            self.request.connection.set_max_body_size(cap + 1)
        try:
            check_user(self.query_argument("username"))
        except SandboxError as exc:
            # Answered once the body has come, unkept: answered now, with the body still on
            # its way, the connection closes under the client, which can meet a reset before
            # it reads the answer (the E2B SDK did, writing as another user).
            self._refusal = exc
            return
        if not await self.take_turn(self.extension.uploads):
            return  # the client left while it waited for the turn

    def data_received(self, chunk: bytes) -> None:
        if not self.holding_turn:
            return  # no upload with a turn: its bytes are not kept
        self._received += chunk
        check_upload_size(len(self._received), self.manager.files.max_bytes)

    async def _upload(self) -> None:
        if self._refusal is not None:
            raise self._refusal
        given = self.request.query_arguments.get("path")
        path = self._path_argument() if given else None
        content_type = self.request.headers.get("Content-Type", "")
        body, self._received = bytes(self._received), bytearray()
        try:
            files = uploads(content_type, body, path)
            del body  # its files are in ``files`` now
            written = []
            for name, data in files:
                entry = await self.manager.files.write(self.owner, self._sandbox_id, name, data)
                written.append(write_info(entry))
        finally:
            self.give_back_turn()
        self._write(written)


data_plane_handlers = [
    (r"/api/e2b/sandbox/(?P<route>files)", E2BFilesHandler),
    (r"/api/e2b/sandbox/(?P<route>.*)", E2BSandboxHandler),
]

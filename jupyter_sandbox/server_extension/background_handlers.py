"""REST handlers of one background command (documented in openapi.yaml beside this file; what
a background command is: sandbox/operations/background.py):

* ``GET /api/sandboxes/{id}/commands/{command_id}``: the command, and its exit code once it
  has ended;
* ``GET /api/sandboxes/{id}/commands/{command_id}/output?offset=0&limit=N``: a piece of its
  output (standard output and error interleaved), from byte ``offset`` on; the answer's
  ``next_offset`` is where the next read starts, so a client follows a running command by
  reading again from there;
* ``GET /api/sandboxes/{id}/commands/{command_id}/output?follow=true&offset=0``: its output
  from byte ``offset`` on as it comes, as Server-Sent Events (sandbox/operations/background_follow.py,
  sent by event_stream.py), until it ends; a client that leaves stops the following only,
  never the command (it is the sandbox's, and another client may follow it);
* ``DELETE /api/sandboxes/{id}/commands/{command_id}``: stop it with everything it started,
  and forget it and its output.

One is started by ``POST /api/sandboxes/{id}/commands`` with ``"background": true`` and listed
by ``GET`` of that route (command_handlers.py). The command id is passed to the core as it
came: one it does not know, malformed ones included, is its 404 (``command_not_found``), so the
route accepts any path segment rather than answering a different 404 of tornado's.
"""

from __future__ import annotations

import re

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.operations.background import MAX_READ
from jupyter_sandbox.server_extension.base import SANDBOX_ID, SandboxAPIHandler
from jupyter_sandbox.server_extension.event_stream import EventStreamHandler

_COMMAND_ID = r"(?P<command_id>[^/]+)"
# An integer as a query argument: digits, optionally negative (the core refuses a negative
# offset with its own message), at most 19 of them (2**63 has 19 digits: larger numbers mean
# nothing as byte counts, and a client sending one has made a mistake worth naming).
_INTEGER = re.compile(r"-?[0-9]{1,19}")
# ?follow=: what a query string says for yes and no (true/false in any case: Python's requests
# sends True; 1/0), and nothing else.
_BOOLEAN = {"true": True, "1": True, "false": False, "0": False}


class SandboxBackgroundCommandHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}/commands/{command_id}``: one background command; delete stops it
    and forgets it."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str, command_id: str) -> None:
        command = await self.manager.background.get(self.owner, sandbox_id, command_id)
        self.write_json(command.as_dict())

    @web.authenticated
    @authorized
    async def delete(self, sandbox_id: str, command_id: str) -> None:
        await self.manager.background.remove(self.owner, sandbox_id, command_id)
        self.set_status(204)
        self.finish()


class SandboxCommandOutputHandler(EventStreamHandler):
    """``/api/sandboxes/{id}/commands/{command_id}/output?offset=0&limit=N``: a piece of the
    command's output; with ``follow=true``, all of it from ``offset`` on as it comes."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str, command_id: str) -> None:
        offset = self.integer_argument(
            "offset", 0, "the byte of the output to read from, 0 or more"
        )
        if self.follow_argument():
            if self.query_argument("limit") is not None:
                raise InvalidRequestError(
                    "limit is for one read and follow=true reads until the command ends: "
                    "leave limit out, e.g. ?follow=true&offset=0"
                )
            events = self.manager.background.follow(self.owner, sandbox_id, command_id, offset)
            what = f"following command {command_id!r:.40} of {sandbox_id} (it runs on)"
            await self.send_events(events, what)
            return
        limit = self.integer_argument(
            "limit", MAX_READ, f"the bytes to read at most, from 1 to {MAX_READ}"
        )
        output = await self.manager.background.output(
            self.owner, sandbox_id, command_id, offset=offset, limit=limit
        )
        self.write_json(output.as_dict())

    def follow_argument(self) -> bool:
        """The query argument ``follow`` (false without it); a 400 for what is not a yes or no."""
        value = self.query_argument("follow")
        if value is None:
            return False
        if value.lower() not in _BOOLEAN:
            raise InvalidRequestError(
                f"the query argument follow must be true or false (1 or 0), not {value!r:.40}: "
                "true streams the output as it comes until the command ends, e.g. "
                "?follow=true&offset=0"
            )
        return _BOOLEAN[value.lower()]

    def integer_argument(self, name: str, default: int, meaning: str) -> int:
        """The query argument ``name`` as an integer (``default`` without it); a 400 naming
        it otherwise. Its range is the core's to check (BackgroundCommands.output)."""
        value = self.query_argument(name)
        if value is None:
            return default
        if not _INTEGER.fullmatch(value):
            raise InvalidRequestError(
                f"the query argument {name} must be an integer of at most 19 digits "
                f"({meaning}), not {value!r:.40}, e.g. ?offset=0&limit=65536"
            )
        return int(value)


background_handlers: list[tuple[str, type[SandboxAPIHandler]]] = [
    (rf"/api/sandboxes/{SANDBOX_ID}/commands/{_COMMAND_ID}/?", SandboxBackgroundCommandHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/commands/{_COMMAND_ID}/output/?", SandboxCommandOutputHandler),
]

"""Messages from a sandbox's kernel as the server's own clients read them: strictly, in steps.

jupyter_client's ``Session.deserialize`` decodes every JSON frame whole with ``json.loads`` and
turns every date-like string of the header and the parent header into a datetime. The server's
clients of sandbox kernels (code runs over REST, the E2B API and MCP; the readiness wait; a
restart's shutdown request; the CLI's run watcher) run on the event loop every owner shares, and
the message guard bounds only a message's raw bytes (message_guard.py). Code in the sandbox holds
the kernel's key, so it can sign a message of any shape, at any time: a header of a few MiB of
date strings would hold the loop for seconds, and a content of nested empty lists takes tens of
times its size in memory.

So a message is read in steps, each bounded before it is taken: the signature over the raw
frames; the parent header and the header, each at most ``HEADER_BYTES``, with the strict reader
the proxy kernel uses (kernel/wire.py), no dates parsed; for a request's reader, the parent's
``msg_id`` compared with the request's, so that nothing more of anyone else's message is
decoded; then the content, only within the reader's bound. The metadata is never decoded:
nothing of the server reads it.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import zmq
import zmq.asyncio
from jupyter_client.session import Session

from jupyter_sandbox.kernel.wire import (
    CONTENT_BYTES,
    HEADER_BYTES,
    MalformedMessage,
    Part,
    as_bytes,
    loads,
    parse,
)
from jupyter_sandbox.sandbox.host.log_throttle import ThrottledWarning

log = logging.getLogger(__name__)
# A kernel decides how many messages it sends that are not read: the first is said, then a count.
_skipped = ThrottledWarning(log)


class RequestChannel(Protocol):
    """A kernel client's channel, as jupyter_client's async clients have them."""

    socket: zmq.asyncio.Socket
    session: Session


def decode(
    session: Session, frames: Sequence[Part], *, request: str | None, content_bytes: int
) -> dict[str, Any] | None:
    """The message in ``frames`` (as received: routing identities, delimiter, signature, the
    four JSON frames, buffers) as jupyter_client's ``Session.deserialize`` gives it, read in
    bounded steps; with ``request``, None for a message whose parent is another request.

    MalformedMessage when it is not a message signed with ``session``'s key. A message that is
    signed but not read further (a header past ``HEADER_BYTES``, a content past
    ``content_bytes``, either not a JSON object) is given with ``"dropped"`` saying why, an
    empty content and, for a header not read, an empty message type: the caller tells whom it
    was for that something was lost. The metadata is always empty."""
    message = parse(list(frames))
    if session.auth is not None:
        # Session.sign feeds the frames to a copy of one keyed hmac: zmq.Frame is a buffer. No
        # history of signatures (jupyter_client's replay check): the kernel holds the key, and
        # could sign anew anything it replayed.
        signature = as_bytes(message.signature)
        if not hmac.compare_digest(session.sign(message.signed_parts()), signature):
            raise MalformedMessage("a message whose signature is not the kernel's key's")
    try:
        parent = _object(message.parent, HEADER_BYTES)
    except MalformedMessage as exc:
        if request is not None:
            return None  # whose it is cannot be told: nobody's
        raise MalformedMessage(f"its parent header: {exc}") from None
    if request is not None and parent.get("msg_id") != request:
        return None
    received: dict[str, Any] = {
        "header": {},
        "msg_id": "",
        "msg_type": "",
        "parent_header": parent,
        "metadata": {},
        "content": {},
        "buffers": [],
        "dropped": None,
    }
    try:
        header = _object(message.header, HEADER_BYTES)
    except MalformedMessage as exc:
        received["dropped"] = f"its header: {exc}"
        return received
    received.update(
        header=header,
        msg_id=str(header.get("msg_id", "")),
        msg_type=str(header.get("msg_type", "")),
        buffers=[memoryview(as_bytes(part)) for part in message.frames[message.delim + 6 :]]
        if request is None
        else [],  # a request's reader takes no buffers: they stay ZMQ's, uncopied
    )
    try:
        received["content"] = _object(message.content, content_bytes)
    except MalformedMessage as exc:
        received["dropped"] = f"its content: {exc}"
    return received


def _object(frame: Part, max_bytes: int) -> dict[str, Any]:
    """A JSON object frame of at most ``max_bytes`` (its length is checked before a copy)."""
    if len(frame) > max_bytes:
        raise MalformedMessage(f"{len(frame)} bytes, more than the {max_bytes} read")
    decoded = loads(as_bytes(frame), max_bytes)
    if not isinstance(decoded, dict):
        raise MalformedMessage("not a JSON object")
    return decoded


async def next_for(channel: RequestChannel, request: str, *, content_bytes: int) -> dict[str, Any]:
    """The next message ``channel`` receives whose parent is ``request`` (see :func:`decode`,
    whose ``"dropped"`` it may carry); other requests' messages, and what is not a signed
    message, are skipped unread."""
    while True:
        # Frames, not bytes: a content past the bound, and buffers, are never copied.
        frames = await channel.socket.recv_multipart(copy=False)
        try:
            found = decode(channel.session, frames, request=request, content_bytes=content_bytes)
        except MalformedMessage as exc:
            _skipped.warning("unread", "skipped a message from a sandbox's kernel: %s", exc)
            continue
        if found is not None:
            return found


class StrictSession(Session):
    """jupyter_client's Session, whose ``deserialize`` (every ``get_msg`` of the clients'
    channels) reads as :func:`decode` does, with contents up to the wire's ``CONTENT_BYTES``
    (replies on control, statuses: a request's reader uses :func:`next_for` and its own bound).
    A message not signed, or whose header or parent header is not read, raises ValueError, as
    jupyter_client's does for a bad signature."""

    def deserialize(
        self,
        msg_list: list[bytes] | list[zmq.Message],
        content: bool = True,
        copy: bool = True,
    ) -> dict[str, Any]:
        # The channel passes the frames after the delimiter (Session.feed_identities).
        frames: list[Part] = [b"<IDS|MSG>", *msg_list]
        received = decode(self, frames, request=None, content_bytes=CONTENT_BYTES)
        assert received is not None  # only a request's reader is given None
        if received["dropped"] is not None and not received["msg_type"]:
            raise MalformedMessage(f"a message not read: {received['dropped']}")
        if not content:
            received["content"] = msg_list[4]
        return received

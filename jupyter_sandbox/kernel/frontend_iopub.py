"""The frontend's iopub socket: welcomes each subscriber (JEP 65) and holds what is published
before the first one has joined.

Why hold: a PUB socket drops whatever it publishes while nobody is subscribed, and after a
restart the frontend's SUB socket joins the new proxy a reconnect interval after it binds. A
frontend can also believe the kernel ready too soon: jupyter_client's ``wait_for_ready`` takes
any kernel_info_reply and any iopub message, and after a restart its queues still hold the
surplus of the old kernel's (the replies to the kernel_info requests it repeated while that one
started, and its shutdown messages). Its first cell then reaches this proxy before its SUB has
joined, and the cell's status and output were published to nobody: the cell never finished (seen
in CI under gVisor). ipykernel has the same window; a proxy that knows when its first
subscriber joins need not.

Only the first subscription is waited for: afterwards publishing is plain PUB, so a frontend
that reconnects later misses what was published meanwhile, as with any kernel.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import zmq

from jupyter_sandbox.kernel.reactor import Reactor
from jupyter_sandbox.kernel.wire import Part, Signer

log = logging.getLogger(__name__)

Socket = zmq.Socket[bytes]
# Held for the first subscriber at most, in messages and in bytes: a frontend that never
# subscribes (a client of shell alone) must not make the proxy grow, whether a cell prints many
# lines or a few large images. Past either bound, that message and every later one are dropped,
# so the frontend gets what was published up to a point, never a gap in the middle of it.
HELD_MESSAGES = 1000
HELD_BYTES = 64 * 1024**2


class FrontendIopub:
    """The bound XPUB socket of the frontend's iopub channel, served by the relay's reactor."""

    def __init__(self, sock: Socket, reactor: Reactor, signer: Signer) -> None:
        self.sock = sock
        self.reactor = reactor
        self.signer = signer
        self._held: list[Sequence[Part]] | None = []  # None once a subscriber has joined
        self._held_bytes = 0
        self._dropped = 0
        reactor.watch(sock, self._on_subscription)

    def publish(self, frames: Sequence[Part]) -> None:
        """Publish one signed message; held until the first subscriber joins."""
        if self._held is None:
            self._send(frames)
            return
        size = sum(len(frame) for frame in frames)
        fits = len(self._held) < HELD_MESSAGES and self._held_bytes + size <= HELD_BYTES
        if fits and not self._dropped:
            self._held.append(frames)
            self._held_bytes += size
        else:
            self._dropped += 1

    def _on_subscription(self, sock: Socket) -> None:
        event = sock.recv(zmq.NOBLOCK)
        if event[:1] != b"\x01":
            return  # an unsubscription
        # As ipykernel does (JEP 65): tell each new subscriber that its subscription works.
        topic = event[1:].decode(errors="replace")
        self._send(
            self.signer.new_message(
                "iopub_welcome", {"subscription": topic}, idents=[b"kernel.iopub_welcome"]
            )
        )
        held, self._held, self._held_bytes = self._held, None, 0
        if held:
            log.debug("iopub's first subscriber joined; sending the %d messages held", len(held))
            for frames in held:
                self._send(frames)
        if self._dropped:
            log.warning(
                "%d iopub messages published before any frontend subscribed were dropped "
                "(more than %d messages or %d bytes were waiting for it)",
                self._dropped,
                HELD_MESSAGES,
                HELD_BYTES,
            )
            self._dropped = 0

    def _send(self, frames: Sequence[Part]) -> None:
        try:
            self.reactor.send(self.sock, frames)
        except zmq.ZMQError as exc:  # XPUB drops at its high-water mark; this is unexpected
            log.warning("could not publish an iopub message to the frontend: %s", exc)

"""The relay: frontend sockets bound at once, sandbox sockets connected once it is ready.

Every channel is relayed generically, so comms, widgets, the debugger and message types not yet
invented pass without special cases. Replies find their way back by ZMQ identity stacking: the
frontend's routing identities travel in front of the message to the sandbox's kernel, which sends
them back with its reply; the relay keeps no table of requests. Until the sandbox is connected,
requests wait in the frontend sockets' queues and are answered once it is (none are dropped);
control requests are read at once and held (see ``hold_control``).
Heartbeats are answered by the proxy itself: the proxy lives exactly as long as its sandbox.
What goes to the frontend's iopub is published through frontend_iopub.py, which welcomes each
subscriber and holds what comes before the first.

All sockets are plain zmq sockets owned by one Reactor on the event loop's thread (see
reactor.py for why), and hooks are plain functions: a message is received, checked, handed to
its hook, re-signed and sent on in one synchronous step, with no await in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from jupyter_sandbox.kernel.frontend_iopub import FrontendIopub
from jupyter_sandbox.kernel.log_level import TRACE
from jupyter_sandbox.kernel.reactor import Reactor, recv_frames
from jupyter_sandbox.kernel.wire import MalformedMessage, Part, Signer, WireMessage, parse
from jupyter_sandbox.protocol.errors import SandboxStartError
from jupyter_sandbox.sandbox.host.log_throttle import ThrottledWarning
from jupyter_sandbox.sandbox.kernel_link.socket_pin import (
    PinnedSockets,
    pin_sockets,
    socket_path,
)

log = logging.getLogger(__name__)

REQUEST_CHANNELS = ("shell", "control", "stdin")
# Hooks: (channel, message) -> the message to pass on (maybe changed), or None to drop it.
# They run on the loop's thread in the middle of relaying, so they must be quick.
Hook = Callable[[str, WireMessage], WireMessage | None]
Socket = zmq.Socket[bytes]
# Most seconds requests wait for the sandbox's iopub welcome (a kernel without JEP 65 sends none).
WELCOME_SECONDS = 1.0
STALL_RETRY_SECONDS = 0.01  # how soon a message the sandbox could not take is offered again
# How long a frontend port found in use is tried again: a restarted kernel keeps its ports
# (jupyter_client's connection file), and another program's connection may hold one briefly.
BIND_RETRY_SECONDS = 10.0
BIND_RETRY_INTERVAL = 0.1


def bind_retrying(sock: zmq.Socket[Any], address: str, seconds: float = BIND_RETRY_SECONDS) -> None:
    """``sock.bind(address)``, tried again while the address is in use, for up to ``seconds``
    (blocking: the proxy binds before it serves anything)."""
    deadline = time.monotonic() + seconds
    for attempt in itertools.count():
        try:
            sock.bind(address)
            return
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                raise
            if attempt == 0:  # once, not every tenth of a second
                log.warning("%s is in use; trying again for up to %g s", address, seconds)
            time.sleep(BIND_RETRY_INTERVAL)


def endpoint(info: dict[str, Any], channel: str) -> str:
    if info.get("transport", "tcp") == "ipc":
        return f"ipc://{socket_path(info, channel)}"
    return f"tcp://{info['ip']}:{info[f'{channel}_port']}"


class Pump:
    """One direction of one channel: receive, verify, hook, re-sign, send."""

    def __init__(
        self,
        reactor: Reactor,
        channel: str,
        source: tuple[Socket, Signer],
        target: tuple[Socket | None, Signer],
        hook: Hook,
        toward: str,
        dropped: ThrottledWarning,
    ) -> None:
        self.reactor = reactor
        self.dropped = dropped  # the relay's: the sandbox decides how many messages are dropped
        self.channel = channel
        self.toward = toward  # "sandbox" or "frontend", for the trace
        self.source, self.source_signer = source
        self.target, self.target_signer = target
        self.hook = hook
        self.retry: asyncio.TimerHandle | None = None

    def __call__(self, sock: Socket) -> None:
        try:
            message = parse(recv_frames(sock))
        except MalformedMessage as exc:
            self.dropped.warning(
                "malformed", "dropped a malformed %s message: %s", self.channel, exc
            )
            return
        if not self.source_signer.verify(message):
            self.dropped.warning(
                "signature", "dropped a %s message with a bad signature", self.channel
            )
            return
        self.relay(message)

    def relay(self, message: WireMessage) -> None:
        """Hand a received, verified message to the hook and send on what it passes (a pump
        without a target leaves the sending to its hook, which returns what it sent)."""
        try:
            passed = self.hook(self.channel, message)
        except (MalformedMessage, ValueError) as exc:
            self.dropped.warning(
                "header", "dropped a %s message with an unreadable header: %s", self.channel, exc
            )
            return
        if log.isEnabledFor(TRACE):
            self._trace(message, passed is not None)
        if passed is not None and self.target is not None:
            self._send(self.target_signer.frames(passed))

    def _trace(self, message: WireMessage, passed: bool) -> None:
        try:
            what = f"{message.msg_type} {message.msg_id} (parent {message.parent_msg_id() or '-'})"
        except (MalformedMessage, ValueError):
            what = "a message with an unreadable header"
        outcome = "relayed" if passed else "kept by the proxy"
        log.log(TRACE, "%s to %s: %s %s", self.channel, self.toward, what, outcome)

    def _send(self, frames: list[Part], retrying: bool = False) -> None:
        assert self.target is not None
        try:
            self.reactor.send(self.target, frames)
        except zmq.Again:
            # Only a sandbox-bound DEALER refuses, when its kernel has stopped reading a full
            # queue. Hold the message and read no more from its source until it goes: the
            # frontend waits as it would for that kernel without a proxy in between.
            if not retrying:
                self.reactor.pause(self.source)
            loop = asyncio.get_running_loop()
            self.retry = loop.call_later(STALL_RETRY_SECONDS, self._send, frames, True)
            return
        if retrying:
            self.retry = None
            self.reactor.resume(self.source)

    def cancel(self) -> None:
        if self.retry is not None:
            self.retry.cancel()


class Relay:
    """Moves messages between one frontend connection and one sandbox kernel."""

    def __init__(self, frontend_info: dict[str, Any]) -> None:
        self.frontend_info = frontend_info
        self.frontend_signer = Signer(
            frontend_info["key"].encode(), frontend_info.get("signature_scheme", "hmac-sha256")
        )
        self.context = zmq.Context()
        self.reactor = Reactor()
        # Messages dropped: the first of each kind is said, then a count (log_throttle.py).
        self.dropped = ThrottledWarning(log)
        self.frontend: dict[str, Socket] = {}
        self.sandbox: dict[str, Socket] = {}
        self.sandbox_signer: Signer | None = None
        self.sandbox_pins: PinnedSockets | None = None
        self.iopub: FrontendIopub | None = None  # the frontend's, once bound
        self._pumps: list[Pump] = []
        self._monitors: list[Socket] = []  # one per sandbox socket (watch_sandbox_connections)
        self._requests_open = False
        self._held_control: list[WireMessage] = []

    # -- frontend side ------------------------------------------------------------------------

    def bind_frontend(self) -> None:
        """Bind every socket named in the connection file, and answer heartbeats from now on."""
        kinds = {
            "shell": zmq.ROUTER,
            "control": zmq.ROUTER,
            "stdin": zmq.ROUTER,
            "iopub": zmq.XPUB,
            "hb": zmq.REP,
        }
        for channel, kind in kinds.items():
            sock = self.context.socket(kind)
            sock.linger = 1000
            if channel in REQUEST_CHANNELS:
                sock.router_handover = True  # a reconnecting frontend takes over its identity
            self.frontend[channel] = sock
            bind_retrying(sock, endpoint(self.frontend_info, channel))
        self.reactor.watch(self.frontend["hb"], self._echo_heartbeat)
        self.iopub = FrontendIopub(self.frontend["iopub"], self.reactor, self.frontend_signer)

    def hold_control(self, notice: Callable[[WireMessage], None]) -> None:
        """Until requests are relayed (``start``) or answered (``serve``), read control
        requests as they arrive and keep them, in order, to go first; ``notice`` sees each.

        Why control alone: it carries shutdown_request, and jupyter_client sends SIGTERM to a
        kernel that has not exited some seconds after one. A proxy still waiting for its sandbox
        must know by then whether a restart was asked, or it would take the SIGTERM for a
        shutdown and remove the sandbox the restart was to keep."""

        def hold(channel: str, message: WireMessage) -> None:
            self._held_control.append(message)
            notice(message)

        signer = self.frontend_signer
        control = (self.frontend["control"], signer)
        self._watch(
            Pump(self.reactor, "control", control, (None, signer), hold, "proxy", self.dropped)
        )

    def _echo_heartbeat(self, sock: Socket) -> None:
        self.reactor.send(sock, recv_frames(sock))

    def send_to_frontend(self, channel: str, frames: Sequence[Part]) -> None:
        """Send a message of the proxy's own (frontend sockets drop rather than block)."""
        if channel == "iopub":
            assert self.iopub is not None
            self.iopub.publish(frames)
            return
        try:
            self.reactor.send(self.frontend[channel], frames)
        except zmq.ZMQError as exc:
            log.warning("could not send a %s message to the frontend: %s", channel, exc)

    # -- sandbox side -------------------------------------------------------------------------

    def connect_sandbox(self, info: dict[str, Any], max_part_bytes: int = -1) -> None:
        """Connect to the sandbox's kernel, whose sockets must be bound (the manager waited for
        it to answer); through pinned paths, which the sandbox cannot redirect (socket_pin.py).
        ``max_part_bytes``: ZMQ drops the connection of a sandbox that sends a larger message
        part, before it is held (memory_bound.py); -1 for no limit.

        Raises SocketReplacedError, or SandboxStartError if the kernel has gone."""
        pins = pin_sockets(info, (*REQUEST_CHANNELS, "iopub"))
        if pins is None:
            raise SandboxStartError(
                f"the sandbox's kernel sockets at {info['ip']} are gone (its kernel stopped "
                "after it answered): start the kernel again"
            )
        self.sandbox_pins = pins
        self.sandbox_signer = Signer(
            info["key"].encode(), info.get("signature_scheme", "hmac-sha256")
        )
        # shell and stdin share one identity: the kernel addresses input_request on stdin to
        # the identity its execute_request came from on shell.
        identity = f"proxy-{uuid.uuid4()}".encode()
        for channel in REQUEST_CHANNELS:
            sock = self.context.socket(zmq.DEALER)
            sock.linger = 1000
            sock.setsockopt(zmq.MAXMSGSIZE, max_part_bytes)
            sock.identity = identity if channel != "control" else identity + b"-control"
            sock.connect(pins.endpoint(channel))
            self.sandbox[channel] = sock
        sub = self.context.socket(zmq.SUB)
        sub.setsockopt(zmq.MAXMSGSIZE, max_part_bytes)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(pins.endpoint("iopub"))
        self.sandbox["iopub"] = sub

    def start(self, to_sandbox: Hook, to_frontend: Hook) -> None:
        """Relay every channel in both directions, through the proxy's hooks.

        Requests wait until the sandbox's iopub has welcomed our subscription (JEP 65), at
        most WELCOME_SECONDS: a request relayed before it would have its status and output
        published to nobody (ZMQ's slow joiner), and a frontend waiting for them, as
        jupyter_client's wait_for_ready does, would ask again only after a timeout.
        """
        assert self.sandbox_signer is not None
        assert self.iopub is not None
        front, back = self.frontend_signer, self.sandbox_signer
        publish = self.iopub.publish

        def open_requests() -> None:
            if self._requests_open:
                return
            self._requests_open = True
            opening.cancel()
            for channel in REQUEST_CHANNELS:
                frontend, sandbox = (self.frontend[channel], front), (self.sandbox[channel], back)
                pump = Pump(
                    self.reactor, channel, frontend, sandbox, to_sandbox, "sandbox", self.dropped
                )
                self._watch(pump)
                if channel == "control":
                    self._release_held_control(pump)

        def iopub(channel: str, message: WireMessage) -> WireMessage | None:
            # Decoding the header costs; once requests flow, only the proxy's hook looks.
            if not self._requests_open and message.msg_type == "iopub_welcome":
                log.debug("sandbox iopub welcomed the proxy; relaying requests")
                open_requests()
            passed = to_frontend(channel, message)
            if passed is not None:  # published here: held until the frontend subscribes
                publish(front.frames(passed))
            return passed

        opening = asyncio.get_running_loop().call_later(WELCOME_SECONDS, open_requests)
        for channel in REQUEST_CHANNELS:
            sandbox, frontend = (self.sandbox[channel], back), (self.frontend[channel], front)
            self._watch(
                Pump(
                    self.reactor, channel, sandbox, frontend, to_frontend, "frontend", self.dropped
                )
            )
        source = (self.sandbox["iopub"], back)
        self._watch(
            Pump(self.reactor, "iopub", source, (None, front), iopub, "frontend", self.dropped)
        )

    def watch_sandbox_connections(self, dropped: Callable[[str], None]) -> None:
        """Connect again at once each sandbox socket whose connection dropped, then call
        ``dropped`` with its channel.

        ZMQ connects again by itself after a connection loss (the sandbox's interpreter
        restarted), but not after a protocol error: a message part past ``max_part_bytes``
        or one that could not be allocated (memory_bound.py) ends that connection for good,
        and the channel would stay silent. Connecting again in both cases keeps one
        connection per socket (the one ZMQ would have made is dropped first)."""
        for channel, sock in self.sandbox.items():
            monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            self._monitors.append(monitor)
            self.reactor.watch(monitor, functools.partial(self._dropped, channel, dropped))

    def _dropped(self, channel: str, dropped: Callable[[str], None], monitor: Socket) -> None:
        recv_monitor_message(monitor, zmq.NOBLOCK)  # which endpoint: this socket has one
        assert self.sandbox_pins is not None
        sock, endpoint = self.sandbox[channel], self.sandbox_pins.endpoint(channel)
        with contextlib.suppress(zmq.ZMQError):  # ENOENT: ZMQ ended it (a protocol error)
            sock.disconnect(endpoint)
        sock.connect(endpoint)
        dropped(channel)

    def serve(self, answer: Hook) -> None:
        """Without a sandbox: hand every request to ``answer`` (which replies by itself)."""
        for channel in ("shell", "control"):
            source = (self.frontend[channel], self.frontend_signer)
            target = (None, self.frontend_signer)
            pump = Pump(self.reactor, channel, source, target, answer, "proxy", self.dropped)
            self._watch(pump)
            if channel == "control":
                self._release_held_control(pump)

    def _release_held_control(self, pump: Pump) -> None:
        # The pump now serving control takes the held requests first: the reactor reads the
        # socket's newer ones only after this call returns, so their order stays.
        held, self._held_control = self._held_control, []
        for message in held:
            pump.relay(message)

    def _watch(self, pump: Pump) -> None:
        """``pump`` serves its source socket from now on, in place of its former pump if any."""
        self._pumps.append(pump)
        self.reactor.watch(pump.source, pump)

    # -- lifetime -----------------------------------------------------------------------------

    async def close(self) -> None:
        self.reactor.close()
        for pump in self._pumps:
            pump.cancel()
        if self._monitors:
            for sock in self.sandbox.values():
                sock.disable_monitor()
        for monitor in self._monitors:
            monitor.close(linger=0)
        for sock in [*self.sandbox.values(), *self.frontend.values()]:
            sock.close(linger=1000)
        # Blocks until what was sent last (a shutdown_reply, say) has left, or linger expires.
        self.context.term()
        if self.sandbox_pins is not None:
            self.sandbox_pins.close()  # only now: ZMQ may reconnect by these paths until here

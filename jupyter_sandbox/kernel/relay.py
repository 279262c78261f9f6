"""The relay: frontend sockets bound at once, sandbox sockets connected once it is ready.

Every channel is relayed generically, so comms, widgets, the debugger and message types not yet
invented pass without special cases. Replies find their way back by ZMQ identity stacking: the
frontend's routing identities travel in front of the message to the sandbox's kernel, which sends
them back with its reply; the relay keeps no table of requests. Until the sandbox is connected,
requests wait in the frontend sockets' queues and are answered once it is (none are dropped).
Heartbeats are answered by the proxy itself: the proxy lives exactly as long as its sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import zmq
import zmq.asyncio

from .wire import MalformedMessage, Signer, WireMessage, parse

log = logging.getLogger(__name__)

REQUEST_CHANNELS = ("shell", "control", "stdin")
# Hooks: (channel, message) -> the message to pass on (maybe changed), or None to drop it.
Hook = Callable[[str, WireMessage], Awaitable[WireMessage | None]]


def endpoint(info: dict[str, Any], channel: str) -> str:
    port = info[f"{channel}_port"]
    if info.get("transport", "tcp") == "ipc":
        return f"ipc://{info['ip']}-{port}"
    return f"tcp://{info['ip']}:{port}"


class Relay:
    """Moves messages between one frontend connection and one sandbox kernel."""

    def __init__(self, frontend_info: dict[str, Any]) -> None:
        self.frontend_info = frontend_info
        self.frontend_signer = Signer(
            frontend_info["key"].encode(), frontend_info.get("signature_scheme", "hmac-sha256")
        )
        self.context = zmq.asyncio.Context()
        self.frontend: dict[str, zmq.asyncio.Socket] = {}
        self.sandbox: dict[str, zmq.asyncio.Socket] = {}
        self.sandbox_signer: Signer | None = None
        self._tasks: list[asyncio.Task[None]] = []

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
            sock.bind(endpoint(self.frontend_info, channel))
            self.frontend[channel] = sock
        self._spawn(self._echo_heartbeats())
        self._spawn(self._welcome_iopub_subscribers())

    async def _echo_heartbeats(self) -> None:
        sock = self.frontend["hb"]
        while True:
            await sock.send_multipart(await sock.recv_multipart())

    async def _welcome_iopub_subscribers(self) -> None:
        # As ipykernel does (JEP 65): tell each new subscriber that its subscription works.
        sock = self.frontend["iopub"]
        while True:
            event = await sock.recv()
            if event[:1] == b"\x01":
                topic = event[1:].decode(errors="replace")
                await sock.send_multipart(
                    self.frontend_signer.new_message(
                        "iopub_welcome", {"subscription": topic}, idents=[b"kernel.iopub_welcome"]
                    )
                )

    async def send_to_frontend(self, channel: str, frames: list[Any]) -> None:
        await self.frontend[channel].send_multipart(frames)

    # -- sandbox side -------------------------------------------------------------------------

    def connect_sandbox(self, info: dict[str, Any]) -> None:
        self.sandbox_signer = Signer(
            info["key"].encode(), info.get("signature_scheme", "hmac-sha256")
        )
        # shell and stdin share one identity: the kernel addresses input_request on stdin to
        # the identity its execute_request came from on shell.
        identity = f"proxy-{uuid.uuid4()}".encode()
        for channel in REQUEST_CHANNELS:
            sock = self.context.socket(zmq.DEALER)
            sock.linger = 1000
            sock.identity = identity if channel != "control" else identity + b"-control"
            sock.connect(endpoint(info, channel))
            self.sandbox[channel] = sock
        sub = self.context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(endpoint(info, "iopub"))
        self.sandbox["iopub"] = sub

    def start(self, to_sandbox: Hook, to_frontend: Hook) -> None:
        """Relay every channel in both directions, through the proxy's hooks."""
        assert self.sandbox_signer is not None
        front, back = self.frontend_signer, self.sandbox_signer
        for channel in REQUEST_CHANNELS:
            self._spawn(
                self._pump(
                    channel, self.frontend[channel], front, self.sandbox[channel], back, to_sandbox
                )
            )
            self._spawn(
                self._pump(
                    channel, self.sandbox[channel], back, self.frontend[channel], front, to_frontend
                )
            )
        self._spawn(
            self._pump(
                "iopub", self.sandbox["iopub"], back, self.frontend["iopub"], front, to_frontend
            )
        )

    async def _pump(
        self,
        channel: str,
        source: zmq.asyncio.Socket,
        source_signer: Signer,
        target: zmq.asyncio.Socket,
        target_signer: Signer,
        hook: Hook,
    ) -> None:
        while True:
            frames = await source.recv_multipart()
            try:
                message, signature = parse(frames)
            except MalformedMessage as exc:
                log.warning("dropped a malformed %s message: %s", channel, exc)
                continue
            if not source_signer.verify(message, signature):
                log.warning("dropped a %s message with a bad signature", channel)
                continue
            try:
                passed = await hook(channel, message)
            except (MalformedMessage, ValueError) as exc:
                log.warning("dropped a %s message with an unreadable header: %s", channel, exc)
                continue
            if passed is not None:
                await target.send_multipart(target_signer.frames(passed), copy=False)

    # -- lifetime -----------------------------------------------------------------------------

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        self._tasks.append(asyncio.ensure_future(coroutine))

    def serve(self, answer: Hook) -> None:
        """Without a sandbox: hand every request to ``answer`` (which replies by itself)."""
        for channel in ("shell", "control"):
            self._spawn(
                self._pump(
                    channel,
                    self.frontend[channel],
                    self.frontend_signer,
                    self.frontend[channel],
                    self.frontend_signer,
                    answer,
                )
            )

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for sock in [*self.sandbox.values(), *self.frontend.values()]:
            sock.close(linger=1000)
        self.context.term()

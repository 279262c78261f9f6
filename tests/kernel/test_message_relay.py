"""The relay on its own (no engine): a frontend and a stand-in kernel, one key each."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio
from jupyter_client.session import Session

from jupyter_sandbox.kernel import frontend_iopub
from jupyter_sandbox.kernel.log_level import TRACE
from jupyter_sandbox.kernel.message_relay import Relay, bind_retrying, endpoint
from jupyter_sandbox.kernel.wire import WireMessage

CHANNELS = ("shell", "iopub", "stdin", "control", "hb")


def free_ports() -> dict[str, int]:
    ports = {}
    for channel in CHANNELS:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports[f"{channel}_port"] = s.getsockname()[1]
    return ports


def passing(channel: str, message: WireMessage) -> WireMessage | None:
    return message


class Peers:
    """A frontend client (DEALER, SUB) and a kernel (ROUTER, PUB), each with its own key."""

    def __init__(self, tmp: Path) -> None:
        self.front_info = {"transport": "tcp", "ip": "127.0.0.1", "key": "front", **free_ports()}
        self.back_info = {"transport": "ipc", "ip": str(tmp / "k"), "key": "back"}
        self.back_info.update({f"{c}_port": i for i, c in enumerate(CHANNELS)})
        self.front = Session(key=b"front")
        self.back = Session(key=b"back")
        self.ctx = zmq.asyncio.Context()
        self.client = self.ctx.socket(zmq.DEALER)
        self.kernel = self.ctx.socket(zmq.ROUTER)
        self.kernel.rcvhwm = 1  # so that a kernel which stops reading backs the relay up soon
        self.kernel.bind(endpoint(self.back_info, "shell"))
        # The relay connects only to sockets the kernel has bound (see socket_pin.py).
        self.kernel_control = self.ctx.socket(zmq.ROUTER)
        self.kernel_control.bind(endpoint(self.back_info, "control"))
        self.ctx.socket(zmq.ROUTER).bind(endpoint(self.back_info, "stdin"))
        self.kernel_iopub = self.ctx.socket(zmq.PUB)
        self.kernel_iopub.bind(endpoint(self.back_info, "iopub"))

    async def request(self, n: int) -> None:
        self.front.send(self.client, "execute_request", {"code": f"{n}"})

    async def kernel_receives(self) -> tuple[list[bytes], dict[str, Any]]:
        idents, frames = self.back.feed_identities(await self.kernel.recv_multipart())
        return idents, self.back.deserialize(frames)  # raises if the relay signed wrongly

    def close(self) -> None:
        self.ctx.destroy(linger=0)


@pytest.fixture
async def peers(tmp_path: Path) -> AsyncIterator[tuple[Peers, Relay]]:
    peers = Peers(tmp_path)
    relay = Relay(peers.front_info)
    relay.bind_frontend()
    relay.context.setsockopt(zmq.SNDHWM, 4)  # the sandbox side's sockets, made next
    relay.connect_sandbox(peers.back_info)
    relay.start(passing, passing)
    peers.client.connect(endpoint(peers.front_info, "shell"))
    try:
        yield peers, relay
    finally:
        peers.close()
        await relay.close()


async def test_messages_are_re_signed_both_ways_in_order(peers: tuple[Peers, Relay]) -> None:
    p, _ = peers
    for n in range(200):
        await p.request(n)
    for n in range(200):
        idents, msg = await asyncio.wait_for(p.kernel_receives(), 5)
        assert msg["content"]["code"] == f"{n}"
        p.back.send(p.kernel, "execute_reply", {"n": n}, parent=msg, ident=idents)
    for n in range(200):
        frames = await asyncio.wait_for(p.client.recv_multipart(), 5)
        reply = p.front.deserialize(p.front.feed_identities(frames)[1])
        assert reply["content"] == {"n": n}


async def test_trace_names_every_message_relayed_and_nothing_below_it(
    peers: tuple[Peers, Relay], caplog: pytest.LogCaptureFixture
) -> None:
    """At TRACE, a line per message moved (channel, direction, type, id, parent); at DEBUG,
    none: the header is not even decoded for it."""
    p, _ = peers
    caplog.set_level(logging.DEBUG, logger="jupyter_sandbox.kernel.message_relay")
    await p.request(0)
    await asyncio.wait_for(p.kernel_receives(), 5)
    assert "shell to" not in caplog.text
    caplog.set_level(TRACE, logger="jupyter_sandbox.kernel.message_relay")
    await p.request(1)
    idents, request = await asyncio.wait_for(p.kernel_receives(), 5)
    p.back.send(p.kernel, "execute_reply", {"status": "ok"}, parent=request, ident=idents)
    await asyncio.wait_for(p.client.recv_multipart(), 5)
    request_id = request["header"]["msg_id"]
    traced = [r.getMessage() for r in caplog.records if r.levelno == TRACE]
    assert f"shell to sandbox: execute_request {request_id} (parent -) relayed" in traced
    assert any(
        line.startswith("shell to frontend: execute_reply ")
        and line.endswith(f"(parent {request_id}) relayed")
        for line in traced
    ), traced
    assert "code" not in " ".join(traced)  # names, never content


async def test_a_kernel_that_stops_reading_holds_requests_back_and_none_is_lost(
    peers: tuple[Peers, Relay],
) -> None:
    p, _ = peers
    for n in range(100):  # far more than the queues between relay and kernel hold
        await p.request(n)
    await asyncio.sleep(0.5)
    # Meanwhile the relay's loop is not blocked: heartbeats are answered.
    hb = p.ctx.socket(zmq.REQ)
    hb.connect(endpoint(p.front_info, "hb"))
    await hb.send(b"ping")
    assert await asyncio.wait_for(hb.recv(), 5) == b"ping"
    received = [(await asyncio.wait_for(p.kernel_receives(), 5))[1] for _ in range(100)]
    assert [m["content"]["code"] for m in received] == [f"{n}" for n in range(100)]


async def test_bad_messages_are_dropped_and_the_relay_goes_on(
    peers: tuple[Peers, Relay], caplog: pytest.LogCaptureFixture
) -> None:
    p, _ = peers
    await p.client.send_multipart([b"not a jupyter message"])
    await p.client.send_multipart([b"<IDS|MSG>", b"bad", b"{}", b"{}", b"{}", b"{}"])
    await p.request(1)
    _, msg = await asyncio.wait_for(p.kernel_receives(), 5)
    assert msg["content"]["code"] == "1"
    assert "dropped a malformed shell message" in caplog.text
    assert "dropped a shell message with a bad signature" in caplog.text


@pytest.mark.checklist(
    row=127,
    attack="a sandbox's kernel sends the proxy 10,000 one-byte junk messages (no key needed: "
    "each was logged as malformed before any signature check, one WARNING line each)",
    expected="each is dropped; the host's log gets the first at WARNING and no line per message "
    "after it (fewer than 5 WARNING records), and the relay goes on",
)
async def test_a_flood_of_junk_from_the_sandbox_does_not_flood_the_log(
    peers: tuple[Peers, Relay], caplog: pytest.LogCaptureFixture, observe: Callable[..., None]
) -> None:
    p, _ = peers
    caplog.set_level(logging.DEBUG, logger="jupyter_sandbox.kernel.message_relay")
    await p.request(0)
    idents, request = await asyncio.wait_for(p.kernel_receives(), 5)
    p.kernel.setsockopt(zmq.ROUTER_MANDATORY, 1)  # each one sent, none dropped by ZMQ
    junk = 10_000
    for _ in range(junk):
        await p.kernel.send_multipart([*idents, b"x"])
    reply = p.back.msg("execute_reply", {"status": "ok"}, parent=request)
    await p.kernel.send_multipart(p.back.serialize(reply, ident=idents))  # waits its turn too
    frames = await asyncio.wait_for(p.client.recv_multipart(), 30)  # after all the junk
    assert p.front.deserialize(p.front.feed_identities(frames)[1])["msg_type"] == "execute_reply"
    dropped = [r for r in caplog.records if "dropped a malformed shell" in r.getMessage()]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(dropped) == junk  # every one was seen and dropped
    assert len(warnings) < 5, [r.getMessage() for r in warnings]
    observe(f"{junk} junk messages dropped: {len(warnings)} WARNING line(s), the rest at DEBUG")


async def test_control_requests_before_the_sandbox_are_seen_at_once_and_relayed_first(
    tmp_path: Path,
) -> None:
    p = Peers(tmp_path)
    relay = Relay(p.front_info)
    try:
        relay.bind_frontend()
        seen: list[str] = []
        relay.hold_control(lambda message: seen.append(message.msg_type))
        control = p.ctx.socket(zmq.DEALER)
        control.connect(endpoint(p.front_info, "control"))
        p.front.send(control, "interrupt_request", {})
        p.front.send(control, "shutdown_request", {"restart": True})
        for _ in range(100):  # the sandbox is not there yet, but the proxy learns of them
            if len(seen) == 2:
                break
            await asyncio.sleep(0.05)
        assert seen == ["interrupt_request", "shutdown_request"]
        relay.connect_sandbox(p.back_info)
        relay.start(passing, passing)
        p.front.send(control, "debug_request", {})
        received = []
        for _ in range(3):
            frames = await asyncio.wait_for(p.kernel_control.recv_multipart(), 5)
            received.append(p.back.deserialize(p.back.feed_identities(frames)[1]))
        assert [m["msg_type"] for m in received] == [
            "interrupt_request",
            "shutdown_request",
            "debug_request",
        ]
        assert received[1]["content"] == {"restart": True}
    finally:
        p.close()
        await relay.close()


@pytest.mark.parametrize("bound", ["messages", "bytes"])
async def test_iopub_published_before_the_frontend_subscribes_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, bound: str
) -> None:
    """What the relay publishes before the frontend's SUB has joined (the proxy's own messages,
    the sandbox's output) reaches it once it joins, after its welcome; at most HELD_MESSAGES
    messages and HELD_BYTES bytes, and nothing after the first one dropped."""
    if bound == "messages":
        monkeypatch.setattr(frontend_iopub, "HELD_MESSAGES", 3)
    else:
        monkeypatch.setattr(frontend_iopub, "HELD_BYTES", 64 * 1024)
    p = Peers(tmp_path)
    relay = Relay(p.front_info)
    relayed: list[str] = []

    def seen(channel: str, message: WireMessage) -> WireMessage | None:
        if channel == "iopub":
            relayed.append(message.content_dict()["text"])
        return message

    try:
        relay.bind_frontend()
        relay.connect_sandbox(p.back_info)
        relay.start(passing, seen)
        own = relay.frontend_signer.new_message("stream", {"name": "stdout", "text": "own"})
        relay.send_to_frontend("iopub", own)
        # The relay's own SUB joins the kernel's PUB late too: publish until one has passed.
        for n in range(200):
            p.back.send(p.kernel_iopub, "stream", {"name": "stdout", "text": f"kernel {n}"})
            await asyncio.sleep(0.02)
            if len(relayed) >= 3:
                break
        await asyncio.sleep(0.3)  # those still on their way are relayed (and held) too
        held = ["own", *relayed[:2]]
        if bound == "bytes":  # one message past the bound in bytes, then a small one
            big = "x" * 64 * 1024
            for text in (big, "small, after the big one"):
                p.back.send(p.kernel_iopub, "stream", {"name": "stdout", "text": text})
            for _ in range(250):
                if "small, after the big one" in relayed:
                    break
                await asyncio.sleep(0.02)
            held = ["own", *relayed[: relayed.index(big)]]
        sub = p.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(endpoint(p.front_info, "iopub"))
        received = []
        for _ in range(1 + len(held)):
            frames = await asyncio.wait_for(sub.recv_multipart(), 5)
            received.append(p.front.deserialize(p.front.feed_identities(frames)[1]))
        assert received[0]["msg_type"] == "iopub_welcome"
        assert [m["content"]["text"] for m in received[1:]] == held
        assert await sub.poll(200) == 0  # past the bound, the rest were dropped, and said so
        assert "iopub messages published before any frontend subscribed were dropped" in (
            caplog.text
        )
        # Once joined, publishing is immediate.
        p.back.send(p.kernel_iopub, "stream", {"name": "stdout", "text": "after"})
        frames = await asyncio.wait_for(sub.recv_multipart(), 5)
        assert p.front.deserialize(p.front.feed_identities(frames)[1])["content"]["text"] == (
            "after"
        )
    finally:
        p.close()
        await relay.close()


def test_a_frontend_port_held_for_a_moment_is_bound_once_free() -> None:
    """A restarted kernel keeps its ports; another program may hold one for a moment."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    context = zmq.Context()
    try:
        with pytest.raises(zmq.ZMQError) as refused:  # held past the limit: the error stands
            bind_retrying(context.socket(zmq.ROUTER), f"tcp://127.0.0.1:{port}", seconds=0.3)
        assert refused.value.errno == errno.EADDRINUSE
        threading.Timer(0.3, holder.close).start()
        started = time.monotonic()
        bind_retrying(context.socket(zmq.ROUTER), f"tcp://127.0.0.1:{port}", seconds=10)
        assert time.monotonic() - started >= 0.3
    finally:
        holder.close()
        context.destroy(linger=0)

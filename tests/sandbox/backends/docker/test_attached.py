"""An attached exec's output, read whole when it came with the engine's answer (attached.py).

On a busy host the thread that reads the engine's ``101 UPGRADED`` answer may be late, and
its buffered read then takes the command's first output too; read past that buffer, the output
lost its start (CI: a process listing that began mid-way, read as a frame header). Here the
answer is parsed only once the output has come after it, which makes that moment happen every
time; the engine, the sandbox and docker-py are the real ones. Under gVisor a supervised
command (a caller's, a terminal's shell) writes nothing until its supervisor is placed, which
waits for the start to be answered: there the commands are unsupervised, and the terminal's
case is runc's.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from jupyter_sandbox.protocol.errors import EngineUnavailableError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.backends.docker.attached import PIECE, AttachedExec
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.docker.exec import run_exec
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.sandbox_types import Sandbox

UPGRADED = b"HTTP/1.1 101 UPGRADED"
# How long the command's first output may take to come after the engine's answer (seconds).
OUTPUT_WAIT = 30.0


@pytest.fixture
def answers_read_late(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every ``101 UPGRADED`` answer is parsed only once more bytes came after its headers;
    how many bytes each time (none: no such answer was parsed)."""
    begin = http.client.HTTPResponse.begin
    came_along: list[int] = []

    def late(response: http.client.HTTPResponse) -> None:
        sock = response.fp.raw._sock  # type: ignore[attr-defined]
        deadline = time.monotonic() + OUTPUT_WAIT
        while time.monotonic() < deadline:
            pending = sock.recv(64 * 1024, socket.MSG_PEEK)
            if not pending.startswith(UPGRADED):
                break
            after = pending.partition(b"\r\n\r\n")[2]
            if after:
                came_along.append(len(after))
                break
            time.sleep(0.01)
        begin(response)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late)
    return came_along


@pytest.mark.integration
async def test_output_that_came_with_the_answer_is_read_whole(
    manager: SandboxManager, sandbox: Sandbox, answers_read_late: list[int]
) -> None:
    argv = ["sh", "-c", "printf 'first line\\n'; printf 'a warning\\n' >&2; seq 1 3"]
    options = ExecOptions(timeout=60, supervised=False)
    result = await manager.exec("alice", sandbox.sandbox_id, argv, options)
    assert answers_read_late, "no output came with the engine's answer: the race was not run"
    assert result.exit_code == 0
    assert result.stdout == b"first line\n1\n2\n3\n"
    assert result.stderr == b"a warning\n"

    pieces: list[tuple[str, bytes]] = []
    streamed = replace(options, output=lambda stream, data: pieces.append((stream, data)))
    await manager.exec("alice", sandbox.sandbox_id, argv, streamed)
    assert b"".join(data for stream, data in pieces if stream == "stdout") == result.stdout
    assert b"".join(data for stream, data in pieces if stream == "stderr") == result.stderr


@pytest.mark.integration
async def test_a_terminals_first_output_that_came_with_the_answer_is_shown(
    manager: SandboxManager, purpose: str, answers_read_late: list[int]
) -> None:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    terminal = await manager.open_terminal("alice", sandbox.sandbox_id)
    try:
        assert answers_read_late, "no output came with the engine's answer: the race was not run"
        shown = b""
        async with asyncio.timeout(OUTPUT_WAIT):
            while b"$ " not in shown:  # the prompt: bash's first output
                piece = await terminal.read()
                assert piece, f"the terminal ended after {shown!r}"
                shown += piece
    finally:
        await terminal.close()


@pytest.mark.integration
async def test_a_command_silent_for_longer_than_the_clients_timeout_is_waited_for(
    manager: SandboxManager, purpose: str
) -> None:
    # The exec is started by the client for short calls, whose HTTP timeout is the engine's
    # (here 1 s); the command's time limit is what bounds its wait.
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    engine = DockerEngine(timeout=1)
    try:
        result = await run_exec(
            engine,
            labels.container_name(sandbox.sandbox_id),
            ["sh", "-c", "sleep 3; echo done"],
            ExecOptions(timeout=30, supervised=False),
            inspect=lambda: manager.backend.inspect(sandbox.sandbox_id),
        )
    finally:
        engine.close()
    assert (result.exit_code, result.stdout) == (0, b"done\n")


# The frames themselves, on a socket pair: the engine's framing as Docker documents it.


def frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


@pytest.fixture
def connection() -> Iterator[tuple[AttachedExec, socket.socket]]:
    """An attached exec's connection and the engine's end of it."""
    ours, engine = socket.socketpair()
    with ours, engine:
        yield AttachedExec(ours.makefile("rb"), ours), engine


def test_frames_are_read_in_order_and_in_pieces(
    connection: tuple[AttachedExec, socket.socket],
) -> None:
    attached, engine = connection
    large = bytes(range(256)) * (3 * PIECE // 256 + 1)
    engine.sendall(frame(1, b"out") + frame(2, b"err") + frame(1, large) + frame(1, b""))
    engine.shutdown(socket.SHUT_WR)
    frames = list(attached.frames())
    assert frames[:2] == [("stdout", b"out"), ("stderr", b"err")]
    assert all(len(piece) <= PIECE for _, piece in frames)
    assert b"".join(piece for _, piece in frames[2:]) == large


def test_a_header_that_is_not_one_is_refused(
    connection: tuple[AttachedExec, socket.socket],
) -> None:
    attached, engine = connection
    engine.sendall(frame(1, b"ok") + b"output that is not a frame header")
    engine.shutdown(socket.SHUT_WR)
    frames = attached.frames()
    assert next(frames) == ("stdout", b"ok")
    with pytest.raises(EngineUnavailableError, match="frame header 6f75747075742074"):
        next(frames)


def test_an_announced_length_is_not_a_buffer_size(
    connection: tuple[AttachedExec, socket.socket],
) -> None:
    attached, engine = connection
    # 4 GiB announced, 3 bytes sent, then the connection is shut (as a wait that gave up does).
    engine.sendall(struct.pack(">BxxxL", 1, 2**32 - 1) + b"abc")
    engine.shutdown(socket.SHUT_WR)
    assert list(attached.frames()) == [("stdout", b"abc")]


def test_a_connection_started_with_a_timeout_waits_without_one() -> None:
    ours, engine = socket.socketpair()
    with ours, engine:
        ours.settimeout(0.05)  # docker-py's socket comes with its client's HTTP timeout
        attached = AttachedExec(ours.makefile("rb"), ours)
        later = threading.Timer(0.5, engine.sendall, [frame(1, b"late")])
        later.start()
        frames = attached.frames()
        assert next(frames) == ("stdout", b"late")
        later.join()


def test_what_came_with_the_answer_is_handed_over_before_the_socket() -> None:
    ours, engine = socket.socketpair()
    with ours, engine:
        engine.sendall(UPGRADED + b"\r\nUpgrade: tcp\r\n\r\nprompt$ ")
        response = http.client.HTTPResponse(ours)
        response.begin()
        assert isinstance(response.fp, io.BufferedReader)
        attached = AttachedExec(response.fp, ours)
        assert attached.read_ahead() == b"prompt$ "
        assert attached.read_ahead() == b""  # nothing more was read, nothing is waited for
        engine.sendall(b"typed")
        assert ours.recv(16) == b"typed"

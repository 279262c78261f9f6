"""Ports (ports.py, port_program.py) on a real engine: the host reaches a server the sandbox's
code started on its loopback, IPv4 or IPv6, byte for byte; a port nobody listens on, a killed
opener, a socket replaced by a link and bad port numbers each get their answer."""

from __future__ import annotations

import asyncio
import hashlib
import socket

import pytest

from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    PortNotListeningError,
    PortOpenerError,
    SandboxConflictError,
)
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations.ports import (
    FORWARDER_MARK,
    PROGRAM_NAME,
    STATE_KEY,
    ListeningPort,
    check_port,
    listed_ports,
)
from tests.sandbox.snapshots.workspace_files import OWNER, sh

pytestmark = pytest.mark.integration


async def serve(
    manager: SandboxManager, sandbox_id: str, port: int, bind: str = "127.0.0.1"
) -> None:
    """``python -m http.server`` on ``port`` of the sandbox's ``bind``, serving /workspace."""
    await manager.backend.spawn(
        sandbox_id,
        ["python", "-m", "http.server", str(port), "--bind", bind, "--directory", "/workspace"],
        environment={},
    )
    for _ in range(300):
        if port in [found.port for found in await manager.ports.listening(OWNER, sandbox_id)]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


async def http_get(sock: socket.socket, path: str) -> bytes:
    """The whole answer to a GET of ``path`` with ``Connection: close``."""
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(
        sock, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    )
    answer = b""
    while chunk := await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 30):
        answer += chunk
    sock.close()
    return answer


async def test_a_server_in_the_sandbox_is_reached_byte_for_byte(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    sandbox_id = sandbox.sandbox_id
    digest = (
        await sh(manager, sandbox_id, "head -c 20000000 /dev/urandom > big && sha256sum big")
    ).split()[0]
    with pytest.raises(
        PortNotListeningError, match=r"nothing listens on port 8000.*http\.server 8000"
    ):
        await manager.ports.connect(OWNER, sandbox_id, 8000)
    await serve(manager, sandbox_id, 8000)
    # The kernel's own pipe (an ephemeral port) is not listed; the server is, with its command.
    listed = await manager.ports.listening(OWNER, sandbox_id)
    assert [(found.port, "http.server 8000" in found.command) for found in listed] == [
        (8000, True)
    ], listed
    answer = await http_get(await manager.ports.connect(OWNER, sandbox_id, 8000), "/big")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200")
    assert len(body) == 20_000_000
    assert hashlib.sha256(body).hexdigest() == digest
    # Several at once, each its own connection in the sandbox.
    answers = await asyncio.gather(
        *[http_get(await manager.ports.connect(OWNER, sandbox_id, 8000), "/") for _ in range(8)]
    )
    assert all(b"big" in answer for answer in answers)


async def test_an_ipv6_server_is_reached_and_a_killed_opener_is_started_again(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    sandbox_id = sandbox.sandbox_id
    await serve(manager, sandbox_id, 9000, bind="::1")
    assert b"200" in await http_get(await manager.ports.connect(OWNER, sandbox_id, 9000), "/")
    first = manager.read_state(sandbox_id)[STATE_KEY]
    # The sandbox's code may kill the opener (it runs as the sandbox's user).
    killed = await sh(
        manager,
        sandbox_id,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline | head -c 80 | "
        f"grep -q -- '-S -c {PROGRAM_NAME}' && kill ${{p#/proc/}} && echo killed; done; true",
    )
    assert killed.split() == ["killed"]
    assert b"200" in await http_get(await manager.ports.connect(OWNER, sandbox_id, 9000), "/")
    assert manager.read_state(sandbox_id)[STATE_KEY] != first


async def test_a_link_in_place_of_the_openers_socket_is_not_followed(
    manager: SandboxManager, sandbox: Sandbox, tmp_path: object
) -> None:
    sandbox_id = sandbox.sandbox_id
    await serve(manager, sandbox_id, 8000)
    (await manager.ports.connect(OWNER, sandbox_id, 8000)).close()
    name = manager.read_state(sandbox_id)[STATE_KEY]
    # A host socket the link points at: connecting to it would be the sandbox redirecting us.
    directory = SandboxDirectory(manager.settings.state_path, sandbox_id)
    bait = directory.root / "bait.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(bait))
    listener.listen(1)
    listener.setblocking(False)
    try:
        await sh(manager, sandbox_id, f"rm /run/sandbox/{name} && ln -s {bait} /run/sandbox/{name}")
        with pytest.raises(PortOpenerError, match="symlink"):
            await manager.ports.connect(OWNER, sandbox_id, 8000)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


async def test_ports_of_a_paused_sandbox_and_bad_numbers_are_refused(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    sandbox_id = sandbox.sandbox_id
    for bad in (0, 65536, -1, "80a", 8.5, True, None):
        with pytest.raises(
            InvalidRequestError, match="port must be a whole number from 1 to 65535"
        ):
            await manager.ports.connect(OWNER, sandbox_id, bad)  # type: ignore[arg-type]
    await manager.pause(OWNER, sandbox_id)
    try:
        with pytest.raises(SandboxConflictError, match="paused: resume it first"):
            await manager.ports.connect(OWNER, sandbox_id, 8000)
    finally:
        await manager.resume(OWNER, sandbox_id)


def test_port_numbers_are_checked_and_the_sandboxs_machinery_is_told_apart() -> None:
    assert check_port("8080") == 8080
    assert check_port(1) == 1
    kernel = "/opt/sandbox/bin/python -m ipykernel_launcher -f /run/sandbox/kernel.json"
    assert ListeningPort(3128, f'python -c """{FORWARDER_MARK}\n...').machinery(32768)
    assert ListeningPort(36265, kernel).machinery(32768)
    assert ListeningPort(21862, kernel).machinery(16000)  # gVisor's ephemeral ports
    # A server the user started, in the kernel or not, on the same ports, is theirs.
    assert not ListeningPort(3128, "python -m http.server 3128").machinery(32768)
    assert not ListeningPort(8050, kernel).machinery(16000)
    assert not ListeningPort(36265, "python -m http.server 0").machinery(32768)


def test_a_port_list_is_read_as_the_program_prints_it() -> None:
    report = b'{"listening": [[8000, "python -m http.server"], [80, "nginx"]], "ephemeral_from": 1}'
    assert listed_ports(report, "0123456789ab") == [
        ListeningPort(80, "nginx"),
        ListeningPort(8000, "python -m http.server"),
    ]


@pytest.mark.parametrize(
    ("report", "why"),
    [
        # json.loads raised RecursionError, int(inf) OverflowError: both escaped as a 500.
        (b"[" * 60_000, "nested too deeply"),
        (b'{"listening": [[Infinity, "x"]], "ephemeral_from": 1}', "Infinity is not"),
        (b'{"listening": [], "ephemeral_from": 1e999}', "too large"),
        (b'{"listening": [], "ephemeral_from": NaN}', "NaN is not"),
        (b" " * (1024**2 + 1), "more than"),
        # int() and str() took these as ports and commands.
        (b'{"listening": [["80", "x"]], "ephemeral_from": 1}', r"not \[port, command\]"),
        (b'{"listening": [[80.5, "x"]], "ephemeral_from": 1}', r"not \[port, command\]"),
        (b'{"listening": [[true, "x"]], "ephemeral_from": 1}', r"not \[port, command\]"),
        (b'{"listening": [[70000, "x"]], "ephemeral_from": 1}', r"not \[port, command\]"),
        (b'{"listening": [[80, ["x"]]], "ephemeral_from": 1}', r"not \[port, command\]"),
        (b'{"listening": [[80, "x", 1]], "ephemeral_from": 1}', r"not \[port, command\]"),
        (b'{"listening": "80", "ephemeral_from": 1}', "no list as listening"),
        (b'{"listening": [], "ephemeral_from": "1"}', "no port number"),
        (b'{"listening": [], "ephemeral_from": 1, "more": 1}', "not an object of"),
        (b"[]", "not an object of"),
    ],
)
def test_a_port_list_other_than_the_programs_is_a_port_opener_error(
    report: bytes, why: str
) -> None:
    with pytest.raises(PortOpenerError, match=why) as refused:
        listed_ports(report, "0123456789ab")
    assert "port list of sandbox 0123456789ab" in refused.value.message
    assert len(refused.value.message) < 300

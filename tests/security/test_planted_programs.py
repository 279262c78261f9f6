"""Rows 50 and 51: programs planted on the sandbox's PATH (``sh``, ``python3``, ``tar``, ``env``,
``kill`` ...) in /tmp/.local/bin, the first PATH entry, where ``pip install`` puts scripts (a
noexec mount: a program found there fails to start), and in /workspace/bin, a directory a
sandbox's creator put first on PATH (where a planted program runs). Neither changes what the
host runs in the sandbox (image_programs.py): its files API, commands and their time limit,
background commands, snapshots, terminals, ports, stats and attestation work as before, and
none of the planted programs ever runs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations.commands import CommandRequest
from jupyter_sandbox.sandbox.programs import image_programs
from tests.security.conftest import run

pytestmark = pytest.mark.integration

PLANTED = [
    "sh",
    "bash",
    "dash",
    "python",
    "python3",
    "python3.11",
    "tar",
    "env",
    "kill",
    "grep",
    "timeout",
    "cat",
    "mkdir",
    "dirname",
    "stat",
    "tail",
    "head",
    "rm",
    "tr",
    "ls",
]
# What a planted program does if it ever runs: says so where the test looks, and fails.
PLANT = '#!/bin/sh\necho "$0 $*" >>/workspace/planted.log\nexit 99\n'
PATH = "/workspace/bin:/tmp/.local/bin:/opt/sandbox/bin:/usr/local/bin:/usr/bin:/bin"
PLANT_CODE = f"""
import os
for directory in ("/tmp/.local/bin", "/workspace/bin"):
    os.makedirs(directory, exist_ok=True)
    for name in {PLANTED!r}:
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write({PLANT!r})
        os.chmod(path, 0o755)
print(len(os.listdir("/tmp/.local/bin")) + len(os.listdir("/workspace/bin")))
"""
SERVER_CODE = """
import socket, threading
server = socket.socket()
server.bind(("127.0.0.1", 8765))  # below the ephemeral ports: not the kernel's own
server.listen()
def answer():
    while True:
        peer, _ = server.accept()
        peer.sendall(b"hello from the sandbox")
        peer.close()
threading.Thread(target=answer, daemon=True).start()
print(server.getsockname()[1])
"""


@pytest.fixture
async def planted(manager: SandboxManager, runtime: str, purpose: str) -> Sandbox:
    """A sandbox whose PATH starts with /workspace/bin, with programs planted on it."""
    sandbox = await manager.create(
        "alice", runtime=runtime, environment={"PATH": PATH}, purpose=purpose
    )
    assert await run(sandbox, PLANT_CODE) == str(2 * len(PLANTED))
    # Planted for commands too: a command's own lookups find them (its business, not the host's).
    shadowed = await manager.exec("alice", sandbox.sandbox_id, ["/bin/sh", "-c", "command -v tar"])
    assert shadowed.stdout == b"/workspace/bin/tar\n"
    return sandbox


async def nothing_planted_ran(manager: SandboxManager, sandbox: Sandbox) -> None:
    listing = await manager.files.list("alice", sandbox.sandbox_id, "/workspace")
    names = {entry["name"] for entry in listing["entries"]}
    if "planted.log" in names:
        ran = await manager.files.read("alice", sandbox.sandbox_id, "planted.log")
        raise AssertionError(f"planted programs ran: {ran.decode(errors='replace')}")


@pytest.mark.checklist(
    row=50,
    attack="sh, python3, tar, env, kill, grep, timeout ... planted in /tmp/.local/bin and in a "
    "PATH directory in /workspace, then every host operation in the sandbox",
    expected="files API, background commands, snapshots, terminals, ports, stats and "
    "attestation work; no planted program runs",
)
async def test_row50_planted_programs_change_nothing_the_host_runs(
    manager: SandboxManager, planted: Sandbox, observe: Callable[[str], None]
) -> None:
    sandbox_id = planted.sandbox_id
    files = manager.files
    await files.make_directory("alice", sandbox_id, "data")
    await files.write("alice", sandbox_id, "data/a.txt", b"payload")
    await files.move("alice", sandbox_id, "data/a.txt", "data/b.txt")
    assert await files.read("alice", sandbox_id, "data/b.txt") == b"payload"
    assert (await files.info("alice", sandbox_id, "data/b.txt"))["size"] == 7

    archive = await manager.snapshots.persist_bytes("alice", sandbox_id)
    await files.remove("alice", sandbox_id, "data/b.txt")
    await manager.snapshots.hydrate_bytes("alice", sandbox_id, archive)
    assert await files.read("alice", sandbox_id, "data/b.txt") == b"payload"

    request = CommandRequest.from_json({"command": ["/bin/echo", "background"]})
    command = await manager.background.start("alice", sandbox_id, request)
    for _ in range(300):
        if not (await manager.background.get("alice", sandbox_id, command.command_id)).running:
            break
        await asyncio.sleep(0.1)
    output = await manager.background.output("alice", sandbox_id, command.command_id)
    assert output.text == "background\n"
    await manager.background.remove("alice", sandbox_id, command.command_id)

    terminal = await manager.open_terminal("alice", sandbox_id)
    try:
        await terminal.write(b"echo $((6*7))-ok\r")
        seen = b""
        while b"42-ok" not in seen:
            piece = await terminal.read()
            assert piece, seen
            seen += piece
    finally:
        await terminal.close()

    port = int(await run(planted, SERVER_CODE))
    assert port in {found.port for found in await manager.ports.listening("alice", sandbox_id)}
    sock = await manager.ports.connect("alice", sandbox_id, port)
    try:
        sock.setblocking(True)
        sock.settimeout(10)
        assert sock.recv(100) == b"hello from the sandbox"
    finally:
        sock.close()

    stats = await manager.stats("alice", sandbox_id)
    assert stats.processes is not None, stats.notes
    report = await manager.attestation("alice", sandbox_id, refresh=True)
    assert report.error is None, report.error

    await nothing_planted_ran(manager, planted)
    observe(
        f"{len(PLANTED)} programs planted in 2 PATH directories; files, snapshot and restore, "
        "a background command, a terminal, a port, stats and attestation all worked; no "
        "planted program ran"
    )


@pytest.mark.checklist(
    row=51,
    attack="a command past its time limit in a sandbox with sh, python3, env, kill, grep and "
    "timeout planted on PATH",
    expected="the time limit still kills the command and all it started",
)
async def test_row51_planted_programs_do_not_stop_the_time_limit(
    manager: SandboxManager, planted: Sandbox, observe: Callable[[str], None]
) -> None:
    sandbox_id = planted.sandbox_id
    started = time.monotonic()
    result = await manager.exec(
        "alice", sandbox_id, ["/bin/sleep", "5101"], ExecOptions(timeout=2, supervised=True)
    )
    took = time.monotonic() - started
    assert result.timed_out
    listing = await manager.exec(
        "alice",
        sandbox_id,
        image_programs.shell("cat /proc/[0-9]*/cmdline | tr '\\0' ' '"),
        ExecOptions(supervised=False),
    )
    assert b"sleep 5101" not in listing.stdout, listing.stdout
    await nothing_planted_ran(manager, planted)
    observe(f"timed out after {took:.1f} s (limit 2 s); the command was killed")

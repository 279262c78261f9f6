"""`jupyter sandbox ports|forward` as a person runs them: a web server started in a real sandbox,
listed, then fetched through a forward on a local port with urllib, byte for byte; a port where
nothing listens yet, a sandbox that goes away, Ctrl-C and SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from asyncio.subprocess import PIPE, Process
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jupyter_sandbox.cli.ports import shown
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from tests.sandbox.operations.test_ports import serve

pytestmark = pytest.mark.integration
JUPYTER = [sys.executable, "-m", "jupyter_sandbox.cli"]
OWNER = "alice"
# Straight to 127.0.0.1, whatever proxy the environment names.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def cli(*args: str, state_dir: Path) -> list[str]:
    return [*JUPYTER, *args, f"--SandboxSettings.state_dir={state_dir}", f"--owner={OWNER}"]


async def ports_cli(*args: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, cli(*args, state_dir=state_dir), capture_output=True, text=True, timeout=300
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def fetch(url: str) -> bytes:
    def get() -> bytes:
        with DIRECT.open(url, timeout=60) as answer:
            return bytes(answer.read())

    return await asyncio.to_thread(get)


@contextlib.asynccontextmanager
async def forwarding(*args: str, state_dir: Path) -> AsyncIterator[tuple[Process, str]]:
    """``jupyter sandbox forward ARGS`` running, with the first line it printed; killed when
    the block ends if the test did not stop it."""
    process = await asyncio.create_subprocess_exec(
        *cli("forward", *args, state_dir=state_dir),
        stdin=subprocess.DEVNULL,
        stdout=PIPE,
        stderr=PIPE,
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 120)).decode()
        yield process, line
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def stopped(process: Process, signum: int) -> tuple[int, str]:
    """Send ``signum``; the exit status and what the process wrote on stderr."""
    process.send_signal(signum)
    assert process.stderr is not None
    stderr = await asyncio.wait_for(process.stderr.read(), 60)
    return await asyncio.wait_for(process.wait(), 60), stderr.decode()


async def test_ports_lists_the_server_and_forward_serves_it_byte_for_byte(
    manager: SandboxManager, sandbox: Sandbox, state_dir: Path
) -> None:
    sandbox_id = sandbox.sandbox_id
    data = os.urandom(5_000_000)
    await manager.files.write(OWNER, sandbox_id, "data.bin", data)
    empty = await ports_cli("ports", sandbox_id, state_dir=state_dir)
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "PORT   COMMAND\n", "")
    await serve(manager, sandbox_id, 8000)
    listed = await ports_cli("ports", sandbox_id, state_dir=state_dir)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header == "PORT   COMMAND"
    assert len(rows) == 1, rows
    assert rows[0].startswith("8000   python -m http.server 8000 --bind 127.0.0.1"), rows

    local = free_port()
    async with forwarding(sandbox_id, "8000", f"--local-port={local}", state_dir=state_dir) as (
        process,
        line,
    ):
        assert (
            line
            == f"Forwarding 127.0.0.1:{local} -> sandbox {sandbox_id} port 8000 (Ctrl-C to stop)\n"
        )
        got = await fetch(f"http://127.0.0.1:{local}/data.bin")
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()
        # Several at once, each its own connection to the sandbox's server.
        pages = await asyncio.gather(*[fetch(f"http://127.0.0.1:{local}/") for _ in range(6)])
        assert all(b"data.bin" in page for page in pages)
        status, stderr = await stopped(process, signal.SIGINT)  # Ctrl-C
    assert (status, stderr) == (0, "")
    with pytest.raises(urllib.error.URLError):  # the local port is closed again
        await fetch(f"http://127.0.0.1:{local}/")


@pytest.mark.runc
async def test_a_port_nobody_listens_on_is_refused_and_the_forward_goes_on(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = (await manager.create(OWNER, runtime="runc", purpose=purpose)).sandbox_id
    async with forwarding(sandbox_id, "9000", "--local-port=0", state_dir=state_dir) as (
        process,
        line,
    ):
        # Any free port, named in the line.
        prefix = "Forwarding 127.0.0.1:"
        assert line.startswith(prefix), line
        local = int(line[len(prefix) :].split(" ", 1)[0])
        assert line.endswith(f" -> sandbox {sandbox_id} port 9000 (Ctrl-C to stop)\n"), line
        url = f"http://127.0.0.1:{local}/"
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # closed without an answer
            await fetch(url)
        assert process.stderr is not None
        said = (await asyncio.wait_for(process.stderr.readline(), 60)).decode()
        assert said.startswith(f"error: sandbox {sandbox_id}: nothing listens on port 9000"), said
        assert "python -m http.server 9000" in said  # what to do about it

        await serve(manager, sandbox_id, 9000)  # the server came up: the same forward serves it
        assert b"Directory listing" in await fetch(url)
        status, stderr = await stopped(process, signal.SIGTERM)
    assert (status, stderr) == (0, "")

    # A sandbox removed under a forward ends it, with status 1, at its next connection.
    async with forwarding(sandbox_id, "9000", "--local-port=0", state_dir=state_dir) as (
        process,
        line,
    ):
        local = int(line.split(":", 1)[1].split(" ", 1)[0])
        await manager.remove(OWNER, sandbox_id)
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            await fetch(f"http://127.0.0.1:{local}/")
        assert process.stderr is not None
        stderr = (await asyncio.wait_for(process.stderr.read(), 60)).decode()
        assert await asyncio.wait_for(process.wait(), 60) == 1
    assert stderr.startswith("error: "), stderr
    assert stderr.endswith("the forward stops: the sandbox is gone\n"), stderr


@pytest.mark.runc
async def test_another_address_than_loopback_is_warned_about(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = (await manager.create(OWNER, runtime="runc", purpose=purpose)).sandbox_id
    async with forwarding(
        sandbox_id, "8000", "--local-port=0", "--address=0.0.0.0", state_dir=state_dir
    ) as (process, line):
        assert line.startswith("Forwarding 0.0.0.0:"), line
        status, stderr = await stopped(process, signal.SIGINT)
    assert status == 0
    assert stderr.startswith("warning: 0.0.0.0:"), stderr
    assert (
        f"is not a loopback address: whoever can connect to it reaches port 8000 of sandbox {sandbox_id}"
        in stderr
    )
    async with forwarding(
        sandbox_id, "8000", "--local-port=0", "--address=::1", state_dir=state_dir
    ) as (process, line):
        assert line.startswith("Forwarding [::1]:"), line
        assert await stopped(process, signal.SIGINT) == (0, "")


async def test_a_missing_sandbox_bad_ports_and_wrong_arguments(state_dir: Path) -> None:
    for verb in (["ports"], ["forward"]):
        missing = await ports_cli(
            *verb, "0123456789ab", *(["8000"] if verb == ["forward"] else []), state_dir=state_dir
        )
        assert missing.returncode == 1
        assert missing.stderr.startswith("error: "), missing.stderr
        assert "0123456789ab" in missing.stderr
        assert missing.stdout == ""
    bad = await ports_cli("forward", "0123456789ab", "80a", state_dir=state_dir)
    assert (bad.returncode, bad.stderr) == (
        1,
        "error: port must be a whole number from 1 to 65535 in ASCII digits, not '80a'\n",
    )
    wrong = await ports_cli("forward", "0123456789ab", state_dir=state_dir)
    assert (wrong.returncode, wrong.stderr) == (
        2,
        "usage: jupyter sandbox forward SANDBOX_ID PORT [--local-port=N] [--address=127.0.0.1]\n",
    )


def test_what_the_sandbox_wrote_is_shown_without_terminal_controls() -> None:
    # A command line is the sandbox's to choose: ESC sequences could rewrite the terminal.
    assert shown("python -m http.server\x1b]0;owned\x07\x1b[2J\n\u202eé") == (
        "python -m http.server\\x1b]0;owned\\x07\\x1b[2J\\n\\u202eé"
    )

"""Jupyter Server starts a Sandboxed Python session and runs a cell, as JupyterLab does.

The test drives a real ``jupyter server`` process through its REST API and the kernel websocket
(the same calls JupyterLab's frontend makes), on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest, HTTPResponse
from tornado.websocket import websocket_connect

from jupyter_sandbox.sandbox import labels
from tests.conftest import purpose_label
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env
from tests.kernel_websocket import run_cell

pytestmark = pytest.mark.integration

JUPYTER = Path(sys.executable).with_name("jupyter")
HOST = "127.0.0.1"
SERVER_START_TIMEOUT = 60.0  # seconds until /api/status answers
KERNEL_TIMEOUT = 120.0  # seconds for the session's kernel (and its sandbox) to run the cell
REMOVAL_TIMEOUT = 30.0  # seconds for the sandbox to be gone once the session is deleted
SERVER_STOP_TIMEOUT = 30.0  # seconds for the server to exit after /api/shutdown


@dataclass
class Server:
    """A running ``jupyter server`` subprocess and how to reach it."""

    process: subprocess.Popen[bytes]
    port: int
    token: str
    log: Path

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def request(self, method: str, path: str, body: Any = None) -> HTTPResponse:
        """An authenticated REST call; never follows redirects, never uses a proxy."""
        request = HTTPRequest(
            self.base + path,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
            body=None if body is None else json.dumps(body),
            allow_nonstandard_methods=True,
            follow_redirects=False,
            request_timeout=KERNEL_TIMEOUT,
        )
        return await AsyncHTTPClient().fetch(request)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """End the server process (and whatever it started in its group) if it still runs."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=SERVER_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.fixture
def sandbox_env(request: pytest.FixtureRequest, runtime: str) -> Iterator[Path]:
    """The state directory of an isolated sandbox environment using ``runtime``."""
    with sandbox_kernel_env(purpose_label(request.node.nodeid)) as state_dir:
        os.environ["JUPYTER_SANDBOX_RUNTIME"] = runtime  # restored when the block ends
        yield state_dir


def start_server(root: Path, tmp_path: Path, *options: str, name: str = "server") -> Server:
    """Start ``jupyter server`` on 127.0.0.1 with a fresh token and ``options``, its runtime
    directory and log in ``tmp_path`` under ``name``."""
    runtime_dir = tmp_path / f"{name}-runtime"
    runtime_dir.mkdir()
    port = free_port()
    token = secrets.token_hex(24)
    log = tmp_path / f"{name}.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [
                str(JUPYTER),
                "server",
                "--no-browser",
                f"--ServerApp.ip={HOST}",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--ServerApp.root_dir={root}",
                f"--IdentityProvider.token={token}",
                *(["--allow-root"] if os.geteuid() == 0 else []),
                *options,
            ],
            cwd=root,
            env={**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime_dir)},
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group, so that it can be ended as a whole
        )
    return Server(process, port, token, log)


@pytest.fixture
async def server(sandbox_env: Path, tmp_path: Path) -> AsyncIterator[Server]:
    """A ``jupyter server`` rooted at the notebook directory; stopped afterwards, pass or fail.

    It is asked to shut down through the REST API first (which shuts its kernels down), and
    terminated if that does not end it in time.
    """
    root = notebook_dir(sandbox_env)
    nbformat.write(nbformat.v4.new_notebook(), root / "t.ipynb")
    running = start_server(root, tmp_path)
    try:
        await wait_for_status(running)
        yield running
    finally:
        try:
            if running.process.poll() is None:
                with contextlib.suppress(HTTPClientError, OSError):
                    await running.request("POST", "/api/shutdown", body={})
                with contextlib.suppress(subprocess.TimeoutExpired):
                    await asyncio.to_thread(running.process.wait, SERVER_STOP_TIMEOUT)
        finally:
            stop_process(running.process)


async def wait_for_status(server: Server) -> None:
    """Poll /api/status until the server answers; fail early if the process exits."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while True:
        if server.process.poll() is not None:
            raise AssertionError(f"jupyter server exited early:\n{server.log_text()}")
        try:
            response = await server.request("GET", "/api/status")
        except (HTTPClientError, OSError):
            response = None
        if response is not None and response.code == 200:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"jupyter server did not answer in time:\n{server.log_text()}")
        await asyncio.sleep(0.1)


def kernel_container(state_dir: Path, kernel_id: str) -> Any:
    """The container of the sandbox attached to Jupyter kernel ``kernel_id`` (the server's
    warm pool may hold others), or None."""
    for state_file in state_dir.glob("*/state.json"):
        if json.loads(state_file.read_text()).get("kernel_id") == kernel_id:
            name = labels.container_name(state_file.parent.name)
            return next((c for c in containers_under(state_dir) if c.name == name), None)
    return None


async def wait_until_removed(state_dir: Path, name: str) -> None:
    deadline = time.monotonic() + REMOVAL_TIMEOUT
    while any(c.name == name for c in containers_under(state_dir)):
        if time.monotonic() > deadline:
            raise AssertionError(f"sandbox {name} still present after the session ended")
        await asyncio.sleep(0.2)


async def test_server_session_runs_a_cell_in_a_sandbox(
    server: Server, sandbox_env: Path, runtime: str
) -> None:
    """A notebook session with kernel sandboxed-python, created through the REST API, runs a
    cell over the websocket in a sandbox of the chosen runtime; deleting the session removes
    the sandbox."""
    response = await server.request(
        "POST",
        "/api/sessions",
        body={"path": "t.ipynb", "type": "notebook", "kernel": {"name": "sandboxed-python"}},
    )
    assert response.code == 201, response.body
    session = json.loads(response.body)
    assert session["kernel"]["name"] == "sandboxed-python"
    try:
        connection = await websocket_connect(
            f"ws://{HOST}:{server.port}/api/kernels/{session['kernel']['id']}/channels"
            f"?token={server.token}",
            connect_timeout=KERNEL_TIMEOUT,
        )
        try:
            stdout, reply = await run_cell(connection, "print(6 * 7)", KERNEL_TIMEOUT)
        finally:
            connection.close()
        assert reply["status"] == "ok", reply
        assert stdout == "42\n"
        container = kernel_container(sandbox_env, session["kernel"]["id"])
        assert container is not None
        assert container.attrs["HostConfig"]["Runtime"] == runtime
    finally:
        deleted = await server.request("DELETE", f"/api/sessions/{session['id']}")
    assert deleted.code == 204
    await wait_until_removed(sandbox_env, container.name)
    assert server.process.poll() is None, "the server must still be running"


async def test_a_stopped_server_leaves_no_warm_sandboxes(server: Server, sandbox_env: Path) -> None:
    """The server's warm pool fills in the background and drains when the server stops; the
    core's own log lines (module loggers, at INFO) are in the server's log."""
    deadline = time.monotonic() + KERNEL_TIMEOUT
    while "for the warm pool" not in server.log_text():
        assert time.monotonic() < deadline, f"no warm pool sandbox started: {server.log_text()}"
        await asyncio.sleep(0.5)
    assert containers_under(sandbox_env)
    await server.request("POST", "/api/shutdown", body={})
    await asyncio.to_thread(server.process.wait, SERVER_STOP_TIMEOUT)
    assert containers_under(sandbox_env) == []
    started = [line for line in server.log_text().splitlines() if "for the warm pool" in line]
    assert "[I " in started[0], started
    assert "jupyter_sandbox.sandbox.starting]" in started[0], started

"""What one user sees of a shared server while another floods it: the figures behind the bound
of the security battery's denial-of-service section (tests/security/rest/test_denial_of_service.py).

A real Jupyter server with the extension, started for the run on 127.0.0.1, whose tokens name
their users (alice, bob). Bob has a sandbox holding a small file. For each runtime and each
flood, bob's four requests are timed ``--runs`` times: the list of his sandboxes, a read of his
file, ``1+1`` executed in his interpreter, and a directory watch opened up to its ``ready``.
The floods, all alice's, held while bob's requests run:

- ``quiet``: none;
- ``streams``: ``--streams`` streamed commands (``sleep``) and ``--watches`` directory watches,
  each a held event stream (past her caps: 429, counted);
- ``commands``: ``--commands`` commands run to their end and 12 code runs, each held by its
  request (more than her share of the engine's long-call threads);
- ``uploads``: 6 archive uploads to /api/snapshots and 6 file uploads of 4 MiB, in loops.

Prints the median and worst of each of bob's requests, in seconds. ``--no-shares`` runs the
server with every per-owner share as large as its pool (one owner may take all of it), which
is what the server did before issue 31 for the long calls; the short calls keep their own pool.
Needs the engine and the image:

    .venv/bin/python benchmarks/fairness.py --runtime runc --runtime runsc --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPResponse

PURPOSE = "benchmark:fairness"
HELD = 300
FLOODS = ("quiet", "streams", "commands", "uploads")
# Seconds a request of bob's is waited for before it counts as unanswered ("inf").
BOBS_PATIENCE = 60.0
# The server's configuration: tokens naming their users, for this run only.
CONFIG = """
from jupyter_server.auth.identity import IdentityProvider, User

class NamedUsers(IdentityProvider):
    def get_user(self, handler):
        name = handler.request.headers.get("Authorization", "").removeprefix("token ").strip()
        return User(name) if name in ("alice", "bob") else None

    def is_token_authenticated(self, handler):
        return True

c.ServerApp.identity_provider_class = NamedUsers
c.ServerApp.jpserver_extensions = {"jupyter_sandbox.server_extension": True}
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.port = %(port)d
c.ServerApp.open_browser = False
c.ServerApp.allow_root = True
c.ServerApp.root_dir = %(root)r
c.SandboxSettings.state_dir = %(state)r
c.SandboxSettings.runtime = %(runtime)r
c.SandboxExtension.container_purpose = %(purpose)r
c.SandboxExtension.fast_kernel_start = False
c.WarmPool.size = 0
c.SandboxQuotas.max_sandboxes = 0
c.SandboxQuotas.max_memory = ""
c.SandboxQuotas.max_cpus = 0.0
c.Snapshots.snapshot_dir = %(snapshots)r
c.Snapshots.max_snapshots = 0
"""
NO_SHARES = """
c.DockerBackend.engine_threads_per_owner = 16
c.DockerBackend.engine_long_threads = 16
c.DockerBackend.engine_long_threads_per_owner = 16
c.SandboxFiles.max_watches = 8
c.SandboxFiles.max_watches_per_owner = 0
c.SandboxExtension.max_event_streams_per_owner = 0
c.SandboxExtension.max_archive_jobs_per_owner = 4
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """The Jupyter server of one run, and requests to it as alice or bob."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.http = AsyncHTTPClient(force_instance=True, max_clients=200)

    async def call(
        self, user: str, method: str, path: str, body: Any = None, timeout: float = 600
    ) -> HTTPResponse:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        if method in ("POST", "PUT") and data is None:
            data = b""
        try:
            return await self.http.fetch(
                self.base + path,
                method=method,
                body=data,
                headers={"Authorization": f"token {user}"},
                request_timeout=timeout,
            )
        except HTTPClientError as error:
            if error.response is None:
                raise
            return error.response


class Held:
    """A request on its own connection, read up to a marker, then held until closed."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.seen = reader, writer, b""

    @classmethod
    async def open(cls, base: str, user: str, method: str, path: str, body: Any = None) -> Held:
        url = urllib.parse.urlsplit(base)
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        data = b"" if body is None else json.dumps(body).encode()
        writer.write(
            f"{method} {url.path}{path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: token "
            f"{user}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()
        return cls(reader, writer)

    async def read_until(self, marker: bytes, timeout: float = 120) -> bool:
        deadline = time.monotonic() + timeout
        while marker not in self.seen:
            chunk = await asyncio.wait_for(self.reader.read(65536), deadline - time.monotonic())
            if not chunk:
                return False
            self.seen += chunk
        return True

    def status(self) -> int:
        return int(self.seen.split(b" ", 2)[1]) if self.seen else 0

    def close(self) -> None:
        self.writer.close()


async def bobs_requests(server: Server, sandbox_id: str) -> dict[str, float]:
    took: dict[str, float] = {}
    path = f"api/sandboxes/{sandbox_id}"
    steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("list", lambda: server.call("bob", "GET", "api/sandboxes")),
        ("file read", lambda: server.call("bob", "GET", f"{path}/files/content?path=mine.txt")),
        ("execute 1+1", lambda: server.call("bob", "POST", f"{path}/execute", {"code": "1+1"})),
    ]
    for name, step in steps:
        started = time.monotonic()
        try:
            response = await asyncio.wait_for(step(), BOBS_PATIENCE)
        except TimeoutError:
            took[name] = float("inf")  # printed as such: it did not answer within the patience
            continue
        took[name] = time.monotonic() - started
        assert response.code == 200, (name, response.code, response.body[:300])
    started = time.monotonic()
    watch = await Held.open(server.base, "bob", "GET", f"{path}/files/watch?path=.")
    try:
        ready = await watch.read_until(b"event: ready", BOBS_PATIENCE)
        # Refused (429: the server's watches all taken) counts as not answered.
        took["watch"] = time.monotonic() - started if ready else float("inf")
    except TimeoutError:
        took["watch"] = float("inf")
    finally:
        watch.close()
    return took


def archive(size: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        member = tarfile.TarInfo("data.bin")
        member.size = size
        tar.addfile(member, io.BytesIO(bytes(size)))
    return out.getvalue()


async def flood(
    server: Server, kind: str, sandbox_id: str, args: argparse.Namespace, stop: asyncio.Event
) -> tuple[list[Held], list[asyncio.Future[Any]], str]:
    """Start alice's flood of ``kind``; return what holds it and a note of what it holds."""
    path = f"api/sandboxes/{sandbox_id}"
    held: list[Held] = []
    tasks: list[asyncio.Future[Any]] = []
    if kind == "streams":
        command = {"command": f"echo go; sleep {HELD}", "stream": True}
        for _ in range(args.streams):
            held.append(await Held.open(server.base, "alice", "POST", f"{path}/commands", command))
        for _ in range(args.watches):
            held.append(await Held.open(server.base, "alice", "GET", f"{path}/files/watch?path=."))
        await asyncio.gather(*(request.read_until(b"\r\n\r\n") for request in held))
        await asyncio.gather(
            *(r.read_until(b"event:") for r in held if r.status() == 200), return_exceptions=True
        )
        refused = sum(request.status() == 429 for request in held)
        return held, tasks, f"{len(held) - refused} streams held, {refused} refused (429)"
    if kind == "commands":
        for _ in range(args.commands):
            command = {"command": f"sleep {HELD}", "timeout": HELD}
            held.append(await Held.open(server.base, "alice", "POST", f"{path}/commands", command))
        for _ in range(12):
            code = {"code": f"import time; time.sleep({HELD})"}
            held.append(await Held.open(server.base, "alice", "POST", f"{path}/execute", code))
        await asyncio.sleep(3)  # their execs started (or wait for alice's share)
        return held, tasks, f"{args.commands} commands and 12 code runs held"
    if kind == "uploads":
        tar = archive(4 * 1024**2)

        async def loop(method: str, target: str) -> None:
            while not stop.is_set():
                response = await server.call("alice", method, target, tar)
                assert response.code in (200, 201, 204), (response.code, response.body[:300])

        for n in range(6):
            tasks.append(asyncio.ensure_future(loop("POST", "api/snapshots")))
            tasks.append(asyncio.ensure_future(loop("PUT", f"{path}/files/content?path=u{n}")))
        await asyncio.sleep(2)
        return held, tasks, "6 archive and 6 file uploads of 4 MiB, in loops"
    return held, tasks, "nothing"


def measure(runtime: str, args: argparse.Namespace) -> None:
    """Start a server for ``runtime``, run the floods against it, stop it."""
    with tempfile.TemporaryDirectory(prefix="jsbx-") as tmp:
        port = free_port()
        config = CONFIG % {
            "port": port,
            "root": tmp,
            "state": f"{tmp}/state",
            "runtime": runtime,
            "purpose": PURPOSE,
            "snapshots": f"{tmp}/snapshots",
        }
        Path(tmp, "jupyter_server_config.py").write_text(config + (NO_SHARES * args.no_shares))
        env = {
            **os.environ,
            **{f"JUPYTER_{name}_DIR": f"{tmp}/{name.lower()}" for name in ("DATA", "RUNTIME")},
            "JUPYTER_CONFIG_DIR": tmp,
        }
        with open(f"{tmp}/server.log", "wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "jupyter_server",
                    f"--config={tmp}/jupyter_server_config.py",
                ],
                env=env,
                stdout=log,
                stderr=log,
            )
            try:
                asyncio.run(run_floods(Server(f"http://127.0.0.1:{port}/"), runtime, args))
            except BaseException:
                print(Path(tmp, "server.log").read_text()[-3000:], file=sys.stderr)
                raise
            finally:
                process.terminate()
                process.wait(60)


async def create(server: Server, user: str) -> str:
    """A new sandbox of ``user``'s; asked again while the engine is too busy (504: the last
    flood's sandbox may still be going)."""
    for _ in range(5):
        response = await server.call(user, "POST", "api/sandboxes", {})
        if response.code == 201:
            return str(json.loads(response.body)["id"])
        print(f"  (creating {user}'s sandbox: {response.code}, again)", file=sys.stderr)
        await asyncio.sleep(5)
    raise RuntimeError(f"could not create a sandbox for {user}: {response.body[:300]!r}")


async def run_floods(server: Server, runtime: str, args: argparse.Namespace) -> None:
    deadline = time.monotonic() + 180  # a loaded 2-core machine takes a while to start it
    while True:
        try:
            if (await server.call("bob", "GET", "api/sandboxes", timeout=5)).code == 200:
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)
    bobs = await create(server, "bob")
    put = await server.call("bob", "PUT", f"api/sandboxes/{bobs}/files/content?path=mine.txt", b"x")
    assert put.code in (200, 201, 204), put.body
    alices = None
    try:
        for kind in args.flood or FLOODS:
            if kind != "quiet":
                alices = await create(server, "alice")
            stop = asyncio.Event()
            held, tasks, note = await flood(server, kind, alices or "", args, stop)
            runs = [await bobs_requests(server, bobs) for _ in range(args.runs)]
            stop.set()
            await asyncio.gather(*tasks)  # each ends after its upload: none failed
            for request in held:
                request.close()
            if alices:
                await server.call("alice", "DELETE", f"api/sandboxes/{alices}", timeout=300)
                alices = None
            print(f"{runtime} {kind}: {note}")
            for name in runs[0]:
                values = [run[name] for run in runs]
                print(
                    f"  {name:<12} median {statistics.median(values):6.2f} s   "
                    f"worst {max(values):6.2f} s"
                )
            sys.stdout.flush()
    finally:
        for sandbox, user in ((bobs, "bob"), (alices, "alice")):
            if sandbox:
                await server.call(user, "DELETE", f"api/sandboxes/{sandbox}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", action="append", choices=["runc", "runsc"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--streams", type=int, default=17)
    parser.add_argument("--watches", type=int, default=10)
    parser.add_argument("--commands", type=int, default=40)
    parser.add_argument("--no-shares", action="store_true")
    parser.add_argument("--flood", action="append", choices=FLOODS, help="default: all")
    args = parser.parse_args()
    for runtime in args.runtime or ["runc", "runsc"]:
        measure(runtime, args)


if __name__ == "__main__":
    main()

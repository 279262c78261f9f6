"""Reaching a server in a sandbox: the port opener's start, a small request and a big download,
through a port link (the browser's way) and through the core's socket alone (what ``jupyter
sandbox forward`` relays), per runtime.

For each runtime: one sandbox running ``python -m http.server`` on its loopback over a
/workspace holding a small file and one of ``--size`` MiB. Timed:

- ``opener start``: the first ``SandboxPorts.connect`` of the sandbox, which starts the port
  opener inside it (an engine exec) and waits for its socket;
- ``GET small, link``: a 1 KiB file through the link, from a fresh HTTP connection, as a
  browser's first request is (tornado's client, no keep-alive: the proxy serves one request per
  connection to the sandbox);
- ``GET small, socket``: the same request written on a fresh ``SandboxPorts.connect`` socket;
- ``GET big, link`` / ``GET big, socket``: the big file, the same two ways, with its MB/s.

The link is served by the extension's own proxy handler (port_handlers.PortProxyHandler) in a
bare tornado application on 127.0.0.1 (a Jupyter server adds only routing and logging to it).
Needs the engine and the image:

    .venv/bin/python benchmarks/ports.py --runtime runc --runtime runsc --runs 20 --size 100
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import time
from types import SimpleNamespace

from timing import p90
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.web import Application

from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.server_extension.port_handlers import port_handlers
from jupyter_sandbox.server_extension.port_links import PortLinks

OWNER = "benchmark"
PURPOSE = "benchmark:ports"
PORT = 8000


async def raw_get(manager: SandboxManager, sandbox_id: str, path: str) -> int:
    """GET ``path`` on a fresh core socket; the bytes of the answer's body (read to the end)."""
    loop = asyncio.get_running_loop()
    sock = await manager.ports.connect(OWNER, sandbox_id, PORT)
    try:
        request = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        await loop.sock_sendall(sock, request.encode())
        received, buffer = 0, bytearray(1 << 20)
        while n := await loop.sock_recv_into(sock, buffer):
            received += n
        return received
    finally:
        sock.close()


async def curl(url: str) -> int:
    """Download ``url`` with curl, in a process of its own as a browser is; its byte count."""
    process = await asyncio.create_subprocess_exec(
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{size_download}",
        url,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    assert process.returncode == 0, process.returncode
    return int(out)


async def until_listening(manager: SandboxManager, sandbox_id: str) -> None:
    for _ in range(600):
        if PORT in [found.port for found in await manager.ports.listening(OWNER, sandbox_id)]:
            return
        await asyncio.sleep(0.05)
    raise SystemExit(f"nothing listens on port {PORT} in sandbox {sandbox_id} after 30 s")


async def measure(runtime: str, runs: int, size: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {
        name: []
        for name in (
            "opener start",
            "GET small, link",
            "GET small, socket",
            "GET big, link",
            "GET big, socket",
        )
    }
    manager = SandboxManager.from_config()
    sandbox = await manager.create(OWNER, runtime=runtime, purpose=PURPOSE)
    sandbox_id = sandbox.sandbox_id
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.setblocking(False)
    links = PortLinks(os.urandom(32))
    extension = SimpleNamespace(manager=manager, port_links=links)
    server = HTTPServer(Application(port_handlers[2:], sandbox_extension=extension))
    server.add_sockets([listener])
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    link = base + links.path("/", OWNER, sandbox_id, PORT, generation=0)
    client = AsyncHTTPClient(max_body_size=(size + 1) * 1024**2)
    try:
        script = f"head -c 1024 /dev/zero > small && head -c {size}M /dev/urandom > big"
        await manager.exec(OWNER, sandbox_id, ["sh", "-c", script])
        argv = ["python", "-m", "http.server", str(PORT), "--bind", "127.0.0.1"]
        await manager.backend.spawn(
            sandbox_id, [*argv, "--directory", "/workspace"], environment={}
        )
        await until_listening(manager, sandbox_id)
        started = time.perf_counter()
        (await manager.ports.connect(OWNER, sandbox_id, PORT)).close()
        samples["opener start"].append(time.perf_counter() - started)
        for _ in range(runs):
            started = time.perf_counter()
            response = await client.fetch(link + "small", headers={"Connection": "close"})
            samples["GET small, link"].append(time.perf_counter() - started)
            assert len(response.body) == 1024
            started = time.perf_counter()
            assert await raw_get(manager, sandbox_id, "/small") >= 1024
            samples["GET small, socket"].append(time.perf_counter() - started)
        for _ in range(max(3, runs // 5)):
            started = time.perf_counter()
            assert await curl(link + "big") == size * 1024**2
            samples["GET big, link"].append(time.perf_counter() - started)
            started = time.perf_counter()
            assert await raw_get(manager, sandbox_id, "/big") >= size * 1024**2
            samples["GET big, socket"].append(time.perf_counter() - started)
    finally:
        client.close()
        server.stop()
        await manager.remove(OWNER, sandbox_id)
        await manager.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", action="append", choices=["runc", "runsc"])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--size", type=int, default=100, help="MiB of the big file")
    args = parser.parse_args()
    print(f"{'runtime':<8} {'measure':<18} {'median ms':>10} {'p90 ms':>8}")
    for runtime in args.runtime or ["runc", "runsc"]:
        for name, values in asyncio.run(measure(runtime, args.runs, args.size)).items():
            median, high = statistics.median(values), p90(values)
            rate = f"  {args.size * 1.048576 / median:.0f} MB/s" if "big" in name else ""
            print(f"{runtime:<8} {name:<18} {median * 1000:>10.1f} {high * 1000:>8.1f}{rate}")


if __name__ == "__main__":
    main()

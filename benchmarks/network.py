"""Egress through the host proxy: bulk download and added latency per request.

For each runtime, one sandbox with an allowlist for ``bench.test`` and a local HTTP server on
the host's 127.0.0.1 (reached through the settings for tests, ``allow_loopback_for_tests`` and
``test_host_addresses``: nothing leaves the machine). The same client program runs

- inside the sandbox: sandbox program -> forwarder (127.0.0.1:3128 in the sandbox) -> tunnel
  (Unix socket) -> host proxy -> server, and
- on the host: client -> server directly, and
- on the host through the same two relays, bare: client -> relay -> Unix socket -> relay ->
  server, each relay the proxy's own byte mover (forwarder.pipe) and nothing else. This is a
  floor: what relaying the bytes twice costs on this machine, with no sandbox, tunnel set-up or
  policy involved,

and the sandbox's own floor is timed: the host sends the bytes into a Unix socket in the
sandbox's directory, and inside the sandbox forwarder.pipe moves them to a loopback connection
that a client reads (network_floor.py). That is the fastest any download through the
forwarder can be under that runtime, whatever the host proxy does. All interleaved, ``--runs``
times each. It times itself (so exec start-up is not counted):

- download: one GET of ``--size`` MB, read into a reused buffer; MB/s and the ratio of times
  (target: the sandbox at most 1.3x the host's time);
- latency: ``--requests`` sequential small GETs, each on a new connection (the proxy closes
  every connection after one request); median per request, and what the proxy path adds.

``--asks N`` also measures the policy ask (network/asks.py): in a sandbox whose policy is ask,
N sequential small GETs, each held by the host proxy until the benchmark, watching the
sandbox's held requests as the server does, decides it ("once", through the same call the REST
API makes); the time from the decision to the response in the sandbox (its ``time.time()``
against the host's: one clock under both runtimes), and to the request's arrival at the server
(the host's clock alone). Target: at most 50 ms after the decision. ``--runs 0`` leaves the
download and latency out.

``--tls N`` also measures TLS inspection (network/inspection.py): N interleaved pairs of one
HTTPS download of ``--size`` MB from a local TLS server (a certificate of a throwaway CA) by a
program in the sandbox, through the plain tunnel (the program trusts that CA itself) and
through inspection (``NetworkSettings.tls_inspection``; the proxy trusts that CA through
``upstream_extra_ca_file``, the program its sandbox's CA); the host proxy is restarted between
the two. Target: inspection at most 1.5x the tunnel's time.

    .venv/bin/python benchmarks/network.py --runtime runc --runtime runsc --size 100 --runs 3
    .venv/bin/python benchmarks/network.py --runs 0 --asks 50
    .venv/bin/python benchmarks/network.py --runs 0 --tls 5 --size 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from network_floor import accept_each, bare_relays, listen, sandbox_floor
from traitlets.config import Config

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.network.asks import decide, pending_requests
from jupyter_sandbox.sandbox.network.settings import FORWARDER_PORT

OWNER = "benchmark"
PURPOSE = "benchmark:network"
CHUNK = b"x" * (1024 * 1024)

FORWARDER = f"127.0.0.1:{FORWARDER_PORT}"  # where HTTP_PROXY points inside the sandbox
# When the server saw each request for /ask (the host's time.time()): --asks.
ASK_ARRIVALS: list[float] = []

# Runs inside the sandbox and on the host alike: argv = proxy as host:port ("" for direct),
# host, port, mode ("download" or "latency"), count. Prints one JSON line.
CLIENT = r"""
import http.client, json, sys, time
proxy, host, port, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
def get(path):
    if proxy:
        proxy_host, proxy_port = proxy.rsplit(":", 1)
        conn = http.client.HTTPConnection(proxy_host, int(proxy_port), timeout=120)
        conn.request("GET", f"http://{host}:{port}{path}")
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("GET", path)
    response = conn.getresponse()
    assert response.status == 200, response.status
    return conn, response
if mode == "download":
    buf = bytearray(1024 * 1024)
    start = time.perf_counter()
    conn, response = get(f"/blob/{count}")
    total = 0
    while n := response.readinto(buf):
        total += n
    elapsed = time.perf_counter() - start
    assert total == count, (total, count)
    print(json.dumps({"seconds": elapsed, "bytes": total}))
elif mode == "ask":
    ends = []
    for _ in range(count):
        conn, response = get("/ask")
        response.read()
        ends.append(time.time())  # compared with the host's time of the decision
        conn.close()
    print(json.dumps({"ends": ends}))
else:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        conn, response = get("/small")
        response.read()
        conn.close()
        times.append(time.perf_counter() - start)
    print(json.dumps({"times": times}))
"""


# Runs inside the sandbox: argv = proxy host:port, host, port, bytes, the CA's PEM to trust ("":
# what the sandbox trusts, SSL_CERT_FILE). One HTTPS download; prints one JSON line.
TLS_CLIENT = r"""
import http.client, json, ssl, sys, time
proxy, host, port, size, cadata = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
context = ssl.create_default_context(cadata=cadata) if cadata else ssl.create_default_context()
proxy_host, proxy_port = proxy.rsplit(":", 1)
buf = bytearray(1024 * 1024)
start = time.perf_counter()
conn = http.client.HTTPSConnection(proxy_host, int(proxy_port), context=context, timeout=120)
conn.set_tunnel(host, port)
conn.request("GET", f"/blob/{size}")
response = conn.getresponse()
assert response.status == 200, response.status
total = 0
while n := response.readinto(buf):
    total += n
elapsed = time.perf_counter() - start
assert total == size, (total, size)
print(json.dumps({"seconds": elapsed, "bytes": total}))
"""


def answer(conn: socket.socket) -> None:
    """A minimal HTTP/1.0-style server: /blob/<n> sends n bytes, /small a few."""
    with conn:
        head = b""
        while b"\r\n\r\n" not in head:
            data = conn.recv(65536)
            if not data:
                return
            head += data
        path = head.split(b" ", 2)[1].decode()
        if path.endswith("/ask"):
            ASK_ARRIVALS.append(time.time())
        if path.startswith("http://"):  # absolute form, as the bare relays pass it on
            path = "/" + path.split("/", 3)[3]
        size = int(path.rsplit("/", 1)[1]) if path.startswith("/blob/") else 16
        conn.sendall(
            f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n".encode()
        )
        view = memoryview(CHUNK)
        while size > 0:
            n = min(size, len(CHUNK))
            conn.sendall(view[:n])
            size -= n


def host_client(port: int, mode: str, count: int, proxy: str = "") -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, proxy, "bench.test", str(port), mode, str(count)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return dict(json.loads(out.stdout))


async def sandbox_client(
    manager: SandboxManager, sandbox_id: str, port: int, mode: str, count: int
) -> dict[str, Any]:
    argv = ["python", "-c", CLIENT, FORWARDER, "bench.test", str(port), mode, str(count)]
    result = await manager.exec(OWNER, sandbox_id, argv, ExecOptions(timeout=600))
    if result.exit_code != 0:
        raise RuntimeError(result.stderr.decode(errors="replace")[-2000:])
    return dict(json.loads(result.stdout))


async def measure(runtime: str, args: argparse.Namespace, port: int, relay: str) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="jsbb-", dir="/tmp"))
    config = Config()
    config.SandboxSettings.state_dir = str(state)
    config.NetworkSettings.allow_loopback_for_tests = True  # the server is on 127.0.0.1
    config.NetworkSettings.test_host_addresses = {"bench.test": "127.0.0.1"}
    manager = SandboxManager.from_config(config)
    size = args.size * 1024 * 1024
    inside: list[float] = []
    host: list[float] = []
    relayed: list[float] = []
    floor: list[float] = []
    lat_inside: list[float] = []
    lat_host: list[float] = []
    try:
        sandbox = await manager.create(
            OWNER,
            runtime=runtime,
            purpose=PURPOSE,
            network="bench.test",
            limits={"cpus": args.cpus},
        )
        await sandbox_client(manager, sandbox.sandbox_id, port, "latency", 5)  # warm up
        host_client(port, "latency", 5)
        for _ in range(args.runs):
            inside.append(
                (await sandbox_client(manager, sandbox.sandbox_id, port, "download", size))[
                    "seconds"
                ]
            )
            host.append(host_client(port, "download", size)["seconds"])
            relayed.append(host_client(port, "download", size, relay)["seconds"])
            floor.append(await sandbox_floor(manager, OWNER, sandbox.sandbox_id, size))
            lat_inside += (
                await sandbox_client(manager, sandbox.sandbox_id, port, "latency", args.requests)
            )["times"]
            lat_host += host_client(port, "latency", args.requests)["times"]
    finally:
        for info in await manager.list_sandboxes(OWNER):
            await manager.remove(OWNER, info.sandbox_id)
        await manager.close()
        shutil.rmtree(state, ignore_errors=True)
    return {
        "inside": statistics.median(inside),
        "host": statistics.median(host),
        "relayed": statistics.median(relayed),
        "floor": statistics.median(floor),
        "lat_inside": statistics.median(lat_inside),
        "lat_host": statistics.median(lat_host),
        "lat_inside_p90": statistics.quantiles(lat_inside, n=10)[-1],
    }


async def measure_asks(runtime: str, args: argparse.Namespace, port: int) -> dict[str, Any]:
    """--asks: decision -> response in the sandbox, and decision -> arrival at the server."""
    state = Path(tempfile.mkdtemp(prefix="jsbb-", dir="/tmp"))
    config = Config()
    config.SandboxSettings.state_dir = str(state)
    config.NetworkSettings.allow_loopback_for_tests = True
    config.NetworkSettings.test_host_addresses = {"bench.test": "127.0.0.1"}
    manager = SandboxManager.from_config(config)
    decided: list[float] = []
    try:
        sandbox = await manager.create(
            OWNER, runtime=runtime, purpose=PURPOSE, network="ask", limits={"cpus": args.cpus}
        )
        directory = SandboxDirectory(state, sandbox.sandbox_id)
        ASK_ARRIVALS.clear()
        client = asyncio.ensure_future(
            sandbox_client(manager, sandbox.sandbox_id, port, "ask", args.asks)
        )
        while len(decided) < args.asks:
            held = pending_requests(directory.root)
            if not held:
                if client.done():
                    client.result()  # raises what ended it early
                await asyncio.sleep(0.001)
                continue
            decided.append(time.time())
            decide(directory, held[0]["request_id"], "once", OWNER)
        ends = (await client)["ends"]
    finally:
        for info in await manager.list_sandboxes(OWNER):
            await manager.remove(OWNER, info.sandbox_id)
        await manager.close()
        shutil.rmtree(state, ignore_errors=True)
    to_response = [end - at for end, at in zip(ends, decided, strict=True)]
    to_server = [seen - at for seen, at in zip(ASK_ARRIVALS, decided, strict=True)]
    return {
        "response": statistics.median(to_response),
        "response_p90": statistics.quantiles(to_response, n=10)[-1],
        "response_max": max(to_response),
        "server": statistics.median(to_server),
    }


def tls_server(scratch: Path) -> tuple[socket.socket, int, str]:
    """A TLS ``answer`` server on 127.0.0.1 for bench.test; its listener, port and CA file."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.sandbox.network.tls_servers import LocalCA

    ca = LocalCA(scratch)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*ca.server_files("bench.test"))
    listener, port = listen()

    def handle(conn: socket.socket) -> None:
        try:
            answer(context.wrap_socket(conn, server_side=True))
        except (OSError, ssl.SSLError):
            conn.close()

    threading.Thread(target=accept_each, args=(listener, handle), daemon=True).start()
    return listener, port, str(ca.pem_file)


async def measure_tls(
    runtime: str, args: argparse.Namespace, port: int, ca_file: str, cadata: str
) -> dict[str, Any]:
    """--tls: HTTPS downloads through the tunnel and through inspection, interleaved."""
    state = Path(tempfile.mkdtemp(prefix="jsbb-", dir="/tmp"))
    config = Config()
    config.SandboxSettings.state_dir = str(state)
    config.NetworkSettings.allow_loopback_for_tests = True
    config.NetworkSettings.test_host_addresses = {"bench.test": "127.0.0.1"}
    config.NetworkSettings.upstream_extra_ca_file = ca_file
    manager = SandboxManager.from_config(config)
    size = args.size * 1024 * 1024
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        sandbox = await manager.create(
            OWNER,
            runtime=runtime,
            purpose=PURPOSE,
            network="bench.test",
            limits={"cpus": args.cpus},
        )
        for run in range(args.tls + 1):  # the first pair warms up
            for inspected in (False, True):
                manager.network.tls_inspection = inspected  # read as the proxy starts
                await manager.set_network_policy(OWNER, sandbox.sandbox_id, "none")
                await manager.set_network_policy(OWNER, sandbox.sandbox_id, "bench.test")
                argv = [
                    "python",
                    "-c",
                    TLS_CLIENT,
                    FORWARDER,
                    "bench.test",
                    str(port),
                    str(size),
                    "" if inspected else cadata,
                ]
                result = await manager.exec(
                    OWNER, sandbox.sandbox_id, argv, ExecOptions(timeout=600)
                )
                if result.exit_code != 0:
                    raise RuntimeError(result.stderr.decode(errors="replace")[-2000:])
                if run:
                    times[inspected].append(json.loads(result.stdout)["seconds"])
    finally:
        for info in await manager.list_sandboxes(OWNER):
            await manager.remove(OWNER, info.sandbox_id)
        await manager.close()
        shutil.rmtree(state, ignore_errors=True)
    return {"tunnel": statistics.median(times[False]), "inspected": statistics.median(times[True])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtime", action="append", choices=["runc", "runsc"])
    parser.add_argument("--size", type=int, default=100, help="download size in MB (MiB)")
    parser.add_argument("--runs", type=int, default=3, help="downloads per side")
    parser.add_argument("--requests", type=int, default=100, help="small requests per run")
    parser.add_argument("--cpus", type=float, default=1.0, help="the sandbox's CPU limit")
    parser.add_argument(
        "--asks", type=int, default=0, help="requests held by an ask policy, each decided once"
    )
    parser.add_argument(
        "--tls", type=int, default=0, help="HTTPS downloads through the tunnel and inspection"
    )
    args = parser.parse_args()
    listener, port = listen()
    threading.Thread(target=accept_each, args=(listener, answer), daemon=True).start()
    scratch = Path(tempfile.mkdtemp(prefix="jsbb-relay-", dir="/tmp"))
    relay_listeners, relay = bare_relays(port, scratch)
    rows = []
    asks = []
    tls_rows = []
    tls_listener, tls_port, ca_file = tls_server(scratch)
    for runtime in args.runtime or ["runc", "runsc"]:
        if args.tls > 0:
            t = asyncio.run(
                measure_tls(runtime, args, tls_port, ca_file, Path(ca_file).read_text())
            )
            mb = args.size
            tls_rows.append(
                f"| {runtime} | {mb / t['tunnel']:.0f} MB/s ({t['tunnel']:.2f} s) | "
                f"{mb / t['inspected']:.0f} MB/s ({t['inspected']:.2f} s) | "
                f"{t['inspected'] / t['tunnel']:.2f}x |"
            )
        if args.asks > 0:
            a = asyncio.run(measure_asks(runtime, args, port))
            asks.append(
                f"| {runtime} | {a['response'] * 1000:.1f} ms (p90 {a['response_p90'] * 1000:.1f}, "
                f"max {a['response_max'] * 1000:.1f}) | {a['server'] * 1000:.1f} ms |"
            )
        if args.runs <= 0:
            continue
        r = asyncio.run(measure(runtime, args, port, relay))
        mb = args.size
        rows.append(
            f"| {runtime} | {mb / r['inside']:.0f} MB/s ({r['inside']:.2f} s) | "
            f"{mb / r['host']:.0f} MB/s ({r['host']:.2f} s) | {r['inside'] / r['host']:.2f}x | "
            f"{mb / r['relayed']:.0f} MB/s, {r['relayed'] / r['host']:.2f}x | "
            f"{mb / r['floor']:.0f} MB/s, {r['floor'] / r['host']:.2f}x | "
            f"{r['lat_inside'] * 1000:.2f} ms (p90 {r['lat_inside_p90'] * 1000:.2f}) | "
            f"{r['lat_host'] * 1000:.2f} ms | +{(r['lat_inside'] - r['lat_host']) * 1000:.2f} ms |"
        )
    for sock in [listener, tls_listener, *relay_listeners]:
        sock.close()
    shutil.rmtree(scratch, ignore_errors=True)
    if asks:
        print(f"\n{args.asks} requests held by an ask policy, each decided once (medians)\n")
        print(
            "| runtime | decision -> response in the sandbox (target <= 50 ms) | "
            "decision -> request at the server |"
        )
        print("| --- | --- | --- |")
        print("\n".join(asks))
    if tls_rows:
        print(
            f"\n{args.size} MiB HTTPS download from a local TLS server, median of {args.tls}, "
            f"sandbox cpus={args.cpus:g}\n"
        )
        print(
            "| runtime | through the tunnel (TLS untouched) | through TLS inspection | time ratio "
            "(target <= 1.5x) |"
        )
        print("| --- | --- | --- | --- |")
        print("\n".join(tls_rows))
    if not rows:
        return
    print(
        f"\n{args.size} MiB download (median of {args.runs}) and {args.requests}x{args.runs} "
        f"small requests, sandbox cpus={args.cpus:g}\n"
    )
    print(
        "| runtime | download, sandbox via proxy | download, host direct | time ratio (target "
        "<= 1.3x) | host through two bare relays (floor) | into the sandbox through the "
        "forwarder's relay alone (floor) | small request, sandbox via proxy | host direct | added |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

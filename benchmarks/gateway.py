"""Kernel start and execute round trip through the sandbox gateway, against local kernels.

For each ``--runtime``, starts on 127.0.0.1, each with its own configuration and state:

- a JupyterHub (6.x, dummy authenticator, its configurable-http-proxy) that runs
  ``jupyter sandbox gateway`` as its managed service, as examples/jupyterhub_gateway_config.py
  does, and one hub user whose token (scope ``access:services!service=sandbox-gateway``,
  issued by the hub) the users' servers authenticate with;
- ``gateway``: a user's ``jupyter server`` with ``GatewayClient.url`` set to the gateway through
  the hub's proxy (``/services/sandbox-gateway``), as the example deploys it;
- ``direct``: the same, with ``GatewayClient.url`` set to the gateway's own port (no proxy hop),
  to tell the proxy's share from the gateway's;
- ``python3``: the same user server without ``GatewayClient``, starting the ordinary ``python3``
  kernel on the host: issue 33's baseline for the start;
- ``local``: a ``jupyter server`` holding the engine, this checkout's extension, as today: the
  baseline for the execute round trip.

The sandboxed kinds start Sandboxed Python with the same settings: the runtime, a warm pool of
``--pool`` sandboxes (the gateway's pool of the hub user, ``UserPools.size``; the local
server's own, ``WarmPool.size``; 0 turns both off) and the zygote on
(``SandboxExtension.fast_kernel_start``, the default, on the gateway and the local server). The
kernelspec is this checkout's on both, and so is the extension (``PYTHONPATH``). The gateway
fills a user's pool only from that user's first kernel start on
(jupyter_sandbox/gateway/pools.py): the untimed first start of each kind starts it.

Timed, interleaved (gateway, direct, local, python3, gateway, ...) so machine noise hits all
alike; before every timed start, of every kind, the run waits until both pools hold ``--pool``
members for each key they keep (counted from their tickets in the state directories), then
``--gap`` seconds more, so each start finds a full pool and a machine no refill is busy with:

- kernel start: ``POST /api/kernels`` on the server until the kernel's ``kernel_info_reply``
  arrives over the server's websocket (what JupyterLab waits for); ``--starts`` of each, the
  kernel deleted after each (not timed). A start that took a pool member (one ticket fewer
  after it) counts as a pool hit;
- execute round trip: on one kernel of each sandboxed kind, ``execute_request`` of ``pass``
  until its ``execute_reply`` arrives over the websocket; ``--executes`` of each, after 10 not
  counted (the pools are full again before the first).

Prints p50, p95 and p99 in milliseconds, the pool hits and the targets of issue 33: the
gateway's start p50 <= 1.0x the python3 kernel's (its p99 ratio besides, and the ratio to the
local sandboxed server's), its execute p50 <= the local sandboxed server's + 1 ms. Everything it
started (servers, hub, proxy, gateway, kernels, pools and their sandboxes, temporary
directories) is stopped or removed at the end, also on error or Ctrl-C; the run's containers
(each carries the run's io.jupyter-sandbox.purpose label) are checked to be gone. Needs the
Docker engine with both runtimes, the sandbox image and the ``gateway`` and hub test extras
(jupyterhub, configurable-http-proxy in the venv). From the checkout:

    .venv/bin/python benchmarks/gateway.py --runtime runc --runtime runsc --starts 20 \\
        --executes 200 [--pool 2] [--json-dir benchmarks/results]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pool
from jupyter_client.session import Session
from jupyter_server.services.kernels.connection.base import (
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)
from pool import percentile
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.websocket import WebSocketClientConnection, websocket_connect

from jupyter_sandbox.sandbox.lifecycle.pool_directory import PoolDirectory
from jupyter_sandbox.server_extension.gateway_websocket import KERNEL_V1

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
KERNELSPEC = REPO / "kernelspec" / "sandboxed-python"
KERNEL = "sandboxed-python"
SERVICE = "sandbox-gateway"
KINDS = ("gateway", "direct", "local", "python3")
EXECUTE_KINDS = ("gateway", "direct", "local")  # the execute compares sandboxed kernels only
# The warm pool each sandboxed kind claims from: the gateway's pool of the run's hub user
# (both gateway kinds reach the same gateway as the same user), the local server's own.
POOL_OF = {"gateway": "gateway", "direct": "gateway", "local": "local"}
WARMUP = 10  # executes not counted: the first ones warm the relay and the kernel up
START_TARGET = 1.0  # the gateway's start p50, at most this many times the python3 kernel's
EXECUTE_TARGET = 0.001  # seconds the gateway may add to the execute p50
FILL_TIMEOUT = 300.0  # seconds a pool may take to fill: members start one after the other


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server(pool.Server):
    """A jupyter server on 127.0.0.1 and the REST (pool.Server.call) and websocket calls the
    benchmark makes."""

    async def wait_until_up(self) -> None:
        await self.call_when_up("GET", "/api/status")

    async def call_when_up(self, method: str, path: str) -> Any:
        """``call``, retried while nothing listens yet (60 s at most)."""
        for _ in range(600):
            try:
                return await self.call(method, path)
            except OSError:
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.url} did not answer within 60 s")

    # The kernel WebSocket protocols a client offers: JupyterLab's binary one by default
    # (--protocol v1); none for the legacy JSON one (--protocol legacy).
    subprotocols: ClassVar[list[str]] = [KERNEL_V1]

    async def connect(self, kernel_id: str) -> WebSocketClientConnection:
        ws_url = self.url.replace("http", "ws", 1)
        return await websocket_connect(
            f"{ws_url}/api/kernels/{kernel_id}/channels?token={self.token}",
            subprotocols=self.subprotocols,
        )

    async def start_kernel(
        self, kernel_name: str = KERNEL
    ) -> tuple[float, str, WebSocketClientConnection]:
        """Seconds from asking for a kernel to its first kernel_info_reply, the kernel's id
        and its open websocket."""
        start = time.perf_counter()
        kernel = await self.call("POST", "/api/kernels", {"name": kernel_name})
        try:
            ws = await self.connect(kernel["id"])
            await request_reply(ws, "kernel_info_request", {})
            return time.perf_counter() - start, kernel["id"], ws
        except BaseException:
            await self.call("DELETE", f"/api/kernels/{kernel['id']}")
            raise

    async def time_claim(
        self, kernel_name: str = KERNEL, fill: PoolFill | None = None
    ) -> tuple[float, bool]:
        """pool.Server.time_start through start_kernel, which the executes use too; and
        whether the start claimed one of ``fill``'s members."""
        members = fill.members() if fill is not None else 0
        elapsed, kernel_id, ws = await self.start_kernel(kernel_name)
        # Counted at once: a claimed member is replaced only after the refiller's next check
        # and a whole sandbox start, later than a start that claimed one returns.
        claimed = fill is not None and fill.members() < members
        ws.close()
        await self.call("DELETE", f"/api/kernels/{kernel_id}")
        return elapsed, claimed


class PoolFill:
    """A warm pool's unclaimed members, counted from its tickets in its state directory (read
    only), to wait until it is full and to tell a start that claimed a member."""

    def __init__(self, name: str, state_dir: Path, size: int) -> None:
        self.name, self.size = name, size
        self.directory = PoolDirectory(state_dir)
        # Every key that had a member: an emptied key's directory is removed, and the key is
        # still kept warm.
        self.keys: set[str] = set()

    def members(self) -> int:
        self.keys.update(self.directory.pool_keys())
        return sum(len(self.directory.tickets(key)) for key in self.keys)

    def full(self) -> bool:
        self.members()
        return bool(self.keys) and all(
            len(self.directory.tickets(key)) >= self.size for key in self.keys
        )


async def settle(fills: list[PoolFill], gap: float) -> None:
    """Wait until every pool is full, then ``gap`` seconds (a member just started, a kernel
    just deleted: their engine calls end)."""
    deadline = time.monotonic() + FILL_TIMEOUT
    for fill in fills:
        while not fill.full():
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the {fill.name} warm pool did not fill to {fill.size} per key within "
                    f"{FILL_TIMEOUT:.0f} s (see its log: --keep-logs)"
                )
            await asyncio.sleep(0.2)
    await asyncio.sleep(gap)


async def request_reply(ws: WebSocketClientConnection, msg_type: str, content: Any) -> None:
    """Send a shell request and read the websocket until its reply."""
    request = Session().msg(msg_type, content)
    binary = ws.selected_subprotocol == KERNEL_V1
    if binary:
        parts = [
            json.dumps(request[part], default=str).encode()
            for part in ("header", "parent_header", "metadata", "content")
        ]
        ws.write_message(serialize_msg_to_ws_v1(parts, "shell"), binary=True)
    else:
        ws.write_message(json.dumps({**request, "channel": "shell"}, default=str))
    reply_type = msg_type.replace("_request", "_reply")
    while True:
        raw = await ws.read_message()
        if raw is None:
            raise RuntimeError(f"the kernel's websocket closed before its {reply_type}")
        if binary:
            _, parts = deserialize_msg_from_ws_v1(raw)
            msg = {
                "header": json.loads(parts[0]),
                "parent_header": json.loads(parts[1]),
                "content": json.loads(parts[3]),
            }
        elif isinstance(raw, str):
            msg = json.loads(raw)
        else:
            continue  # the legacy protocol's binary frames carry buffers; no reply comes as one
        parent = msg["parent_header"].get("msg_id")
        if parent == request["header"]["msg_id"] and msg["header"]["msg_type"] == reply_type:
            if msg_type == "execute_request" and msg["content"]["status"] != "ok":
                raise RuntimeError(f"execute failed: {msg['content']}")
            return


def add_protocol_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--protocol",
        choices=["v1", "legacy"],
        default="v1",
        help="the kernel WebSocket protocol the client offers: JupyterLab's binary one (v1, "
        "its default) or the legacy JSON one",
    )


def use_protocol(protocol: str) -> None:
    Server.subprotocols = [KERNEL_V1] if protocol == "v1" else []


@contextmanager
def process(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> Iterator[None]:
    """A subprocess, its output to ``log``; terminated (SIGTERM: servers drain their kernels
    and sandboxes, the hub stops its proxy and service) on the way out."""
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def sandbox_config(
    directory: Path,
    state_dir: Path,
    runtime: str,
    purpose: str,
    warm_pool: int = 0,
    user_pools: int = 0,
) -> Path:
    """A jupyter_sandbox_config.py: ``warm_pool`` is a server's own pool (WarmPool.size; the
    gateway sets it to 0 whatever this says), ``user_pools`` the gateway's per hub user;
    ``purpose`` labels the pools' members (a kernel's sandbox takes it from
    JUPYTER_SANDBOX_PURPOSE)."""
    directory.mkdir(parents=True)
    (directory / "jupyter_sandbox_config.py").write_text(
        f"c.SandboxSettings.state_dir = {str(state_dir)!r}\n"
        f"c.SandboxSettings.runtime = {runtime!r}\n"
        f"c.SandboxExtension.container_purpose = {purpose!r}\n"
        f"c.WarmPool.size = {warm_pool}\n"
        f"c.UserPools.size = {user_pools}\n"
        "c.SandboxCuller.interval = 3600.0\n"
    )
    return directory


def server_argv(port: int, token: str, root_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}", *extra,
    ]  # fmt: skip


def hub_config(
    work: Path, ports: dict[str, int], admin_token: str, runtime: str, purpose: str, pool_size: int
) -> str:
    data_dir = work / "data"
    gateway_config = sandbox_config(
        work / "gateway-config", work / "state", runtime, purpose, user_pools=pool_size
    )
    gateway_env = {
        "PATH": f"{VENV / 'bin'}:/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "JUPYTER_SANDBOX_PURPOSE": purpose,  # its kernels' sandboxes' label
        "JUPYTER_CONFIG_DIR": str(gateway_config),
        "JUPYTER_CONFIG_PATH": str(VENV / "etc" / "jupyter"),
        "JUPYTER_PATH": str(data_dir),
    }
    gateway_command = [
        sys.executable, "-m", "jupyter_sandbox.cli", "gateway",
        f"--SandboxGateway.user_root={work / 'users'}/{{username}}",
    ]  # fmt: skip
    log = work / "gateway.log"
    return f"""\
c.JupyterHub.bind_url = "http://127.0.0.1:{ports["proxy"]}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{ports["hub"]}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{ports["proxy_api"]}"
c.ConfigurableHTTPProxy.command = [{str(VENV / "bin" / "configurable-http-proxy")!r}]
c.ConfigurableHTTPProxy.pid_file = "{work}/jupyterhub-proxy.pid"
c.JupyterHub.db_url = "sqlite:///{work}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{work}/jupyterhub_cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.services = [
    {{
        "name": {SERVICE!r},
        "url": "http://127.0.0.1:{ports["gateway"]}",
        "command": ["/bin/sh", "-c", 'exec "$@" >>{log} 2>&1', "sh", *{gateway_command!r}],
        "environment": {gateway_env!r},
    }},
    {{"name": "benchmark", "api_token": {admin_token!r}}},
]
c.JupyterHub.load_roles = [
    {{"name": "user", "scopes": ["self", "access:services!service={SERVICE}"]}},
    {{"name": "admin", "services": ["benchmark"]}},
]
"""


async def hub_user_token(hub_url: str, admin_token: str, user: str) -> str:
    """Make ``user`` on the hub and have the hub issue it a token for the gateway."""
    http = AsyncHTTPClient()
    headers = {"Authorization": f"token {admin_token}"}
    for _ in range(600):
        try:
            await http.fetch(f"{hub_url}/hub/api/", headers=headers)
            break
        except (OSError, HTTPClientError):
            await asyncio.sleep(0.1)
    else:
        raise RuntimeError("the hub did not answer within 60 s")
    await http.fetch(f"{hub_url}/hub/api/users/{user}", method="POST", headers=headers, body="")
    body = {"scopes": [f"access:services!service={SERVICE}"], "note": "benchmarks/gateway.py"}
    response = await http.fetch(
        f"{hub_url}/hub/api/users/{user}/tokens",
        method="POST",
        headers=headers,
        body=json.dumps(body),
    )
    token: str = json.loads(response.body)["token"]
    return token


async def wait_for_route(url: str) -> None:
    """Wait until the proxy routes to the gateway and the gateway answers (403: no token)."""
    http = AsyncHTTPClient()
    for _ in range(900):
        response = await http.fetch(url, raise_error=False)
        if response.code in (200, 401, 403):  # the gateway itself answered
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within 90 s")


def stop_proxy(pid_file: Path) -> None:
    """Stop the hub's proxy if the hub left it: a hub stopped while it starts does."""
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return  # no pid file (no proxy started) or no such process (the hub stopped it)


def leftover_containers(purpose: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=io.jupyter-sandbox.purpose={purpose}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


@dataclass
class Measured:
    """One runtime's raw numbers: seconds per measure and kind, and pool hits per kind."""

    samples: dict[str, dict[str, list[float]]]
    hits: dict[str, int]


async def measure(
    runtime: str, starts: int, executes: int, pool_size: int, gap: float, keep: Path | None
) -> Measured:
    samples: dict[str, dict[str, list[float]]] = {
        "start": {kind: [] for kind in KINDS},
        "execute": {kind: [] for kind in EXECUTE_KINDS},
    }
    hits = {kind: 0 for kind in POOL_OF}
    work = Path(tempfile.mkdtemp(prefix="jsbx-bench-gateway-", dir="/tmp"))
    user = f"bench-{secrets.token_hex(3)}"
    purpose = f"benchmark-gateway-{user}"  # on every container of the run, pools' too
    # The servers import this checkout's extension, as the gateway does (hub_config).
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    try:
        with ExitStack() as stack:
            shutil.copytree(KERNELSPEC, work / "data" / "kernels" / KERNELSPEC.name)
            (work / "users" / user).mkdir(parents=True)
            ports = {n: free_port() for n in ("proxy", "proxy_api", "hub", "gateway")}
            admin_token = secrets.token_hex(32)
            (work / "jupyterhub_config.py").write_text(
                hub_config(work, ports, admin_token, runtime, purpose, pool_size)
            )
            hub_argv = [
                sys.executable,
                "-m",
                "jupyterhub",
                "-f",
                str(work / "jupyterhub_config.py"),
            ]
            hub_env = {**os.environ, "PATH": f"{VENV / 'bin'}:{os.environ['PATH']}"}
            stack.callback(stop_proxy, work / "jupyterhub-proxy.pid")
            stack.enter_context(process(hub_argv, hub_env, work, work / "hub.log"))
            hub_url = f"http://127.0.0.1:{ports['proxy']}"
            hub_api = f"http://127.0.0.1:{ports['hub']}"  # the hub itself, not its proxy
            user_token = await hub_user_token(hub_api, admin_token, user)
            await wait_for_route(f"{hub_url}/services/{SERVICE}/api/status")

            servers: dict[str, Server] = {}
            gateway_urls = {
                "gateway": f"{hub_url}/services/{SERVICE}",
                "direct": f"http://127.0.0.1:{ports['gateway']}/services/{SERVICE}",
            }
            for kind in KINDS:
                port, token = free_port(), secrets.token_hex(16)
                config = sandbox_config(
                    work / f"server-{kind}-config",
                    work / f"server-{kind}-state",
                    runtime,
                    purpose,
                    warm_pool=pool_size if kind == "local" else 0,
                )
                env = {
                    **os.environ,
                    "JUPYTER_CONFIG_DIR": str(config),
                    "PYTHONPATH": pythonpath,
                    "JUPYTER_SANDBOX_PURPOSE": purpose,
                }
                root = work / "users" / user
                extra: list[str] = []
                if kind == "local":
                    env["JUPYTER_PATH"] = str(work / "data")
                else:
                    # The user's server, configured alike for all three; python3's alone
                    # starts its kernels itself.
                    env["KERNEL_LAUNCH_TIMEOUT"] = "90"
                if kind in gateway_urls:
                    extra = gateway_client_argv(gateway_urls[kind], user_token)
                argv = server_argv(port, token, root, *extra)
                stack.enter_context(process(argv, env, root, work / f"{kind}.log"))
                servers[kind] = Server(f"http://127.0.0.1:{port}", token)
            kernel_names = {kind: "python3" if kind == "python3" else KERNEL for kind in KINDS}
            fills: dict[str, PoolFill] = {}
            if pool_size:
                fills["gateway"] = PoolFill("gateway's", work / "state", pool_size)
                fills["local"] = PoolFill("local server's", work / "server-local-state", pool_size)
            for server in servers.values():
                await server.wait_until_up()
            for kind, server in servers.items():
                # Not counted: first imports, first engine calls; the hub user's first kernel
                # start, from which on the gateway keeps their pool.
                await server.time_claim(kernel_names[kind])

            for run in range(1, starts + 1):
                for kind, server in servers.items():
                    await settle(list(fills.values()), gap)
                    fill = fills.get(POOL_OF.get(kind, ""))
                    elapsed, claimed = await server.time_claim(kernel_names[kind], fill)
                    samples["start"][kind].append(elapsed)
                    if kind in hits:  # python3 has no pool
                        hits[kind] += claimed
                row = ", ".join(f"{k} {v[-1] * 1000:.0f} ms" for k, v in samples["start"].items())
                print(f"{runtime} start {run}/{starts}: {row}", file=sys.stderr, flush=True)

            execute_on = {kind: servers[kind] for kind in EXECUTE_KINDS}
            await time_executes(
                execute_on,
                KERNEL,
                executes,
                samples["execute"],
                before=lambda: settle(list(fills.values()), gap),  # no refill meanwhile
            )
    finally:
        if keep is not None:
            shutil.copytree(work, keep / f"gateway-{runtime}-logs", dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        left = leftover_containers(purpose)
        if left:
            print(f"LEFT {len(left)} containers labelled {purpose}: {left}", file=sys.stderr)
    return Measured(samples, hits)


def gateway_client_argv(url: str, token: str) -> list[str]:
    """A user server's options for its kernels to be at the gateway ``url``, reached with
    ``token``."""
    return [
        f"--GatewayClient.url={url}",
        f"--GatewayClient.auth_token={token}",
        "--GatewayClient.request_timeout=120",
    ]


async def time_executes(
    servers: dict[str, Server],
    kernel_name: str,
    executes: int,
    samples: dict[str, list[float]],
    before: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Start a ``kernel_name`` kernel on each of ``servers`` and time ``executes`` round trips
    of ``pass`` on each, interleaved, after WARMUP not counted; seconds into ``samples`` by
    kind. ``before`` is awaited once the kernels are up, before the first. The kernels are
    deleted at the end."""
    kernels: dict[str, tuple[str, WebSocketClientConnection]] = {}
    try:
        for kind, server in servers.items():
            _, kernel_id, ws = await server.start_kernel(kernel_name)
            kernels[kind] = (kernel_id, ws)
        if before is not None:
            await before()
        for run in range(WARMUP + executes):
            for kind, (_, ws) in kernels.items():
                begin = time.perf_counter()
                await request_reply(ws, "execute_request", {"code": "pass"})
                if run >= WARMUP:
                    samples[kind].append(time.perf_counter() - begin)
    finally:
        for kind, (kernel_id, ws) in kernels.items():
            ws.close()
            await servers[kind].call("DELETE", f"/api/kernels/{kernel_id}")


def summarize(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for measure_name, kinds in samples.items():
        for kind, values in kinds.items():
            summary[f"{measure_name} {kind}"] = {
                "runs": len(values),
                "p50_ms": statistics.median(values) * 1000,
                "p95_ms": percentile(values, 95) * 1000,
                "p99_ms": percentile(values, 99) * 1000,
            }
    start, execute = summary["start gateway"], summary["execute gateway"]
    python3, local = summary["start python3"], summary["start local"]
    added = (execute["p50_ms"] - summary["execute local"]["p50_ms"]) / 1000
    summary["targets"] = {
        "start_p50_ratio": start["p50_ms"] / python3["p50_ms"],
        "start_met": start["p50_ms"] / python3["p50_ms"] <= START_TARGET,
        "start_p99_ratio": start["p99_ms"] / python3["p99_ms"],
        "start_p50_ratio_local": start["p50_ms"] / local["p50_ms"],
        "execute_added_ms": added * 1000,
        "execute_met": added <= EXECUTE_TARGET,
    }
    return summary


def report(runtime: str, args: argparse.Namespace, measured: Measured) -> dict[str, Any]:
    """Print one runtime's table and targets; its summary."""
    summary = summarize(measured.samples)
    pool = f"pools of {args.pool}" if args.pool else "no pools"
    print(
        f"\n{runtime}: {args.starts} starts, {args.executes} executes of each, interleaved, "
        f"{pool}, {args.gap:g} s after they are full"
    )
    print(f"{'':18}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}")
    for name, row in summary.items():
        if name != "targets":
            print(f"{name:18}{row['p50_ms']:9.1f}{row['p95_ms']:9.1f}{row['p99_ms']:9.1f}")
    if args.pool:
        print(
            "starts that claimed a pool member: "
            + ", ".join(f"{k} {n}/{args.starts}" for k, n in measured.hits.items())
        )
    targets = summary["targets"]
    print(
        f"target start p50 <= {START_TARGET}x python3: {targets['start_p50_ratio']:.2f}x "
        f"{'met' if targets['start_met'] else 'MISSED'}"
    )
    print(
        f"start p99 through the gateway: {targets['start_p99_ratio']:.2f}x python3's; "
        f"p50 {targets['start_p50_ratio_local']:.2f}x the local sandboxed server's"
    )
    print(
        f"target execute p50 <= local + {EXECUTE_TARGET * 1000:.0f} ms: "
        f"{targets['execute_added_ms']:+.2f} ms {'met' if targets['execute_met'] else 'MISSED'}"
    )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtime", action="append", choices=["runc", "runsc"])
    parser.add_argument("--starts", type=int, default=20, help="kernel starts of each kind")
    parser.add_argument("--executes", type=int, default=200, help="executes of each kind")
    parser.add_argument(
        "--pool",
        type=int,
        default=2,
        help="warm sandboxes per pool key: the gateway's per hub user (UserPools.size) and the "
        "local server's (WarmPool.size); 0: no pools",
    )
    parser.add_argument(
        "--gap",
        type=float,
        default=1.0,
        help="seconds waited before every timed start (and the executes) once the pools are full",
    )
    parser.add_argument(
        "--json-dir", type=Path, help="write gateway-<runtime>.json (raw numbers) here"
    )
    parser.add_argument("--keep-logs", type=Path, help="copy the servers' logs here")
    add_protocol_argument(parser)
    args = parser.parse_args()
    use_protocol(args.protocol)
    if args.starts < 1 or args.executes < 1:
        parser.error("--starts and --executes must be at least 1")
    if args.pool < 0 or args.gap < 0:
        parser.error("--pool and --gap must not be negative")
    for runtime in args.runtime or ["runc", "runsc"]:
        try:
            measured = asyncio.run(
                measure(runtime, args.starts, args.executes, args.pool, args.gap, args.keep_logs)
            )
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        summary = report(runtime, args, measured)
        if args.json_dir:
            args.json_dir.mkdir(parents=True, exist_ok=True)
            result = {
                "runtime": runtime,
                "unit": "seconds",
                "pool": args.pool,
                "gap": args.gap,
                "protocol": args.protocol,
                "samples": measured.samples,
                "pool_hits": measured.hits,
                "summary": summary,
            }
            (args.json_dir / f"gateway-{runtime}.json").write_text(
                json.dumps(result, indent=1) + "\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

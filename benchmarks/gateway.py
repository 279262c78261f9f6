"""Kernel start and execute round trip through the sandbox gateway, against a local server.

For each ``--runtime``, starts on 127.0.0.1, each with its own configuration and state:

- a JupyterHub (6.x, dummy authenticator, its configurable-http-proxy) that runs
  ``jupyter sandbox gateway`` as its managed service, as examples/jupyterhub_gateway_config.py
  does, and one hub user whose token (scope ``access:services!service=sandbox-gateway``,
  issued by the hub) the users' servers authenticate with;
- ``gateway``: a user's ``jupyter server`` with ``GatewayClient.url`` set to the gateway through
  the hub's proxy (``/services/sandbox-gateway``), as the example deploys it;
- ``direct``: the same, with ``GatewayClient.url`` set to the gateway's own port (no proxy hop),
  to tell the proxy's share from the gateway's;
- ``local``: a ``jupyter server`` holding the engine, this checkout's extension, as today.

All three start Sandboxed Python with the same settings: the runtime, no warm pool (the
gateway turns its pool off: pools per hub user are not built yet; the local server is given
``WarmPool.size = 0`` to match) and the zygote on (``SandboxExtension.fast_kernel_start``,
the default, on the gateway and the local server). The kernelspec is this checkout's on both.

Timed, interleaved (gateway, direct, local, gateway, ...) so machine noise hits all alike:

- kernel start: ``POST /api/kernels`` on the server until the kernel's ``kernel_info_reply``
  arrives over the server's websocket (what JupyterLab waits for); ``--starts`` of each, the
  kernel deleted after each (not timed);
- execute round trip: on one kernel of each, ``execute_request`` of ``pass`` until its
  ``execute_reply`` arrives over the websocket; ``--executes`` of each, after 10 not counted.

Prints p50, p95 and p99 in milliseconds and the targets of issue 33: the gateway's start p50
<= 1.0x the local one, its execute p50 <= the local one + 1 ms. Everything it started (servers,
hub, proxy, gateway, kernels and their sandboxes, temporary directories) is stopped or removed
at the end, also on error or Ctrl-C; the containers of the run's hub user are checked to be
gone. Needs the Docker engine with both runtimes, the sandbox image and the ``gateway`` and
hub test extras (jupyterhub, configurable-http-proxy in the venv). From the checkout:

    .venv/bin/python benchmarks/gateway.py --runtime runc --runtime runsc --starts 20 \\
        --executes 200 [--json-dir benchmarks/results]
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
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pool
from jupyter_client.session import Session
from pool import percentile
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.websocket import WebSocketClientConnection, websocket_connect

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
KERNELSPEC = REPO / "kernelspec" / "sandboxed-python"
KERNEL = "sandboxed-python"
SERVICE = "sandbox-gateway"
KINDS = ("gateway", "direct", "local")
WARMUP = 10  # executes not counted: the first ones warm the relay and the kernel up
START_TARGET = 1.0  # the gateway's start p50, at most this many times the local one's
EXECUTE_TARGET = 0.001  # seconds the gateway may add to the execute p50


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server(pool.Server):
    """A jupyter server on 127.0.0.1 and the REST (pool.Server.call) and websocket calls the
    benchmark makes."""

    async def wait_until_up(self) -> None:
        for _ in range(600):
            try:
                await self.call("GET", "/api/status")
                return
            except OSError:
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.url} did not answer within 60 s")

    async def connect(self, kernel_id: str) -> WebSocketClientConnection:
        ws_url = self.url.replace("http", "ws", 1)
        return await websocket_connect(
            f"{ws_url}/api/kernels/{kernel_id}/channels?token={self.token}"
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

    async def time_start(self, kernel_name: str = KERNEL) -> float:
        """As pool.Server.time_start, through start_kernel, which the executes use too."""
        elapsed, kernel_id, ws = await self.start_kernel(kernel_name)
        ws.close()
        await self.call("DELETE", f"/api/kernels/{kernel_id}")
        return elapsed


async def request_reply(ws: WebSocketClientConnection, msg_type: str, content: Any) -> None:
    """Send a shell request and read the websocket until its reply."""
    request = Session().msg(msg_type, content)
    request["channel"] = "shell"
    ws.write_message(json.dumps(request, default=str))
    reply_type = msg_type.replace("_request", "_reply")
    while True:
        raw = await ws.read_message()
        if raw is None:
            raise RuntimeError(f"the kernel's websocket closed before its {reply_type}")
        if not isinstance(raw, str):
            continue  # binary frames carry buffers; no reply comes as one
        msg = json.loads(raw)
        parent = msg.get("parent_header", {}).get("msg_id")
        if parent == request["header"]["msg_id"] and msg["msg_type"] == reply_type:
            if msg_type == "execute_request" and msg["content"]["status"] != "ok":
                raise RuntimeError(f"execute failed: {msg['content']}")
            return


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


def sandbox_config(directory: Path, state_dir: Path, runtime: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "jupyter_sandbox_config.py").write_text(
        f"c.SandboxSettings.state_dir = {str(state_dir)!r}\n"
        f"c.SandboxSettings.runtime = {runtime!r}\n"
        "c.WarmPool.size = 0\n"
        "c.SandboxCuller.interval = 3600.0\n"
    )
    return directory


def server_argv(port: int, token: str, root_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}", *extra,
    ]  # fmt: skip


def hub_config(work: Path, ports: dict[str, int], admin_token: str, runtime: str) -> str:
    data_dir = work / "data"
    gateway_env = {
        "PATH": f"{VENV / 'bin'}:/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "JUPYTER_CONFIG_DIR": str(sandbox_config(work / "gateway-config", work / "state", runtime)),
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


def leftover_containers(owner: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=io.jupyter-sandbox.owner={owner}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


async def measure(
    runtime: str, starts: int, executes: int, keep: Path | None
) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {
        "start": {kind: [] for kind in KINDS},
        "execute": {kind: [] for kind in KINDS},
    }
    work = Path(tempfile.mkdtemp(prefix="jsbx-bench-gateway-", dir="/tmp"))
    user = f"bench-{secrets.token_hex(3)}"
    try:
        with ExitStack() as stack:
            shutil.copytree(KERNELSPEC, work / "data" / "kernels" / KERNELSPEC.name)
            (work / "users" / user).mkdir(parents=True)
            ports = {n: free_port() for n in ("proxy", "proxy_api", "hub", "gateway")}
            admin_token = secrets.token_hex(32)
            (work / "jupyterhub_config.py").write_text(
                hub_config(work, ports, admin_token, runtime)
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
                    work / f"server-{kind}-config", work / f"server-{kind}-state", runtime
                )
                env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config)}
                root = work / "users" / user
                if kind == "local":
                    env["JUPYTER_PATH"] = str(work / "data")
                    extra: list[str] = []
                else:
                    env["KERNEL_LAUNCH_TIMEOUT"] = "90"
                    extra = [
                        f"--GatewayClient.url={gateway_urls[kind]}",
                        f"--GatewayClient.auth_token={user_token}",
                        "--GatewayClient.request_timeout=120",
                    ]
                argv = server_argv(port, token, root, *extra)
                stack.enter_context(process(argv, env, root, work / f"{kind}.log"))
                servers[kind] = Server(f"http://127.0.0.1:{port}", token)
            for server in servers.values():
                await server.wait_until_up()
            for server in servers.values():
                await server.time_start()  # not counted: first imports, first engine calls

            for run in range(1, starts + 1):
                for kind, server in servers.items():
                    samples["start"][kind].append(await server.time_start())
                row = ", ".join(f"{k} {v[-1] * 1000:.0f} ms" for k, v in samples["start"].items())
                print(f"{runtime} start {run}/{starts}: {row}", file=sys.stderr, flush=True)

            kernels: dict[str, tuple[str, WebSocketClientConnection]] = {}
            try:
                for kind, server in servers.items():
                    _, kernel_id, ws = await server.start_kernel()
                    kernels[kind] = (kernel_id, ws)
                for run in range(WARMUP + executes):
                    for kind, (_, ws) in kernels.items():
                        begin = time.perf_counter()
                        await request_reply(ws, "execute_request", {"code": "pass"})
                        if run >= WARMUP:
                            samples["execute"][kind].append(time.perf_counter() - begin)
            finally:
                for kind, (kernel_id, ws) in kernels.items():
                    ws.close()
                    await servers[kind].call("DELETE", f"/api/kernels/{kernel_id}")
    finally:
        if keep is not None:
            shutil.copytree(work, keep / f"gateway-{runtime}-logs", dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        left = leftover_containers(user)
        if left:
            print(f"LEFT {len(left)} containers of {user}: {left}", file=sys.stderr)
    return samples


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
    local_start = statistics.median(samples["start"]["local"])
    local_execute = statistics.median(samples["execute"]["local"])
    gateway_start = statistics.median(samples["start"]["gateway"])
    gateway_execute = statistics.median(samples["execute"]["gateway"])
    summary["targets"] = {
        "start_ratio": gateway_start / local_start,
        "start_met": gateway_start / local_start <= START_TARGET,
        "execute_added_ms": (gateway_execute - local_execute) * 1000,
        "execute_met": gateway_execute - local_execute <= EXECUTE_TARGET,
    }
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtime", action="append", choices=["runc", "runsc"])
    parser.add_argument("--starts", type=int, default=20, help="kernel starts of each kind")
    parser.add_argument("--executes", type=int, default=200, help="executes of each kind")
    parser.add_argument(
        "--json-dir", type=Path, help="write gateway-<runtime>.json (raw numbers) here"
    )
    parser.add_argument("--keep-logs", type=Path, help="copy the servers' logs here")
    args = parser.parse_args()
    if args.starts < 1 or args.executes < 1:
        parser.error("--starts and --executes must be at least 1")
    for runtime in args.runtime or ["runc", "runsc"]:
        try:
            samples = asyncio.run(measure(runtime, args.starts, args.executes, args.keep_logs))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        summary = summarize(samples)
        print(f"\n{runtime}: {args.starts} starts, {args.executes} executes of each, interleaved")
        print(f"{'':16}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}")
        for name, row in summary.items():
            if name != "targets":
                print(f"{name:16}{row['p50_ms']:9.1f}{row['p95_ms']:9.1f}{row['p99_ms']:9.1f}")
        targets = summary["targets"]
        print(
            f"target start p50 <= {START_TARGET}x local: {targets['start_ratio']:.2f}x "
            f"{'met' if targets['start_met'] else 'MISSED'}"
        )
        print(
            f"target execute p50 <= local + {EXECUTE_TARGET * 1000:.0f} ms: "
            f"{targets['execute_added_ms']:+.2f} ms {'met' if targets['execute_met'] else 'MISSED'}"
        )
        if args.json_dir:
            args.json_dir.mkdir(parents=True, exist_ok=True)
            result = {"runtime": runtime, "unit": "seconds", "samples": samples}
            result["summary"] = summary
            (args.json_dir / f"gateway-{runtime}.json").write_text(
                json.dumps(result, indent=1) + "\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

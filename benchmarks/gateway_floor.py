"""The floor of a gateway hop: what Jupyter Server's gateway client adds to an execute round
trip when no sandbox is involved at all.

Issue 33 asks the sandbox gateway to add at most 1 ms to an execute round trip
(benchmarks/gateway.py measures it). Every message of a kernel reached through a gateway takes
one more process on its way: the user's server relays it between its client's WebSocket and a
second WebSocket to the gateway (``jupyter_server.gateway.connections``). This measures that
hop alone, with ordinary ``python3`` kernels on the host and nothing of this project's in the
messages' way, so the sandbox gateway's figures can be read against it:

- ``local``: a user's ``jupyter server`` starting a ``python3`` kernel itself;
- ``jupyter-server``: the same user server with ``GatewayClient.url`` set to a second
  ``jupyter server`` on 127.0.0.1, which starts the ``python3`` kernel: the gateway API that
  Kernel Gateway and Enterprise Gateway serve is Jupyter Server's own kernels API and kernel
  WebSocket;
- ``proxied``: the same as ``jupyter-server``, its ``GatewayClient.url`` the address of a
  configurable-http-proxy (the one JupyterHub runs, from npm: ``make hub-proxy``) whose default
  target is that second server: the hop as a hub service behind the hub's proxy takes it;
- ``kernel-gateway``: the same user server with ``GatewayClient.url`` set to Jupyter Kernel
  Gateway (``jupyter_kernel_gateway`` from PyPI, as it ships), when it is importable, from
  ``--kernel-gateway-path`` if given (``make benchmark-gateway`` installs it into
  ``.bench-kernel-gateway``, which is the default when it exists).

Every server loads the extensions this venv enables, this project's among them, which sends
every kernel WebSocket's messages at once (TCP_NODELAY; docs/explanation/performance.md,
"The 40 ms that went"); Kernel Gateway is not a Jupyter Server application and loads none.

Timed, interleaved (local, jupyter-server, proxied, kernel-gateway, local, ...):
``execute_request`` of ``pass`` until its ``execute_reply`` over the user server's WebSocket,
``--executes`` of each after 10 not counted (gateway.time_executes). Prints p50, p95 and p99
in milliseconds and, for each hop, what it adds to the local p50 with a 95% interval from
resampling both kinds' samples (``--draws``, a fixed seed). Everything it started is stopped
at the end, also on error or Ctrl-C. From the checkout:

    .venv/bin/python benchmarks/gateway_floor.py --executes 1000 [--json-dir DIR] \\
        [--kernel-gateway-path .bench-kernel-gateway]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import secrets
import shutil
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from gateway import (
    REPO,
    VENV,
    Server,
    add_protocol_argument,
    free_port,
    gateway_client_argv,
    process,
    sandbox_config,
    server_argv,
    time_executes,
    use_protocol,
)
from pool import percentile

KERNEL_GATEWAY_DIR = REPO / ".bench-kernel-gateway"  # where make benchmark-gateway puts it
SEED = 33  # the resampling's, so that a run's intervals can be recomputed from its JSON


def added_p50(
    local: list[float], other: list[float], draws: int, rng: random.Random
) -> tuple[float, float, float]:
    """What ``other``'s p50 adds to ``local``'s (seconds), and a 95% interval of it from
    ``draws`` resamplings of both."""
    added = statistics.median(other) - statistics.median(local)
    resampled = sorted(
        statistics.median(rng.choices(other, k=len(other)))
        - statistics.median(rng.choices(local, k=len(local)))
        for _ in range(draws)
    )
    return added, resampled[int(0.025 * draws)], resampled[int(0.975 * draws) - 1]


async def measure(
    executes: int, kernel_gateway: bool, extra_path: str | None, keep: Path | None
) -> dict[str, list[float]]:
    kinds = ["local", "jupyter-server", "proxied"] + (["kernel-gateway"] if kernel_gateway else [])
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    work = Path(tempfile.mkdtemp(prefix="jsbx-bench-gateway-floor-", dir="/tmp"))
    try:
        with ExitStack() as stack:
            root = work / "root"
            root.mkdir()
            # This project's extension, loaded by every server of this venv, starts no sandbox:
            # no warm pool (its state apart, its containers labelled, should one be made).
            purpose = f"benchmark-gateway-floor-{secrets.token_hex(3)}"
            config = sandbox_config(work / "config", work / "state", "runc", purpose)
            env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config)}
            gateways: dict[str, str] = {}
            gateway_token = secrets.token_hex(16)
            # The gateways: a second Jupyter Server, a proxy in front of it, Kernel Gateway.
            port = free_port()
            argv = server_argv(port, gateway_token, root)
            stack.enter_context(process(argv, env, root, work / "jupyter-server-gateway.log"))
            gateways["jupyter-server"] = f"http://127.0.0.1:{port}"
            # configurable-http-proxy in front of it, as JupyterHub runs it (its own API port
            # unused, on 127.0.0.1 too).
            proxy_port, proxy_api_port = free_port(), free_port()
            argv = [
                str(VENV / "bin" / "configurable-http-proxy"), "--ip=127.0.0.1",
                f"--port={proxy_port}", "--api-ip=127.0.0.1", f"--api-port={proxy_api_port}",
                f"--default-target=http://127.0.0.1:{port}", "--log-level=warn",
            ]  # fmt: skip
            proxy_env = {**env, "CONFIGPROXY_AUTH_TOKEN": secrets.token_hex(16)}
            stack.enter_context(process(argv, proxy_env, root, work / "proxy.log"))
            gateways["proxied"] = f"http://127.0.0.1:{proxy_port}"
            if kernel_gateway:
                port = free_port()
                kg_env = dict(env)
                if extra_path:
                    kg_env["PYTHONPATH"] = os.pathsep.join(
                        p for p in (extra_path, env.get("PYTHONPATH")) if p
                    )
                argv = [
                    sys.executable, "-m", "kernel_gateway", "--KernelGatewayApp.ip=127.0.0.1",
                    f"--KernelGatewayApp.port={port}",
                    f"--KernelGatewayApp.auth_token={gateway_token}",
                    # A user server's /api/status lists its gateway's kernels.
                    "--JupyterWebsocketPersonality.list_kernels=True",
                ]  # fmt: skip
                stack.enter_context(process(argv, kg_env, root, work / "kernel-gateway.log"))
                gateways["kernel-gateway"] = f"http://127.0.0.1:{port}"
            # The user servers, alike but for where their kernels are.
            servers: dict[str, Server] = {}
            for kind in kinds:
                port, token = free_port(), secrets.token_hex(16)
                extra = (
                    [] if kind == "local" else gateway_client_argv(gateways[kind], gateway_token)
                )
                argv = server_argv(port, token, root, *extra)
                stack.enter_context(process(argv, env, root, work / f"user-{kind}.log"))
                servers[kind] = Server(f"http://127.0.0.1:{port}", token)
            for url in gateways.values():  # a user server's /api/status asks its gateway
                await Server(url, gateway_token).call_when_up("GET", "/api/kernelspecs")
            for server in servers.values():
                await server.wait_until_up()

            await time_executes(servers, "python3", executes, samples)
    finally:
        if keep is not None:
            shutil.copytree(work, keep / "gateway-floor-logs", dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--executes", type=int, default=1000, help="executes of each kind")
    parser.add_argument(
        "--draws", type=int, default=1000, help="resamplings for each interval (a count)"
    )
    parser.add_argument(
        "--kernel-gateway-path",
        help="a directory jupyter_kernel_gateway was installed into (pip install --target)",
    )
    parser.add_argument("--json-dir", type=Path, help="write gateway-floor.json (raw numbers) here")
    parser.add_argument("--keep-logs", type=Path, help="copy the servers' logs here")
    add_protocol_argument(parser)
    args = parser.parse_args()
    use_protocol(args.protocol)
    if args.executes < 1 or args.draws < 40:
        parser.error("--executes must be at least 1 and --draws at least 40")
    if args.kernel_gateway_path is None and KERNEL_GATEWAY_DIR.is_dir():
        args.kernel_gateway_path = str(KERNEL_GATEWAY_DIR)
    if args.kernel_gateway_path:
        sys.path.insert(0, args.kernel_gateway_path)
    kernel_gateway = importlib.util.find_spec("kernel_gateway") is not None
    if not kernel_gateway:
        print("jupyter_kernel_gateway is not importable: its kind is left out", file=sys.stderr)
    try:
        samples = asyncio.run(
            measure(args.executes, kernel_gateway, args.kernel_gateway_path, args.keep_logs)
        )
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    rng = random.Random(SEED)
    summary: dict[str, Any] = {}
    print(f"\n{args.executes} executes of each, interleaved, protocol {args.protocol}")
    print(f"{'':16}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}   added to local's p50 (95% interval)")
    for kind, values in samples.items():
        row: dict[str, Any] = {
            "p50_ms": statistics.median(values) * 1000,
            "p95_ms": percentile(values, 95) * 1000,
            "p99_ms": percentile(values, 99) * 1000,
        }
        added = ""
        if kind != "local":
            middle, low, high = added_p50(samples["local"], values, args.draws, rng)
            row["added_p50_ms"] = [middle * 1000, low * 1000, high * 1000]
            added = f"   {middle * 1000:+.2f} ms ({low * 1000:+.2f} to {high * 1000:+.2f})"
        summary[kind] = row
        print(f"{kind:16}{row['p50_ms']:9.2f}{row['p95_ms']:9.2f}{row['p99_ms']:9.2f}{added}")
    if args.json_dir:
        args.json_dir.mkdir(parents=True, exist_ok=True)
        result = {
            "unit": "seconds",
            "protocol": args.protocol,
            "samples": samples,
            "summary": summary,
            "seed": SEED,
        }
        (args.json_dir / "gateway-floor.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The host proxy process of one sandbox: ``python -m jupyter_sandbox.sandbox.network ROOT OPTIONS``.

Started by network/control.py (detached, its own session) when a sandbox's policy allows
network; ``ROOT`` is the sandbox's host directory, ``OPTIONS`` the JSON of
``NetworkSettings.proxy_options()`` (among them the credentials directory, whose owner's file
it reads on each request for the sandbox's owner, named in its state). The token is read from the host-only state file, never from
the command line (which other users can read). It holds ``egress-proxy.lock`` (with its pid)
while it runs, prints ``ready`` once a tunnel into the sandbox is open, and exits on SIGTERM or
as soon as the sandbox's directory is gone (the sandbox was removed), so it never outlives its
sandbox for more than a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from jupyter_sandbox.sandbox.host.helper_process import run_helper
from jupyter_sandbox.sandbox.host.state_record import SandboxState, read_state
from jupyter_sandbox.sandbox.host.timeouts import within
from jupyter_sandbox.sandbox.network.asks import HeldRequests
from jupyter_sandbox.sandbox.network.audit import AuditLog
from jupyter_sandbox.sandbox.network.control import PROXY_LOCK, TUNNEL_SOCKET
from jupyter_sandbox.sandbox.network.credentials import CredentialStore
from jupyter_sandbox.sandbox.network.egress_proxy import EgressProxy
from jupyter_sandbox.sandbox.network.settings import guard_from_options
from jupyter_sandbox.sandbox.network.tunnels import TunnelKeeper

WATCH_SECONDS = 1.0
READY_TIMEOUT = 30.0


async def serve(root: Path, options: dict[str, object]) -> int:
    state = read_state(root / "state.json")
    token = state.get("network_token")
    if not isinstance(token, str) or not token:
        print("error: the sandbox has no network token", flush=True)
        return 1
    audit = AuditLog(root, root.name, int(str(options.get("audit_max_bytes", 1024**2))))
    asks = HeldRequests(
        root,
        timeout=float(str(options.get("ask_timeout", 60))),
        max_pending=int(str(options.get("max_pending_requests", 8))),
    )
    asks.clear()  # what an earlier proxy of this sandbox held ended with it
    credentials = credentials_of(state, options)
    proxy = EgressProxy(
        root,
        guard_from_options(options),
        audit,
        test_host_addresses=dict(options.get("test_host_addresses") or {}),  # type: ignore[call-overload]
        connect_timeout=float(str(options.get("connect_timeout", 10))),
        asks=asks,
        credentials=credentials,
        tls_inspection=bool(options.get("tls_inspection", False)),
        upstream_extra_ca_file=str(options.get("upstream_extra_ca_file") or ""),
    )
    keeper = TunnelKeeper(
        root / "io" / TUNNEL_SOCKET,
        token,
        proxy,
        idle=int(str(options.get("idle_tunnels", 4))),
        max_connections=int(str(options.get("max_connections", 64))),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    keeper.start()
    try:
        await within(keeper.ready.wait(), READY_TIMEOUT)
    except asyncio.TimeoutError:
        print("error: no tunnel into the sandbox could be opened (is its forwarder running?)")
        await keeper.close()
        return 1
    print("ready", flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the starter has read what it waited for
    while not stop.is_set() and root.is_dir():  # noqa: ASYNC240 (a stat a second)
        with contextlib.suppress(asyncio.TimeoutError):
            await within(stop.wait(), WATCH_SECONDS)
    await keeper.close()
    return 0


def credentials_of(
    state: SandboxState, options: dict[str, object]
) -> Callable[[str, int], list[tuple[str, str]]] | None:
    """The sandbox owner's credentials for a host and port, read from the store on each call
    (a credential set or removed applies to the next request); None without a store or owner."""
    owner, where = state.get("owner"), options.get("credentials_dir")
    if not isinstance(owner, str) or not owner or not isinstance(where, str) or not where:
        return None
    store = CredentialStore(Path(where))
    return functools.partial(store.headers_for, owner)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, options = Path(argv[1]), json.loads(argv[2])
    return run_helper(root, PROXY_LOCK, "egress proxy", lambda: asyncio.run(serve(root, options)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))

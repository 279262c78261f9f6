"""Rows 12, 13 and 24: host secrets, the engine's socket and other host sockets, and files and
sockets the sandbox shares with the host."""

from __future__ import annotations

import ast
import json
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_sandbox.kernel.message_relay import Relay
from jupyter_sandbox.protocol.errors import SocketReplacedError
from jupyter_sandbox.sandbox.container_spec import BASE_ENVIRONMENT
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from tests.security.conftest import errno_name, run

pytestmark = pytest.mark.integration

# Set by the image (Dockerfile ENV), by Docker itself, or by ipykernel for its own children.
IMAGE_ENVIRONMENT = {"PATH", "LANG", "PYTHONUNBUFFERED", "MPLBACKEND", "HOSTNAME", "TERM"}
KERNEL_ENVIRONMENT = {"JPY_PARENT_PID", "PYDEVD_USE_FRAME_EVAL", "CLICOLOR", "CLICOLOR_FORCE"}
KERNEL_ENVIRONMENT |= {"FORCE_COLOR"}
KERNEL_ENVIRONMENT |= {"PAGER", "GIT_PAGER", "PYTHONPATH"}
# The image's: where a notebook's own %pip install goes (images/python/Dockerfile).
KERNEL_ENVIRONMENT |= {"PIP_PREFIX"}

LOOK_AROUND = """
import glob, os
def readable(path):
    try:
        with open(path, 'rb') as f:
            return f.read()
    except OSError:
        return b''
def entries(path):
    try:
        return os.listdir(path)
    except OSError:  # missing, or the image's own unreadable /root
        return []
candidates = ['/root', '/home', os.path.expanduser('~/.aws'), '/etc/jupyter',
              '/usr/local/etc/jupyter', {runtime_dir!r}, {home!r}, {state_dir!r}]
print({{
    'environ': sorted(os.environ),
    'secret seen': any({secret!r}.encode() in blob for blob in
                       [readable(p) for p in glob.glob('/proc/[0-9]*/environ')] +
                       [readable(p) for p in glob.glob('/proc/[0-9]*/cmdline')]),
    'host paths present': [p for p in candidates if entries(p)],
}})
"""


@pytest.mark.checklist(
    row=12,
    attack="read the host's environment, credentials, Jupyter token and configuration",
    expected="none present: only the sandbox's own allow-listed variables, no host paths",
)
async def test_row12_host_secrets_are_not_visible(
    manager: SandboxManager,
    runtime: str,
    purpose: str,
    monkeypatch: pytest.MonkeyPatch,
    observe: Callable[[str], None],
) -> None:
    secret = "host-secret-" + os.urandom(8).hex()
    for name in ("JUPYTER_TOKEN", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "JPY_API_TOKEN"):
        monkeypatch.setenv(name, secret)
    sandbox = await manager.create("alice", runtime=runtime, purpose=purpose)
    code = LOOK_AROUND.format(
        secret=secret,
        runtime_dir=os.environ.get("JUPYTER_RUNTIME_DIR", "/root/.local/share/jupyter/runtime"),
        home=str(Path.home()),
        state_dir=str(manager.settings.state_path),
    )
    seen = ast.literal_eval(await run(sandbox, code))
    allowed = set(BASE_ENVIRONMENT) | IMAGE_ENVIRONMENT | KERNEL_ENVIRONMENT
    assert set(seen["environ"]) <= allowed, set(seen["environ"]) - allowed
    assert not seen["secret seen"]
    assert seen["host paths present"] == []
    observe(
        f"{len(seen['environ'])} variables, all allow-listed; the planted secret appears in no "
        "process's environment or command line; no host home, credentials or Jupyter paths"
    )


PROBE_SOCKETS = """
import os, socket
def connect(address):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(address)
    except OSError as e:
        return e.errno
    finally:
        s.close()
    return 'connected'
print({{str(a): connect(a) for a in {addresses!r}}})
"""


def host_abstract_sockets(limit: int = 5) -> list[bytes]:
    """Abstract-namespace Unix sockets listening on the host (containerd, dockerd, systemd...)."""
    names = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7].startswith("@") and fields[5] == "01":  # listening
            names.append(b"\0" + fields[7][1:].encode())
    return names[:limit]


@pytest.mark.checklist(
    row=13,
    attack="connect to the Docker socket, containerd's and other host Unix sockets (path and "
    "abstract)",
    expected="nothing mounted; every connect fails",
)
async def test_row13_engine_and_host_sockets_are_unreachable(
    sandbox: Sandbox, observe: Callable[[str], None]
) -> None:
    addresses: list[str | bytes] = [
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/run/containerd/containerd.sock",
        *host_abstract_sockets(),
    ]
    seen = ast.literal_eval(await run(sandbox, PROBE_SOCKETS.format(addresses=addresses)))
    assert "connected" not in seen.values(), seen
    observe(
        f"{len(seen)} sockets tried ({len(addresses) - 3} abstract ones the host listens on): "
        + ", ".join(sorted({errno_name(v) for v in seen.values()}))
    )


@pytest.mark.checklist(
    row=24,
    attack="sandbox code rewriting what it shares with the host (its connection file: "
    "transport, key, signature scheme) to redirect or reconfigure the host",
    expected="the host never reads it again: it keeps its own copy; the kernel stays reachable",
)
async def test_row24_the_host_never_trusts_files_the_sandbox_can_write(
    sandbox: Sandbox, manager: SandboxManager, observe: Callable[[str], None]
) -> None:
    await run(
        sandbox,
        "import json\n"
        "forged = {'transport': 'tcp', 'ip': '169.254.169.254', 'key': 'forged',\n"
        "          'signature_scheme': 'hmac-md5', 'shell_port': 80}\n"
        "open('/run/sandbox/kernel.json', 'w').write(json.dumps(forged))",
    )
    directory = SandboxDirectory(manager.settings.state_path, sandbox.sandbox_id)
    assert json.loads(directory.connection_file.read_text())["key"] == "forged"  # it did write
    # What a proxy kernel does when it (re)attaches, e.g. after a Jupyter restart.
    attached = await manager.attach("alice", sandbox.sandbox_id)
    assert attached.connection_info == sandbox.connection_info
    assert await run(attached, "print('reachable')") == "reachable"
    observe("the forged connection file was ignored; reattaching used the host's own copy")


@pytest.mark.checklist(
    row=24,
    attack="sandbox code replacing its kernel's socket by a symlink to a host Unix socket, so "
    "that the host's next connection (a kernel reattaching) goes there",
    expected="the host refuses, naming the socket; the link's target is never contacted",
)
async def test_row24_the_host_does_not_follow_a_replaced_kernel_socket(
    sandbox: Sandbox, manager: SandboxManager, observe: Callable[[str], None]
) -> None:
    with tempfile.TemporaryDirectory(prefix="jsbx-decoy-") as decoy_dir:
        decoy_path = os.path.join(decoy_dir, "decoy.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as decoy:
            decoy.bind(decoy_path)
            decoy.listen()
            decoy.setblocking(False)
            await run(
                sandbox,
                "import os\n"
                "os.rename('/run/sandbox/kernel-1', '/run/sandbox/kernel-1.moved')\n"
                f"os.symlink({decoy_path!r}, '/run/sandbox/kernel-1')",
            )
            directory = SandboxDirectory(manager.settings.state_path, sandbox.sandbox_id)
            assert (directory.io / "kernel-1").is_symlink()  # the host sees the planted link
            # What a proxy kernel does when it (re)attaches, then connects its relay.
            with pytest.raises(SocketReplacedError, match="kernel-1 is a symlink") as refused:
                await manager.attach("alice", sandbox.sandbox_id)
            relay = Relay({"key": "frontend"})
            with pytest.raises(SocketReplacedError, match="kernel-1 is a symlink"):
                relay.connect_sandbox(sandbox.connection_info)
            await relay.close()
            with pytest.raises(BlockingIOError):
                decoy.accept()  # nobody connected to the link's target
    observe(
        f"reattaching and relaying both refused ({refused.value.code}: io/kernel-1 is a "
        "symlink, not a socket); the link's target, a listening host socket, saw no connection"
    )

"""A kernel's JUPYTER_SANDBOX_NETWORK: the sandbox's policy, stated in the banner."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernel.kernels import run, running_kernel
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env
from tests.sandbox.network.servers import RecordingServer, recording_server

pytestmark = pytest.mark.integration


@pytest.fixture
def env(purpose: str) -> Iterator[Path]:
    with sandbox_kernel_env(purpose, runtime="runc") as state_dir:
        config = Path(os.environ["JUPYTER_CONFIG_DIR"]) / "jupyter_sandbox_config.py"
        with config.open("a") as f:  # the kernel's half of the test-only network settings
            f.write("c.NetworkSettings.allow_loopback_for_tests = True\n")
            f.write("c.NetworkSettings.test_host_addresses = {'allowed.test': '127.0.0.1'}\n")
        yield state_dir


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.1") as s:
        yield s


def proxies_of(state_dir: Path) -> list[str]:
    """Host proxy processes serving sandboxes of ``state_dir``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        ours = any(str(state_dir).encode() in part for part in cmdline)
        if b"jupyter_sandbox.sandbox.network" in cmdline and ours and "State:\tZ" not in state:
            found.append(pid)
    return found


def test_network_variable_sets_the_policy_and_the_banner_states_it(
    env: Path, server: RecordingServer
) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_NETWORK="allowed.test") as (_, kc):
        banner = kc.kernel_info(reply=True)["content"]["banner"]
        assert "network: allowlist (allowed.test) through the host proxy" in banner
        out, reply = run(
            kc,
            "import urllib.request\n"
            f"print(urllib.request.urlopen('http://allowed.test:{server.port}/').read().decode())",
        )
        assert reply["status"] == "ok", out
        assert out == "hello from the test server\n\n"
        assert len(proxies_of(env)) == 1
    # The kernel's own sandbox went with it, and so did its host proxy.
    deadline = time.monotonic() + 30
    while proxies_of(env) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proxies_of(env) == []


def test_without_the_variable_the_banner_says_none(env: Path) -> None:
    with running_kernel(notebook_dir(env)) as (_, kc):
        banner = kc.kernel_info(reply=True)["content"]["banner"]
    assert "network: none;" in banner


def test_a_bad_network_variable_is_refused_with_a_message(env: Path) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_NETWORK="pypi.org,*.com") as (_, kc):
        out, reply = run(kc, "1")
    assert reply["status"] == "error"
    assert "'*.com' names a whole top-level domain" in out
    assert containers_under(env) == []

"""The hub the tests of tests/hub/ share (one for the module: its users' servers take seconds to
start), and the ends of the hub's and the servers' logs added to a failing test's report (whole,
they are in test-artifacts/hub/)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.hub.hub_process import (
    ARTIFACTS,
    PROXY,
    SANDBOX_CONFIG,
    SYSTEM_PYTHON,
    VENV,
    Hub,
    free_ports,
    hub_config,
    make_user,
    remove_user,
    stop_hub,
    stop_servers,
    wait_for_servers,
    wait_until_up,
)

# The browser of the Lab tests, for the Sandboxes panel of a gateway-backed server.
from tests.labextension.conftest import page  # noqa: F401

LOG_TAILS = pytest.StashKey[Callable[[], str]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and LOG_TAILS in item.stash:
        report.sections.append(
            ("hub and servers' logs (test-artifacts/hub/)", item.stash[LOG_TAILS]())
        )
    return report


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    for needed, how in [
        (SYSTEM_PYTHON, "the users' servers run under it"),
        (PROXY, "the hub's proxy: 'make hub-proxy' installs it (part of 'make test')"),
    ]:
        if not needed.exists():
            pytest.fail(f"{needed} is missing: {how}", pytrace=False)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.log"):
        old.unlink()
    with contextlib.ExitStack() as cleanup:
        users = {}
        for role in ("alice", "bob"):
            users[role] = make_user(role)
            cleanup.callback(remove_user, users[role], role)
        # Readable by the users: the test's jupyter_sandbox_config.py. Root's alone: the hub's.
        base = Path(tempfile.mkdtemp(prefix="jsbx-hub-", dir="/tmp"))
        cleanup.callback(shutil.rmtree, base, ignore_errors=True)
        base.chmod(0o755)
        config_dir, hub_dir = base / "config", base / "hub"
        config_dir.mkdir(mode=0o755)
        hub_dir.mkdir(mode=0o700)
        (config_dir / "jupyter_sandbox_config.py").write_text(SANDBOX_CONFIG)
        (config_dir / "jupyter_sandbox_config.py").chmod(0o644)
        ports = free_ports(3)
        (hub_dir / "jupyterhub_config.py").write_text(
            hub_config(ports, hub_dir, config_dir, list(users.values()))
        )

        hub = Hub(
            url=f"http://127.0.0.1:{ports[2]}",
            admin_token=secrets.token_hex(32),
            users=users,
            log_path=ARTIFACTS / "hub.log",
        )
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV"))
        }
        env.update(
            PATH=f"{VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin", HUB_TEST_TOKEN=hub.admin_token
        )
        with hub.log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(hub_dir / "jupyterhub_config.py")],
                cwd=hub_dir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proxy_pid: list[int] = []
        cleanup.callback(lambda: stop_hub(process, proxy_pid[0] if proxy_pid else None))
        wait_until_up(hub, process, ports[0])
        with contextlib.suppress(OSError, ValueError):
            proxy_pid.append(int((hub_dir / "jupyterhub-proxy.pid").read_text()))

        cleanup.callback(stop_servers, hub)
        # Both at once: the hub answers a spawn's request when the server is up (or after 10 s).
        with ThreadPoolExecutor() as pool:
            spawns = pool.map(
                lambda name: hub.hub_api("POST", f"users/{name}/server"), users.values()
            )
            for status, answer in spawns:
                assert status in (201, 202), f"{answer}\n{hub.log_tails()}"
        for name in users.values():
            status, answer = hub.hub_api(
                "POST", f"users/{name}/tokens", {"note": "tests/hub", "expires_in": 3600}
            )
            assert status == 201, f"{answer}\n{hub.log_tails()}"
            hub.tokens[name] = answer["token"]
        wait_for_servers(hub, ready=True)
        yield hub


@pytest.fixture(autouse=True)
def report_logs(request: pytest.FixtureRequest, hub: Hub) -> None:
    """A failing test's report ends with the hub's and the servers' logs."""
    request.node.stash[LOG_TAILS] = hub.log_tails

"""A real JupyterLab server for browser tests, on 127.0.0.1, with everything private to the test.

The server and the kernels it starts read one jupyter_sandbox_config.py in a private config
directory (a private state directory, runc, no warm pool); containers carry the test's purpose
label. Lab loads this checkout's built extension (jupyter_sandbox/labextension): it is linked
into a private data directory, which Lab is told to search before the installed copies.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import remove_state_dir
from tests.kernel.sandbox_env import remove_containers_under

REPO = Path(__file__).parents[2]
BUILT_EXTENSION = REPO / "jupyter_sandbox" / "labextension"
KERNELSPEC = REPO / "kernelspec" / "sandboxed-python"
START_TIMEOUT = 90.0  # seconds for the server to answer (a loaded 2-core CI machine)
PORT_ATTEMPTS = 3  # ports tried for one server


@dataclass
class LabServer:
    url: str
    token: str
    root_dir: Path
    state_dir: Path
    log_path: Path

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Call the server's REST API; (status, decoded JSON or None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/{path}",
            data=data if data is not None else (b"" if method in ("POST", "PUT") else None),
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read().decode()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            text = error.read().decode()
            try:
                return error.code, json.loads(text)
            except ValueError:
                return error.code, text

    @property
    def data_dir(self) -> Path:
        """The server's JUPYTER_DATA_DIR (kernelspecs, the notebook notary's database)."""
        return self.root_dir.with_name("data")

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def lab_server(
    purpose: str,
    refresh_interval: float = 1.0,
    keep_log: Path | None = None,
    environment: dict[str, str] | None = None,
    settings: dict[str, Any] | None = None,
    config: str = "",
) -> Iterator[LabServer]:
    """``keep_log``: where to copy the server's log when it stops; ``environment``: more
    variables for the server and its kernels; ``settings``: more of the extension's user
    settings (schema/plugin.json); ``config``: more lines of jupyter_sandbox_config.py."""
    if not (BUILT_EXTENSION / "package.json").exists():
        raise RuntimeError(
            f"the JupyterLab extension is not built ({BUILT_EXTENSION} is missing): "
            "'make install' (or 'pip install -e .') builds it; so does "
            "'cd labextension && npm install && npm run build:prod'"
        )
    base = Path(tempfile.mkdtemp(prefix="jsbx-lab-", dir="/tmp"))
    try:  # until the server runs, a failure here removes what was made
        state_dir = base / "state"
        root_dir, config_dir, data_dir = base / "root", base / "config", base / "data"
        for path in (
            state_dir,
            root_dir,
            config_dir,
            data_dir / "labextensions",
            data_dir / "kernels",
        ):
            path.mkdir(parents=True)
        (config_dir / "jupyter_sandbox_config.py").write_text(
            f"c.SandboxSettings.state_dir = {str(state_dir)!r}\n"
            "c.SandboxSettings.runtime = 'runc'\n"
            "c.WarmPool.size = 0\n"
            f"c.SandboxExtension.container_purpose = {purpose!r}\n"
            "c.SandboxCuller.interval = 3600.0\n" + config
        )
        # No news prompt over the page; the panel refreshes every `refresh_interval` seconds.
        (config_dir / "labconfig").mkdir()
        (config_dir / "labconfig" / "page_config.json").write_text(
            json.dumps(
                {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}
            )
        )
        user_settings = {
            "jupyter-sandbox": {"refreshInterval": refresh_interval, **(settings or {})},
            # A new notebook saves under its name at once, as for a user who ticked "Do not ask
            # for rename on first save": Lab's prompt is no test's subject, and a save behind it
            # renames.
            "@jupyterlab/docmanager-extension": {"renameUntitledFileOnSave": False},
        }
        for extension, values in user_settings.items():
            settings_dir = config_dir / "lab" / "user-settings" / extension
            settings_dir.mkdir(parents=True)
            (settings_dir / "plugin.jupyterlab-settings").write_text(json.dumps(values))
        (data_dir / "labextensions" / "jupyter-sandbox").symlink_to(BUILT_EXTENSION)
        shutil.copytree(KERNELSPEC, data_dir / "kernels" / KERNELSPEC.name)

        token = secrets.token_hex(16)
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(config_dir),
            JUPYTER_DATA_DIR=str(data_dir),
            JUPYTER_RUNTIME_DIR=str(data_dir / "runtime"),
            JUPYTER_SANDBOX_PURPOSE=purpose,
            # Lab loads the first copy of an extension on its data path, and in a virtualenv
            # jupyter_core puts the environment's (what `pip install` left there, however old)
            # before JUPYTER_DATA_DIR unless told otherwise: user paths first, so the private data
            # directory, with this checkout's build, wins.
            JUPYTER_PREFER_ENV_PATH="0",
            # The kernels import this checkout, as the server does.
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        )
        env.pop("JUPYTER_PATH", None)
        env.update(environment or {})
        log_path = base / "server.log"
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            "--ServerApp.port_retries=0",  # another port would not be the one polled
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root_dir}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if os.getuid() == 0:
            command.append("--allow-root")
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    process = None
    try:
        server, process = _start(command, env, token, root_dir, state_dir, log_path)
        yield server
    finally:
        if process is not None:
            _stop(process)
        if keep_log is not None:
            keep_log.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log_path, keep_log)
        remove_containers_under(state_dir)
        remove_state_dir(state_dir)
        shutil.rmtree(base, ignore_errors=True)


def _start(
    command: list[str],
    env: dict[str, str],
    token: str,
    root_dir: Path,
    state_dir: Path,
    log_path: Path,
) -> tuple[LabServer, subprocess.Popen[bytes]]:
    """Start Lab on a free port and wait until it answers. A port taken between its choice and
    the server's bind (a kernel's ZMQ socket, on another test's worker) is chosen again."""
    for _ in range(PORT_ATTEMPTS):
        port = _free_port()
        server = LabServer(f"http://127.0.0.1:{port}", token, root_dir, state_dir, log_path)
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [*command, f"--port={port}"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            _wait_until_up(server, process)
        except PortTakenError:
            continue
        except BaseException:
            _stop(process)
            raise
        return server, process
    raise RuntimeError(f"no free port for jupyter lab in {PORT_ATTEMPTS} tries")


class PortTakenError(RuntimeError):
    """The port chosen for Lab was taken before Lab bound it; Lab exited."""


def _wait_until_up(server: LabServer, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            if "is already in use" in server.log_tail():
                raise PortTakenError(server.log_tail())
            raise RuntimeError(f"jupyter lab exited ({process.returncode}):\n{server.log_tail()}")
        try:
            status, _ = server.api("GET", "api/sandboxes")
            if status in (200, 503):  # 503: up, without an engine (a test of that case)
                return
        except (OSError, http.client.HTTPException):  # not up yet; the port's other holder
            pass
        time.sleep(0.2)  # polling for readiness, not waiting a fixed time
    raise RuntimeError(f"jupyter lab did not answer in {START_TIMEOUT:g}s:\n{server.log_tail()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM: the server shuts its kernels down (their ephemeral sandboxes go with them)."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

"""An isolated environment for proxy kernels started by jupyter_client in tests.

The kernel process reads jupyter_sandbox_config.py like any deployment would: the tests point
JUPYTER_CONFIG_DIR at a private directory whose config names a private state directory, and
label every container with the test's purpose. Everything created there is removed afterwards.
"""

from __future__ import annotations

import getpass
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docker
import docker.errors

from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.docker.removal import NOT_REAPED_YET, REMOVAL_IN_PROGRESS
from jupyter_sandbox.sandbox.lifecycle.pool_keeper import stop_keeper
from tests.conftest import remove_state_dir


@contextmanager
def sandbox_kernel_env(
    purpose: str,
    *,
    headless_pool: bool = False,
    idle_timeout: float = 600.0,
    default_place: bool = False,
    **settings: Any,
) -> Iterator[Path]:
    """Yield the state directory; the environment variables apply until the block ends.
    ``headless_pool``: let kernels start the headless warm pool (sandbox/lifecycle/pool_keeper.py),
    which the block's end then stops, and which ends by itself after ``idle_timeout`` s.
    ``default_place``: the state directory is where SandboxSettings.state_dir's default puts
    it, ``$JUPYTER_RUNTIME_DIR/sandboxes`` (the variable set for the block to a directory of
    the test's own), where the kernelspec's launcher looks for the headless pool's zygote.

    Kernels should be started with ``cwd=notebook_dir(state_dir)``: a small directory, as a
    notebook's usually is (jedi scans the launch directory on first completion).
    """
    runtime_dir: Path | None = None
    if default_place:
        runtime_dir = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
        state_dir = runtime_dir / "sandboxes"
        state_dir.mkdir(mode=0o700)
    else:
        state_dir = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    config_dir = Path(tempfile.mkdtemp(prefix="jsbx-config-", dir="/tmp"))
    notebook_dir(state_dir).mkdir()
    # No headless warm pool (pool_keeper.py) unless a test asks for one: its sandboxes would
    # outlive the test's kernels.
    lines = [
        f"c.SandboxSettings.state_dir = {str(state_dir)!r}",
        f"c.HeadlessPool.enabled = {headless_pool!r}",
        f"c.HeadlessPool.idle_timeout = {idle_timeout!r}",
        # The owners' credentials the proxies read: the test's own, never the user's data dir.
        f"c.NetworkSettings.credentials_dir = {str(credentials_dir(state_dir))!r}",
    ]
    lines += [f"c.SandboxSettings.{name} = {value!r}" for name, value in settings.items()]
    (config_dir / "jupyter_sandbox_config.py").write_text("\n".join(lines) + "\n")
    saved = dict(os.environ)
    os.environ.update(JUPYTER_CONFIG_DIR=str(config_dir), JUPYTER_SANDBOX_PURPOSE=purpose)
    if runtime_dir is not None:
        os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime_dir)
    try:
        yield state_dir
    finally:
        os.environ.clear()
        os.environ.update(saved)
        try:
            stop_keeper(state_dir, getpass.getuser())  # before the sandboxes, or it refills
            remove_containers_under(state_dir)
        finally:  # the directories go even when a container could not
            remove_state_dir(state_dir)
            shutil.rmtree(config_dir, ignore_errors=True)
            shutil.rmtree(credentials_dir(state_dir), ignore_errors=True)
        shutil.rmtree(notebook_dir(state_dir), ignore_errors=True)
        if runtime_dir is not None:  # connection files jupyter_client wrote there too
            shutil.rmtree(runtime_dir, ignore_errors=True)


def credentials_dir(state_dir: Path) -> Path:
    """The credentials directory beside the state directory (NetworkSettings.credentials_dir)."""
    return state_dir.with_name(state_dir.name + "-credentials")


def notebook_dir(state_dir: Path) -> Path:
    """A directory beside the state directory standing for the notebook's own."""
    return state_dir.with_name(state_dir.name + "-notebook")


def containers_under(state_dir: Path) -> list[Any]:
    """The containers of sandboxes whose host directory lies in ``state_dir``; one removed
    between the listing and its inspection (a pool draining meanwhile) is left out."""
    client = docker.from_env(version="auto")
    found = []
    for row in client.api.containers(all=True, filters={"label": labels.HOST_DIR}):
        if Path(row["Labels"][labels.HOST_DIR]).parent != state_dir:
            continue
        try:
            found.append(client.containers.get(row["Id"]))
        except docker.errors.NotFound:
            continue
    return found


def remove_containers_under(state_dir: Path) -> None:
    for container in containers_under(state_dir):
        remove_container(container)


def remove_container(container: Any, wait: float = 30.0) -> None:
    """Remove ``container``, asking again while the engine can only say "not yet" (as
    backends/docker/removal.py does): a container whose first process exited as it was removed
    is refused until its shim has reaped it ("is zombie"), a removal already on its way too."""
    deadline = time.monotonic() + wait
    while True:
        try:
            container.remove(force=True, v=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            transient = any(w in str(exc) for w in (NOT_REAPED_YET, REMOVAL_IN_PROGRESS))
            if not transient or time.monotonic() > deadline:
                raise
        time.sleep(0.5)

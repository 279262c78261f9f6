"""A real Jupyter server with the extension, on pytest-jupyter's fixtures, on a real engine.

pytest-jupyter runs its server on a loop of its own (``jp_asyncio_loop``) and brings its own
coroutine-test hooks; this suite runs coroutines with pytest-asyncio. Importing only the
fixtures (no hooks) and handing pytest-jupyter pytest-asyncio's loop lets both share one loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_jupyter.jupyter_core import (  # noqa: F401  (fixtures, used by name)
    jp_config_dir,
    jp_data_dir,
    jp_env_config_path,
    jp_env_jupyter_path,
    jp_environ,
    jp_home_dir,
    jp_runtime_dir,
    jp_system_config_path,
    jp_system_jupyter_path,
)
from pytest_jupyter.jupyter_server import (  # noqa: F401
    echo_kernel_spec,
    http_server,
    http_server_client,
    http_server_port,
    jp_argv,
    jp_auth_header,
    jp_base_url,
    jp_configurable_serverapp,
    jp_extension_environ,
    jp_fetch,
    jp_http_port,
    jp_kernel_dir,
    jp_logging_stream,
    jp_nbconvert_templates,
    jp_root_dir,
    jp_server_cleanup,
    jp_serverapp,
    jp_template_dir,
    jp_web_app,
    jp_ws_fetch,
)
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.server_extension import SandboxExtension
from tests.conftest import manager_config, remove_everything_under
from tests.server_extension.openapi_check import EVENT_STREAM, check_response, parse_events

EXTENSION = "jupyter_sandbox.server_extension"
KERNELSPEC = Path(__file__).parents[2] / "kernelspec" / "sandboxed-python"

Fetch = Callable[..., Awaitable[HTTPResponse]]


@pytest.fixture
def jp_asyncio_loop(_function_scoped_runner: asyncio.Runner) -> Iterator[asyncio.AbstractEventLoop]:
    """pytest-jupyter's loop is pytest-asyncio's: the server runs where the tests await."""
    return _function_scoped_runner.get_loop()


@pytest.fixture
def jp_server_config(state_dir: Path, purpose: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {EXTENSION: True}},
        "SandboxSettings": {"state_dir": str(state_dir), "runtime": "runc"},
        # The test's own credentials store, removed with tmp_path (never the user's data dir).
        "NetworkSettings": {"credentials_dir": str(tmp_path / "credentials")},
        "SandboxExtension": {"container_purpose": purpose},
        # Culling runs on demand in these tests, not on a timer; the pool only where tested.
        "SandboxCuller": {"interval": 3600.0},
        "WarmPool": {"size": 0},
    }


@pytest.fixture(autouse=True)
async def remove_what_the_test_made(state_dir: Path) -> AsyncIterator[None]:
    yield
    manager = SandboxManager.from_config(manager_config(state_dir))
    await remove_everything_under(manager, state_dir)
    await manager.close()


@pytest.fixture
def kernel_env(
    jp_environ: None,
    jp_config_dir: Path,
    jp_data_dir: Path,
    state_dir: Path,
    purpose: str,
    monkeypatch: pytest.MonkeyPatch,
    jp_server_config: dict[str, Any],
) -> dict[str, str]:
    """Environment in which Sandboxed Python kernels, started by the server or by
    jupyter_client, share the server's state directory (through jupyter_sandbox_config.py)."""
    # The kernels' half of the server's configuration (they read only this file).
    lines = [
        f"c.{section}.{name} = {value!r}"
        for section in ("SandboxSettings", "SandboxQuotas", "WarmPool")
        for name, value in jp_server_config.get(section, {}).items()
    ]
    (jp_config_dir / "jupyter_sandbox_config.py").write_text("\n".join(lines) + "\n")
    shutil.copytree(KERNELSPEC, jp_data_dir / "kernels" / KERNELSPEC.name)
    monkeypatch.setenv("JUPYTER_SANDBOX_PURPOSE", purpose)
    return dict(os.environ)


@pytest.fixture
def extension(jp_serverapp: Any) -> SandboxExtension:
    app: SandboxExtension = jp_serverapp.web_app.settings["sandbox_extension"]
    return app


@pytest.fixture
def server_url(
    jp_serverapp: Any,
    http_server_client: Any,  # what makes the server listen on jp_http_port
    jp_http_port: int,
    jp_base_url: str,
) -> str:
    """The server's URL on 127.0.0.1, for clients over real HTTP (the examples, the client)."""
    return f"http://127.0.0.1:{jp_http_port}{jp_base_url}"


async def api(
    fetch: Fetch,
    method: str,
    *path: str,
    body: Any = None,
    root: str = "sandboxes",
    **kwargs: Any,
) -> tuple[int, Any]:
    """Call the API under /api/``root``; return (status, decoded JSON or None) for success and
    errors alike; a text/event-stream answer (read whole) as its list of (name, data) events."""
    if body is not None and not isinstance(body, (str, bytes)):
        body = json.dumps(body)
    if method in ("POST", "PUT", "PATCH") and body is None:
        body = ""
    try:
        response = await fetch("api", root, *path, method=method, body=body, **kwargs)
    except HTTPClientError as error:
        response = error.response
        assert response is not None
    text = response.body.decode() if response.body else ""
    content_type = response.headers.get("Content-Type", "").partition(";")[0]
    if content_type == EVENT_STREAM:
        decoded: Any = parse_events(text)
    else:
        content_type = "application/json"
        decoded = json.loads(text) if text else None
    if response.code != 403:  # 403 from jupyter_server's auth layer is not ours to describe
        where = "/" + "/".join(("api", root, *path))
        check_response(where, method, response.code, decoded, content_type)
    return response.code, decoded

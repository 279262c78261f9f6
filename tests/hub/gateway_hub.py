"""The hub of tests/hub/test_gateway.py: examples/jupyterhub_gateway_config.py with the test's
ports, paths and logins, the sandbox gateway as its service (root's, the one holder of the
engine), and two fresh system users who are not in the docker group."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from tests.hub.hub_process import PURPOSE, REPO, SERVER_LOG, SERVER_START, SYSTEM_PYTHON, VENV

EXAMPLE = REPO / "examples" / "jupyterhub_gateway_config.py"
SERVICE = "sandbox-gateway"
GATEWAY_LOG = "gateway.log"  # in the hub's directory, then test-artifacts/hub/
KERNEL_LAUNCH_TIMEOUT = 90  # seconds the users' servers wait for the gateway's kernel start
CONTEXT_VARIABLE = "KERNEL_SANDBOX_CONTEXT"
CONTEXT_OPTION = "sandbox_context"  # the user option a test starts a server with to name one
KERNELS_PER_USER = 3  # SandboxGateway.max_kernels_per_user: more than any other test starts

# The users' servers hold no engine: nothing of theirs starts sandboxes.
USER_SANDBOX_CONFIG = """\
c.WarmPool.size = 0
c.SandboxCuller.interval = 3600.0
c.SandboxExtension.fast_kernel_start = False
"""


def gateway_sandbox_config(gateway_state: Path) -> str:
    """The gateway's jupyter_sandbox_config.py, which its kernels read too."""
    return f"""\
c.SandboxSettings.state_dir = {str(gateway_state)!r}
c.NetworkSettings.credentials_dir = {str(gateway_state.with_name("gw-credentials"))!r}
c.SandboxSettings.runtime = "runc"
c.SandboxExtension.container_purpose = {PURPOSE!r}
c.SandboxCuller.interval = 3600.0
c.UserPools.size = 1  # the default: a warm sandbox per active user (pools.py)
c.WarmPool.max_keys = 0  # and none for other requests, which would only add containers here
c.WarmPool.refill_interval = 0.5
"""


def gateway_hub_config(
    ports: list[int],
    hub_dir: Path,
    config_dir: Path,
    gateway_config: Path,
    gateway_state: Path,
    users: list[str],
) -> str:
    """examples/jupyterhub_gateway_config.py, then what the test changes."""
    hub_port, api_port, proxy_port, gateway_port = ports
    server_environment = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]]),
        "JUPYTER_PATH": str(VENV / "share" / "jupyter"),
        "JUPYTERLAB_DIR": str(VENV / "share" / "jupyter" / "lab"),
        "JUPYTER_CONFIG_PATH": os.pathsep.join([str(config_dir), str(VENV / "etc" / "jupyter")]),
        "JUPYTER_GATEWAY_URL": f"http://127.0.0.1:{proxy_port}/services/{SERVICE}",
        "KERNEL_LAUNCH_TIMEOUT": str(KERNEL_LAUNCH_TIMEOUT),
        "KERNEL_SANDBOX_RUNTIME": "runc",  # a choice passed from the user's side
    }
    gateway_environment = {
        "PATH": f"{VENV / 'bin'}:/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "JUPYTER_SANDBOX_PURPOSE": PURPOSE,  # the kernels' containers' label
        "JUPYTER_CONFIG_DIR": str(gateway_config),  # not root's own
        "JUPYTER_CONFIG_PATH": str(VENV / "etc" / "jupyter"),
    }
    gateway_command = [
        sys.executable,
        "-m",
        "jupyter_sandbox.cli",
        "gateway",
        "--SandboxGateway.user_root=/home/{username}",
        f"--SandboxGateway.max_kernels_per_user={KERNELS_PER_USER}",
    ]
    command = ["/bin/sh", "-c", f'exec "$@" >>"$HOME/{SERVER_LOG}" 2>&1', "sh"]
    command += [str(SYSTEM_PYTHON), "-m", "jupyterhub.singleuser"]
    gateway_log = hub_dir / GATEWAY_LOG
    return f"""\
import os

assert os.path.exists({str(EXAMPLE)!r})  # load_subconfig passes over a missing file silently
load_subconfig({str(EXAMPLE)!r})

c.JupyterHub.bind_url = "http://127.0.0.1:{proxy_port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.JupyterHub.db_url = "sqlite:///{hub_dir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{hub_dir}/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = "{hub_dir}/jupyterhub-proxy.pid"

c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {set(users)!r}

(gateway,) = c.JupyterHub.services
assert gateway["name"] == {SERVICE!r}
gateway["url"] = "http://127.0.0.1:{gateway_port}"
gateway["command"] = ["/bin/sh", "-c", 'exec "$@" >>{gateway_log} 2>&1', "sh", *{gateway_command!r}]
gateway["environment"] = {gateway_environment!r}
c.JupyterHub.services.append({{"name": "hub-test", "api_token": os.environ["HUB_TEST_TOKEN"]}})
c.JupyterHub.load_roles.append({{"name": "admin", "services": ["hub-test"]}})
(gateway_admins,) = [r for r in c.JupyterHub.load_roles if r["name"] == "sandbox-gateway-admin"]
gateway_admins["services"] = ["hub-test"]

c.Spawner.cmd = {command!r}
c.Spawner.environment.update({server_environment!r})
# A named context chosen per start of a server (POST .../server {{"user_options": …}}), as a
# user's server environment passes it: KERNEL_* variables are what GatewayClient forwards.
c.Spawner.environment[{CONTEXT_VARIABLE!r}] = lambda spawner: str(
    spawner.user_options.get({CONTEXT_OPTION!r}, "")
)
c.Spawner.start_timeout = {int(SERVER_START)}
c.Spawner.http_timeout = {int(SERVER_START)}
"""

"""A JupyterHub on one host whose users get Sandboxed Python without holding the container engine.

One process holds the Docker engine: the sandbox gateway (`jupyter sandbox gateway`), run by the
hub as a service, as root (or a user in the docker group). The users' single-user servers run as
their system users, who are NOT in the docker group: their kernels are the gateway's, reached
through Jupyter Server's gateway client (GatewayClient.url), with the server's own hub token.

    python3 -m pip wheel --no-deps -w dist .  # in a clone; needs Node.js 20 with npm
    python3 -m venv /opt/jupyter
    /opt/jupyter/bin/pip install jupyterhub jupyterlab "$(ls dist/jupyter_sandbox-*.whl)[gateway]"
    npm install --global --prefix /opt/jupyter configurable-http-proxy  # the hub's proxy
    /opt/jupyter/bin/jupyter sandbox build-image                         # once, as root
    mkdir -m 700 /srv/jupyterhub /srv/sandbox-gateway /srv/sandbox-gateway/config
    echo 'c.SandboxSettings.state_dir = "/srv/sandbox-gateway/state"' \
        > /srv/sandbox-gateway/config/jupyter_sandbox_config.py
    /opt/jupyter/bin/jupyterhub -f jupyterhub_gateway_config.py          # as root

Who owns what: the gateway asks the hub about the token of every request (JupyterHub's service
auth, scope access:services!service=sandbox-gateway) and the hub user of that token owns every
kernel and sandbox the request makes; another user's kernel or sandbox is a 404 to it. Nothing
the user's server sends (KERNEL_USERNAME, headers) names another owner.

Files: a kernel's working directory (the notebook's directory, which the gateway client sends as
KERNEL_WORKING_DIR) is the sandbox's /workspace (copy-on-write by default) when it is inside the
user's root, SandboxGateway.user_root ("/home/{username}"); anything else, symbolic links
followed, is refused with a message.

Kernel choices: a user's server passes them as KERNEL_SANDBOX_CONTEXT, _RUNTIME, _IMAGE,
_NETWORK and _LIMITS (the JUPYTER_SANDBOX_* variables of a kernel on the host), which the gateway
checks against its settings and the user's quotas.

tests/hub/test_gateway.py runs this file with a real hub and two fresh system users.
"""

import os
import sys

c = get_config()  # noqa: F821  (JupyterHub provides it when it reads this file)

ENV_BIN = os.path.join(sys.prefix, "bin")  # the environment the hub runs from: /opt/jupyter/bin
STATE = "/srv/jupyterhub"  # the hub's database, cookie secret and proxy pid: root's, 0700
# The gateway's settings: its jupyter_sandbox_config.py, which its kernels read too (so its
# SandboxSettings go there, not on its command line), with the state directory that holds every
# sandbox's host directory and sockets (0700, root's).
GATEWAY_CONFIG = "/srv/sandbox-gateway/config"
GATEWAY_PORT = 8890  # on 127.0.0.1; users reach it through the hub's proxy

c.JupyterHub.bind_url = "http://127.0.0.1:8000"
c.JupyterHub.db_url = f"sqlite:///{STATE}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{STATE}/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = f"{STATE}/jupyterhub-proxy.pid"
c.ConfigurableHTTPProxy.command = [os.path.join(ENV_BIN, "configurable-http-proxy")]
c.JupyterHub.authenticator_class = "pam"

# The gateway: the one holder of the engine, started and stopped with the hub.
c.JupyterHub.services = [
    {
        "name": "sandbox-gateway",
        "url": f"http://127.0.0.1:{GATEWAY_PORT}",
        "command": [
            os.path.join(ENV_BIN, "jupyter"),
            "sandbox",
            "gateway",
            "--SandboxGateway.user_root=/home/{username}",
        ],
        "environment": {"JUPYTER_CONFIG_DIR": GATEWAY_CONFIG},
        "display": False,
    }
]

# Users may use the gateway, and so may the token the hub gives each user's server (the
# subset of these scopes the user holds).
c.JupyterHub.load_roles = [
    {"name": "user", "scopes": ["self", "access:services!service=sandbox-gateway"]}
]
# Admin access at the gateway is explicit: whoever holds this scope (none here: add admins'
# names, or services, to the role) may act as a user by sending "Sandbox-Act-As: <user>", and
# the gateway logs every such request.
c.JupyterHub.custom_scopes = {
    "custom:sandbox-gateway:admin": {"description": "Act as any user at the sandbox gateway."}
}
c.JupyterHub.load_roles.append(
    {"name": "sandbox-gateway-admin", "scopes": ["custom:sandbox-gateway:admin"], "users": []}
)
c.Spawner.server_token_scopes = [
    "users:activity!user",
    "access:servers!server",
    "access:services!service=sandbox-gateway",
]

# Each user's server: a process of that user, not in the docker group, whose kernels are the
# gateway's, reached through the hub's proxy with the server's own hub token.
c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
c.Spawner.cmd = [os.path.join(ENV_BIN, "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.disable_user_config = True
c.Spawner.environment = {
    # Through the hub's proxy. The gateway's own address, f"http://127.0.0.1:{GATEWAY_PORT}"
    # + "/services/sandbox-gateway", works as well (the gateway checks every request's hub
    # token itself) and saves the proxy's hop, under 1 ms an execution
    # (docs/explanation/performance.md, "Kernel start and execute through the gateway").
    "JUPYTER_GATEWAY_URL": "http://127.0.0.1:8000/services/sandbox-gateway",
    "JUPYTER_GATEWAY_AUTH_TOKEN": lambda spawner: spawner.api_token,
}
c.Spawner.args = [
    # The gateway's kernel is the default from the first request on (the server learns the
    # gateway's default only after answering its first kernelspec listing).
    "--MappingKernelManager.default_kernel_name=sandboxed-python",
    # No terminals: a host shell is still the user's own (no engine), but nothing needs it.
    "--ServerApp.terminals_enabled=False",
]

"""A JupyterHub on one host whose users run Sandboxed Python.

Each hub user is a system user (PAM login) whose single-user server the hub starts as that user
(LocalProcessSpawner): JupyterLab with jupyter-sandbox's server extension, and Sandboxed Python
as its only kernel. One environment, readable and runnable by every user (not under /root),
holds everything:

    python3 -m venv /opt/jupyter
    /opt/jupyter/bin/pip install jupyterhub jupyterlab ./jupyter_sandbox-*.whl
    npm install --global --prefix /opt/jupyter configurable-http-proxy  # the hub's proxy
    /opt/jupyter/bin/jupyter sandbox build-image                         # once, as root
    usermod -aG docker alice                                             # each user (below)
    mkdir -m 700 /srv/jupyterhub
    /opt/jupyter/bin/jupyterhub -f jupyterhub_config.py                  # as root

Installing jupyter-sandbox there enables its server extension for every server run from that
environment (etc/jupyter/jupyter_server_config.d/jupyter_sandbox.json) and installs the
sandboxed-python kernelspec (share/jupyter/kernels): nothing to do per user.

Whose sandboxes: the spawner sets JUPYTERHUB_USER in each server's environment, and the
kernels a server starts own their sandboxes as JUPYTERHUB_USER, shown on each container as the
label io.jupyter-sandbox.owner. The server's /api/sandboxes routes act as that same user, its
owner, whoever the hub let the request in as (SandboxExtension.owner_source 'auto'): the hub
has already decided who may use this server (access:servers), and an admin, a user the server
is shared with, or a service uses it as its owner, as with its files and kernels: they see the
owner's sandboxes, and what they create there is the owner's. Users never see each other's
sandboxes through their own servers (another's id is a 404), and the hub refuses them another
user's server unless it grants them access to it.

Where each user's state lives: the sandboxes' host directories, sockets and snapshots under the
user's home, ~/.local/share/jupyter/runtime/sandboxes (0700 at every level); their containers
run as the user's own uid. Settings for all users: a jupyter_sandbox_config.py in
/opt/jupyter/etc/jupyter (or /etc/jupyter). The hub's own state: /srv/jupyterhub, below.

tests/hub/test_jupyterhub.py runs this file with a real hub and two fresh system users.
"""

import os
import sys

c = get_config()  # noqa: F821  (JupyterHub provides it when it reads this file)

ENV_BIN = os.path.join(sys.prefix, "bin")  # the environment the hub runs from: /opt/jupyter/bin
STATE = "/srv/jupyterhub"  # the hub's database, cookie secret and proxy pid: root's, 0700

# Only on this host until TLS is in front of it (a reverse proxy, or c.JupyterHub.ssl_cert/_key).
c.JupyterHub.bind_url = "http://127.0.0.1:8000"
c.JupyterHub.db_url = f"sqlite:///{STATE}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{STATE}/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = f"{STATE}/jupyterhub-proxy.pid"
c.ConfigurableHTTPProxy.command = [os.path.join(ENV_BIN, "configurable-http-proxy")]

# System users, with their passwords. A server starts sandboxes through the Docker engine's
# socket, so its user must be in the docker group: let in exactly those users.
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.allowed_groups = {"docker"}

# Each user's server is a process of that user, from this environment.
c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
c.Spawner.cmd = [os.path.join(ENV_BIN, "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
# Config files under the user's home (~/.jupyter, ...) are Python that the server and its
# kernels run on the host as the user, who is in the docker group: whatever can write a file
# there (Lab cannot, below; a sandbox launched there in workspace_mode 'read-write' can) could
# run code on the host, or relax the sandboxes' isolation. The spawner then sets
# JUPYTERHUB_DISABLE_USER_CONFIG: the server reads no config from the home, nor do its kernels
# read a jupyter_sandbox_config.py from there; settings come from /opt/jupyter/etc/jupyter
# (or /etc/jupyter) alone.
c.Spawner.disable_user_config = True
c.Spawner.args = [
    # Sandboxed Python is the notebook kernel, and the only one: any other kernel runs code on
    # the host as the user, who is in the docker group, i.e. as good as root
    # (docs/how-to/jupyterhub.md, "A server that is not root"). Drop this line to offer the
    # host's kernels too.
    "--KernelSpecManager.allowed_kernelspecs=sandboxed-python",
    "--MappingKernelManager.default_kernel_name=sandboxed-python",
    # No terminals on a shared host: a terminal is a shell on the host, and with the docker
    # group's socket it becomes root. Sandboxes' own terminals (/api/sandboxes/{id}/terminal)
    # stay on: they run inside the sandbox. Keep ContentsManager.allow_hidden off (the
    # default): Lab then cannot write ~/.jupyter or ~/.local, whose Python files the server
    # and kernels would run on the host.
    "--ServerApp.terminals_enabled=False",
]

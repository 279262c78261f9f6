"""What a sandbox container looks like: the hardened spec built from settings and a request.

Pure functions, no engine: the unit tests read every isolation default off the spec, and any
backend maps the same spec to its own engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jupyter_sandbox._version import __version__
from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.base import (
    SANDBOX_IO_DIR,
    WORKSPACE_DIR,
    BindMount,
    ContainerSpec,
    OverlayMount,
)
from jupyter_sandbox.sandbox.host.clock import now_iso
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.labels import container_name
from jupyter_sandbox.sandbox.limits import SandboxLimits
from jupyter_sandbox.sandbox.network.settings import FORWARDER_PORT
from jupyter_sandbox.sandbox.network.tls_ca import TRUST_DIR, TRUST_ENVIRONMENT, TRUST_MOUNT
from jupyter_sandbox.sandbox.settings import SandboxSettings
from jupyter_sandbox.sandbox.workspace.plan import NO_WORKSPACE, WorkspacePlan

PROXY_URL = f"http://127.0.0.1:{FORWARDER_PORT}"
# A shell-style variable name, to be matched whole (fullmatch: "$" would let a final newline
# by); a sandbox's own variables' names have at most MAX_ENV_NAME characters.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_ENV_NAME = 128
# The fixed part of every sandbox's environment; the image adds PATH and LANG. Nothing of the
# host's environment is ever passed in.
BASE_ENVIRONMENT = {
    "HOME": WORKSPACE_DIR,
    "IPYTHONDIR": "/tmp/.ipython",
    "MPLCONFIGDIR": "/tmp/.matplotlib",
    "JUPYTER_RUNTIME_DIR": "/tmp/.jupyter",
    "PYTHONUNBUFFERED": "1",
    # Egress goes through the forwarder on the sandbox's loopback (network/forwarder.py), in
    # every sandbox: so a policy changed on a live sandbox applies to its running kernel. Under
    # the policy none nothing listens there, or the forwarder answers 403.
    **{name: PROXY_URL for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")},
    "PIP_PROXY": PROXY_URL,
    "NO_PROXY": "localhost,127.0.0.1,::1",
    "no_proxy": "localhost,127.0.0.1,::1",
    # The sandbox's CA bundle (its image's trust, as the host's, and its own egress CA: the
    # proxy's TLS inspection presents certificates it signed; network/tls_ca.py).
    **TRUST_ENVIRONMENT,
}
# The image's kernel supervisor (images/python/sandbox-init.py): it runs ipykernel with the
# connection file in SANDBOX_IO_DIR and restarts it when the host asks.
KERNEL_COMMAND = ["python", "/opt/sandbox/sandbox-init.py"]
# Where a notebook's own `pip install` puts packages (the image's PIP_PREFIX): a tmpfs of its own
# inside /tmp, because /tmp is noexec and Linux (runc) refuses to map a compiled module (.so)
# from a noexec mount, which is most of what people install. "exec" is spelled out: the engine
# makes a tmpfs noexec unless told. It allows no more than a workspace from a launch directory
# already does (a mount the sandbox writes and may run files from), and is as large as /tmp.
PACKAGES_DIR = "/tmp/.local"


@dataclass(frozen=True)
class SpecRequest:
    """The checked facts of one sandbox that the spec is built from."""

    sandbox_id: str
    owner: str
    runtime: str
    image: str
    limits: SandboxLimits
    environment: dict[str, str]
    purpose: str = ""
    workspace: WorkspacePlan = NO_WORKSPACE


def check_environment(env: dict[str, str]) -> None:
    """Refuse names that are not shell-style identifiers and values that are not strings."""
    for name, value in env.items():
        if not isinstance(name, str) or len(name) > MAX_ENV_NAME or not ENV_NAME.fullmatch(name):
            raise InvalidSettingError(
                f"environment variable name {name!r} is invalid: use letters, digits and _"
            )
        if not isinstance(value, str) or "\0" in value:
            raise InvalidSettingError(f"environment variable {name} must have a string value")


def build_container_spec(
    settings: SandboxSettings, request: SpecRequest, directory: SandboxDirectory
) -> ContainerSpec:
    """The container for ``request``, with every isolation default applied (docs/explanation/design.md)."""
    limits = request.limits
    uid = settings.effective_uid
    ulimits = {"nofile": limits.nofile, "core": 0}
    pids_limit = limits.pids
    if request.runtime == "runsc":
        # gVisor's sentry enforces RLIMIT_NPROC per sandbox (its user namespace is private),
        # while the host pids cgroup also counts gVisor's own threads and must leave room.
        # Under runc, RLIMIT_NPROC would count every sandbox of the same uid host-wide.
        ulimits["nproc"] = limits.pids
        pids_limit = max(settings.runsc_host_pids_limit, limits.pids)
    spec_labels = {
        labels.OWNER: request.owner,
        labels.SANDBOX_ID: request.sandbox_id,
        labels.RUNTIME: request.runtime,
        labels.HOST_DIR: str(directory.root),
        labels.CREATED: now_iso(),
        labels.VERSION: __version__,
    }
    if request.purpose:
        spec_labels[labels.PURPOSE] = request.purpose[:200]
    mounts = [BindMount(str(directory.io), SANDBOX_IO_DIR)]
    if (directory.root / TRUST_DIR).is_dir():  # read-only: what it trusts is the host's choice
        mounts.append(BindMount(str(directory.root / TRUST_DIR), TRUST_MOUNT, read_only=True))
    overlays = []
    tmpfs = {
        "/tmp": f"rw,nosuid,nodev,noexec,size={limits.tmp_bytes}",
        PACKAGES_DIR: f"rw,exec,nosuid,nodev,size={limits.tmp_bytes},uid={uid},gid={uid},mode=0755",
    }
    plan = request.workspace
    if plan.source is None:
        tmpfs[WORKSPACE_DIR] = (
            f"rw,nosuid,nodev,size={limits.workspace_bytes},uid={uid},gid={uid},mode=0700"
        )
    elif plan.mode == "copy-on-write":
        overlays.append(
            OverlayMount(
                lower=plan.source,
                upper=str(directory.overlay_upper),
                work=str(directory.overlay_work),
                target=WORKSPACE_DIR,
            )
        )
    else:
        mounts.append(BindMount(plan.source, WORKSPACE_DIR, read_only=plan.mode == "read-only"))
    return ContainerSpec(
        name=container_name(request.sandbox_id),
        image=request.image,
        runtime=request.runtime,
        command=KERNEL_COMMAND,
        labels=spec_labels,
        user=f"{uid}:{uid}",
        environment=dict(request.environment),
        memory_bytes=limits.memory_bytes,
        cpus=limits.cpus,
        cpu_period_us=settings.cpu_period_ms * 1000,
        pids_limit=pids_limit,
        ulimits=ulimits,
        mounts=mounts,
        overlays=overlays,
        tmpfs=tmpfs,
        read_only_root=settings.read_only_root,
        stop_timeout=settings.stop_timeout,
        log_max_size=settings.log_max_size,
    )

"""What a Sandboxed Python kernel asks of its sandbox, read from its environment.

Jupyter starts a kernel with the server's environment plus its kernelspec's ``env`` (see
``jupyter sandbox install-kernel``) plus what the client adds, so that is where a kernel's
choices live:

==========================  ====================================================================
JUPYTER_SANDBOX_RUNTIME     ``runsc`` (gVisor) or ``runc``; default ``SandboxSettings.runtime``
JUPYTER_SANDBOX_IMAGE       an image ``SandboxSettings.allowed_images`` allows
JUPYTER_SANDBOX_LIMITS      ``memory=4g,cpus=2``: limits of the REST API's ``limits`` object
JUPYTER_SANDBOX_NETWORK     ``none``, ``open``, an allowlist, ``ask[,allowlist]`` (sandbox/network/policy.py)
JPY_SESSION_NAME            the notebook's path, set by Jupyter Server (shown in listings)
JUPYTER_SANDBOX_PURPOSE     a free-form label (the tests name themselves)
JUPYTER_SANDBOX_WORKSPACE_ROOT  a real path the kernel's directory must stay in, which is then
                            opened and mounted as opened (set by the gateway: its user's root)
==========================  ====================================================================

The syntax of each is checked here, when the kernel starts; whether the values are allowed
(images, limits against the owner's quotas, network patterns) is checked by the manager, which
checks REST requests the same way. A context found again keeps what it was made with: a
request that differs is refused (:meth:`KernelRequest.check_found`), never silently ignored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.backends.records import SandboxInfo
from jupyter_sandbox.sandbox.images.reference import image_reference, same_image
from jupyter_sandbox.sandbox.limits import SandboxLimits
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.network import ENV_VAR as NETWORK_ENV_VAR
from jupyter_sandbox.sandbox.network import NetworkPolicy, policy_of_state
from jupyter_sandbox.sandbox.settings import RUNTIMES, SandboxSettings

LIMITS_ENV_VAR = "JUPYTER_SANDBOX_LIMITS"
# The syntax of JUPYTER_SANDBOX_LIMITS, ASCII only; what each value means is checked by the
# limits' own parser (sandbox/limits.py), as for REST's.
MAX_VALUE_LENGTH = 32
MAX_LIMITS_TEXT = 1024
_NAME = re.compile(r"[A-Za-z_]{1,32}", re.ASCII)
_VALUE = re.compile(rf"[A-Za-z0-9. ]{{1,{MAX_VALUE_LENGTH}}}", re.ASCII)
_WHOLE = re.compile(r"[0-9]+", re.ASCII)
WORKSPACE_ROOT_ENV_VAR = "JUPYTER_SANDBOX_WORKSPACE_ROOT"


@dataclass(frozen=True)
class KernelRequest:
    """What one kernel asks for; None: what the settings say."""

    runtime: str | None
    image: str | None
    limits: dict[str, Any] | None  # names and human forms, as REST takes them
    network: str | None  # the text form
    notebook: str = ""
    purpose: str = ""
    workspace_root: str | None = None  # see host/workspace_pin.py

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> KernelRequest:
        """The request of a kernel started with ``environ``; InvalidSettingError names the
        variable whose syntax is wrong."""
        runtime = environ.get("JUPYTER_SANDBOX_RUNTIME") or None
        if runtime is not None and runtime not in RUNTIMES:
            raise InvalidSettingError(
                f"JUPYTER_SANDBOX_RUNTIME must be 'runsc' (gVisor) or 'runc', not {runtime!r}"
            )
        image = environ.get("JUPYTER_SANDBOX_IMAGE") or None
        if image is not None:
            try:
                image = image_reference(image)
            except InvalidSettingError as exc:
                raise InvalidSettingError(f"JUPYTER_SANDBOX_IMAGE: {exc.message}") from None
        return cls(
            runtime=runtime,
            image=image,
            limits=parse_limits(environ.get(LIMITS_ENV_VAR, "")),
            network=environ.get(NETWORK_ENV_VAR) or None,
            notebook=environ.get("JPY_SESSION_NAME", ""),
            purpose=environ.get("JUPYTER_SANDBOX_PURPOSE", ""),
            workspace_root=environ.get(WORKSPACE_ROOT_ENV_VAR) or None,
        )

    @classmethod
    def allowed(cls, environ: Mapping[str, str], settings: SandboxSettings) -> KernelRequest:
        """What ``environ`` asks for, refused (InvalidSettingError) as its kernel would refuse
        it, before any kernel starts: the syntax of each choice, and the image, limits and
        network against what ``settings`` allow. ``jupyter sandbox install-kernel`` checks a
        kernelspec with it, the gateway a kernel's start; quotas are the manager's, when the
        kernel makes its sandbox."""
        request = cls.from_environment(environ)
        if request.image:
            settings.check_image(request.image)
        if request.limits:
            settings.requested_limits(request.limits)
        if request.network:
            NetworkPolicy.from_text(request.network)
        return request

    def check_found(
        self, manager: SandboxManager, found: SandboxInfo, context: str, *, named: bool
    ) -> None:
        """Refuse to reattach ``context``'s sandbox when it differs from this request.

        Runtime, image and limits are fixed when a sandbox is made. The network policy can
        change on a live sandbox, so only a named context is checked (checklist row 36, docs/explanation/design.md): an
        unnamed one is a kernel restarting, which keeps the policy its sandbox has now.
        """
        fix = "shut it down first, or use another JUPYTER_SANDBOX_CONTEXT"
        if self.runtime is not None and found.runtime != self.runtime:
            raise InvalidSettingError(
                f"context '{context}' runs under {found.runtime}, not {self.runtime}: {fix}"
            )
        if self.image is not None and not same_image(found.image, self.image):
            raise InvalidSettingError(
                f"context '{context}' runs image {found.image}, not {self.image}: {fix}"
            )
        checks_network = named and self.network is not None
        if self.limits is None and not checks_network:
            return  # the common reattach: nothing left to compare, no state file to read
        state = manager.read_state(found.sandbox_id)
        if self.limits is not None and "limits" in state:
            has = SandboxLimits.parse(**state["limits"])
            wanted = has.with_overrides(**self.limits)  # only what is asked for is compared
            if has != wanted:
                raise InvalidSettingError(
                    f"context '{context}' has limits {has.describe()}, not {wanted.describe()}: "
                    f"{fix}"
                )
        if checks_network:
            assert self.network is not None
            requested = NetworkPolicy.from_text(self.network)
            current = policy_of_state(state)
            if requested != current:
                raise InvalidSettingError(
                    f"context '{context}' has network policy {current.describe()}, not "
                    f"{requested.describe()}: change it with PUT /api/sandboxes/"
                    f"{found.sandbox_id}/network, {fix}"
                )


def parse_limits(text: str) -> dict[str, Any] | None:
    """``memory=4g,cpus=2`` as REST's ``limits`` object (whole numbers as ints); None when
    empty. Names and values are checked when the sandbox is made, as REST's are."""
    if not text.strip():
        return None
    if len(text) > MAX_LIMITS_TEXT:
        raise InvalidSettingError(
            f"{LIMITS_ENV_VAR} is at most {MAX_LIMITS_TEXT} characters, e.g. 'memory=4g,cpus=2'"
        )
    limits: dict[str, Any] = {}
    for item in text.split(","):
        # ' ' only: str.strip() would take Unicode spaces for part of the syntax.
        name, sep, value = (part.strip(" ") for part in item.partition("="))
        if not sep or not _NAME.fullmatch(name) or not _VALUE.fullmatch(value):
            raise InvalidSettingError(
                f"{LIMITS_ENV_VAR} must be name=value pairs separated by commas, each value "
                f"at most {MAX_VALUE_LENGTH} letters, digits, '.' or spaces, e.g. "
                f"'memory=4g,cpus=2', not {text[:80]!r}"
            )
        if name in limits:
            raise InvalidSettingError(f"{LIMITS_ENV_VAR} names {name} twice: give each limit once")
        # ASCII digits only: str.isdigit() is true of superscripts and Arabic-Indic digits too.
        limits[name] = int(value) if _WHOLE.fullmatch(value) else value
    return limits

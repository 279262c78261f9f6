"""The gateway's kernels, each with the hub user who started it.

A kernel is its owner's alone: another user asking for it by id is told it does not exist, as
for an id never used (the handlers answer 404), so ids tell nobody whose kernels run here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from traitlets import Dict

from jupyter_sandbox.gateway.kernel_env import KernelLaunch
from jupyter_sandbox.protocol.errors import KernelNotFoundError, TooManyKernelsError

SANDBOXED_PYTHON = "sandboxed-python"


class OwnedKernelManager(AsyncMappingKernelManager):
    """jupyter_server's kernel manager, with the owner of every kernel it started."""

    owners = Dict(help="kernel id -> the hub user who started it")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        # Starts under way, per owner: counted with the live kernels, so that starts sent at
        # once cannot all pass the caps before any of them is a kernel.
        self._starting: Counter[str] = Counter()

    async def start_owned_kernel(
        self,
        owner: str,
        kernel_name: str,
        launch: KernelLaunch,
        *,
        max_per_owner: int,
        max_total: int,
    ) -> str:
        """Start ``owner``'s kernel, unless they have ``max_per_owner`` kernels (live or
        starting) or the gateway ``max_total``: TooManyKernelsError then, nothing started."""
        if kernel_name != SANDBOXED_PYTHON:
            raise KernelNotFoundError(
                f"no kernel {kernel_name!r} here: this gateway runs {SANDBOXED_PYTHON} only"
            )
        # Every live kernel counts, one whose sandbox failed to start too: it is a process on
        # the gateway's host until it is shut down.
        theirs = self.count_of(owner) + self._starting[owner]
        if theirs >= max_per_owner:
            raise TooManyKernelsError(
                f"you have {theirs} kernels on the gateway, the most one user may have "
                f"(SandboxGateway.max_kernels_per_user = {max_per_owner}): shut one of them "
                "down (close its notebook, or Kernel > Shut Down Kernel) and start again"
            )
        if len(self) + sum(self._starting.values()) >= max_total:
            raise TooManyKernelsError(
                f"the gateway runs as many kernels as it may (SandboxGateway.max_kernels = "
                f"{max_total}) for all its users: shut down a kernel you no longer use and "
                "try again later, or ask the administrator to raise the limit"
            )
        self._starting[owner] += 1
        try:
            kernel_id: str = await self.start_kernel(
                kernel_name=kernel_name, env=launch.env, cwd=launch.cwd
            )
            self.owners[kernel_id] = owner
        finally:
            self._starting[owner] -= 1
            if self._starting[owner] <= 0:
                del self._starting[owner]
        self.log.info("kernel %s started for %s in %s", kernel_id, owner, launch.cwd)
        return kernel_id

    def count_of(self, owner: str) -> int:
        """``owner``'s live kernels."""
        return sum(
            1
            for kernel_id, kernel_owner in list(self.owners.items())
            if kernel_owner == owner and kernel_id in self
        )

    def check_owner(self, kernel_id: str, owner: str) -> None:
        if self.owners.get(kernel_id) != owner or kernel_id not in self:
            raise KernelNotFoundError(f"no kernel {kernel_id}")

    def kernels_of(self, owner: str) -> list[dict[str, Any]]:
        return [
            self.kernel_model(kernel_id)  # type: ignore[no-untyped-call]
            for kernel_id, kernel_owner in list(self.owners.items())
            if kernel_owner == owner and kernel_id in self
        ]

    def remove_kernel(self, kernel_id: str) -> Any:
        self.owners.pop(kernel_id, None)
        return super().remove_kernel(kernel_id)

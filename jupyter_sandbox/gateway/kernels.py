"""The gateway's kernels, each with the hub user who started it.

A kernel is its owner's alone: another user asking for it by id is told it does not exist, as
for an id never used (the handlers answer 404), so ids tell nobody whose kernels run here.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from traitlets import Dict

from jupyter_sandbox.gateway.kernel_env import KernelLaunch
from jupyter_sandbox.protocol.errors import KernelNotFoundError

SANDBOXED_PYTHON = "sandboxed-python"


class OwnedKernelManager(AsyncMappingKernelManager):
    """jupyter_server's kernel manager, with the owner of every kernel it started."""

    owners = Dict(help="kernel id -> the hub user who started it")

    async def start_owned_kernel(self, owner: str, kernel_name: str, launch: KernelLaunch) -> str:
        if kernel_name != SANDBOXED_PYTHON:
            raise KernelNotFoundError(
                f"no kernel {kernel_name!r} here: this gateway runs {SANDBOXED_PYTHON} only"
            )
        kernel_id: str = await self.start_kernel(
            kernel_name=kernel_name, env=launch.env, cwd=launch.cwd
        )
        self.owners[kernel_id] = owner
        self.log.info("kernel %s started for %s in %s", kernel_id, owner, launch.cwd)
        return kernel_id

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

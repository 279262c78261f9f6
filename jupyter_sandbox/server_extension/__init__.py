"""The Jupyter Server extension: each user's sandboxes over REST, the warm pool and culling.

Enabled on install by ``jupyter-config/jupyter_server_config.d/jupyter_sandbox.json``.
"""

from __future__ import annotations

from typing import Any

from jupyter_sandbox.server_extension.app import SandboxExtension


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "jupyter_sandbox.server_extension", "app": SandboxExtension}]


__all__ = ["SandboxExtension"]

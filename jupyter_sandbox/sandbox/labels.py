"""Container labels: the facts fixed when a sandbox is created.

Everything jupyter-sandbox creates carries ``io.jupyter-sandbox.*`` labels, and nothing acts on a
container that lacks them (see docs/explanation/design.md, "Context ids and ownership").
"""

from __future__ import annotations

PREFIX = "io.jupyter-sandbox."
# Container names: "jupyter-sandbox-<sandbox id>".
NAME_PREFIX = "jupyter-sandbox-"

OWNER = PREFIX + "owner"
SANDBOX_ID = PREFIX + "sandbox"
RUNTIME = PREFIX + "runtime"
HOST_DIR = PREFIX + "host-dir"
CREATED = PREFIX + "created"
VERSION = PREFIX + "version"
# Free-form tag naming who created the container, e.g. the test that did (for cleanup checks).
PURPOSE = PREFIX + "purpose"

# On the throw-away containers of an image build (never a sandbox): the image they run.
BUILD = PREFIX + "build"

# Labels on images the builder makes.
IMAGE_RECIPE = PREFIX + "recipe"
IMAGE_KIND = PREFIX + "image"
# On an image whose kernels offer the JupyterLab debugger (it has debugpy): "debugpy".
IMAGE_DEBUGGER = PREFIX + "debugger"
# The requirements an image with extra packages added (images/packages.py), "; "-separated.
IMAGE_PACKAGES = PREFIX + "packages"


def owner_filter(owner: str | None = None) -> dict[str, list[str]]:
    """A Docker ``filters`` dict matching the project's containers, optionally of one owner."""
    return {"label": [f"{OWNER}={owner}" if owner is not None else OWNER]}


def container_name(sandbox_id: str) -> str:
    return NAME_PREFIX + sandbox_id

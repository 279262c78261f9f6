"""The server never trusts a notebook of a sandboxed kernel (notebook_trust.py): it neither
finds its signature nor signs it, whatever its cells say; other notebooks as jupyter_server
always did. Through the contents API of a real server, as JupyterLab saves and opens them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from nbformat.sign import NotebookNotary

from tests.server_extension.conftest import Fetch

SCRIPTED = {"text/html": '<img src="x" onerror="alert(1)">', "text/plain": "image"}


def notebook(kernel: str) -> dict[str, Any]:
    """A notebook of ``kernel`` whose cell the frontend marks trusted, as Lab does after a run."""
    cell = {
        "cell_type": "code",
        "execution_count": 1,
        "id": "cell-1",
        "metadata": {"trusted": True},
        "outputs": [{"output_type": "display_data", "metadata": {}, "data": SCRIPTED}],
        "source": "display(...)",
    }
    spec = {"name": kernel, "display_name": kernel, "language": "python"}
    return {"cells": [cell], "metadata": {"kernelspec": spec}, "nbformat": 4, "nbformat_minor": 5}


def install_spec(data_dir: Path, name: str, metadata: dict[str, Any]) -> None:
    spec = {"argv": ["python", "-c", "pass"], "display_name": name, "language": "python"}
    (data_dir / "kernels" / name).mkdir(parents=True)
    (data_dir / "kernels" / name / "kernel.json").write_text(
        json.dumps({**spec, "metadata": metadata})
    )


async def contents(jp_fetch: Fetch, method: str, path: str, body: Any = None) -> Any:
    """Jupyter's own contents API (not this extension's: openapi.yaml does not describe it)."""
    data = json.dumps(body) if body is not None else None
    response = await jp_fetch("api", "contents", path, method=method, body=data)
    assert response.code in (200, 201), response.body
    return json.loads(response.body)


async def save_and_open(jp_fetch: Fetch, name: str, kernel: str) -> bool:
    """Save a notebook of ``kernel`` as Lab does, read it back; whether its cell is trusted."""
    await contents(
        jp_fetch, "PUT", f"{name}.ipynb", {"type": "notebook", "content": notebook(kernel)}
    )
    opened = await contents(jp_fetch, "GET", f"{name}.ipynb")
    return bool(opened["content"]["cells"][0]["metadata"].get("trusted"))


@pytest.mark.parametrize(
    ("kernel", "metadata", "trusted"),
    [
        ("python3", {}, True),  # any other kernel: signed on save, trusted when read again
        ("sandboxed-python", None, False),  # the installed name, even with no spec to read
        ("sandboxed-ml", {"jupyter_sandbox": {"isolation": "gVisor"}}, False),  # install-kernel
        ("plain-ml", {"debugger": False}, True),
    ],
)
async def test_saved_notebooks_of_sandboxed_kernels_are_never_trusted(
    jp_fetch: Fetch,
    jp_data_dir: Path,
    kernel: str,
    metadata: dict[str, Any] | None,
    trusted: bool,
) -> None:
    if metadata is not None and kernel != "python3":
        install_spec(jp_data_dir, kernel, metadata)
    assert await save_and_open(jp_fetch, kernel, kernel) is trusted


async def test_a_notebook_signed_elsewhere_is_not_trusted_either(
    jp_fetch: Fetch, jp_root_dir: Path, jp_serverapp: Any
) -> None:
    """Signed by `jupyter trust` (the same notary database), or before the server distrusted
    sandboxed notebooks: the signature is there, and still not taken."""
    import nbformat

    nb = nbformat.from_dict(notebook("sandboxed-python"))
    plain = NotebookNotary(parent=jp_serverapp.contents_manager)  # what `jupyter trust` uses
    plain.sign(nb)
    assert plain.check_signature(nb)
    nbformat.write(nb, jp_root_dir / "signed.ipynb")
    opened = await contents(jp_fetch, "GET", "signed.ipynb")
    assert opened["content"]["cells"][0]["metadata"]["trusted"] is False


class TestTrustingServer:
    """``SandboxExtension.trust_sandboxed_notebooks``: the server's own behaviour back."""

    @pytest.fixture
    def jp_server_config(self, jp_server_config: dict[str, Any]) -> dict[str, Any]:
        extension = {**jp_server_config.get("SandboxExtension", {})}
        extension["trust_sandboxed_notebooks"] = True
        return {**jp_server_config, "SandboxExtension": extension}

    async def test_the_setting_gives_back_the_servers_own_behaviour(self, jp_fetch: Fetch) -> None:
        assert await save_and_open(jp_fetch, "trusted", "sandboxed-python") is True

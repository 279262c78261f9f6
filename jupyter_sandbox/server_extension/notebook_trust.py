"""A notebook of a sandboxed kernel is never trusted by the server, signed or not.

Jupyter trusts a notebook's outputs when the server's notary finds its signature (it signs what
a user saved after running it, and what ``jupyter trust`` names): JupyterLab then runs their
HTML's scripts and JavaScript outputs in the page, with the user's session, as the notebook
opens. Outputs a sandbox printed are untrusted by definition. The JupyterLab extension keeps
them untrusted while they are made (labextension/src/outputTrust.ts); this keeps them so when
the notebook is read again: :class:`SandboxedNotebookNotary` never finds the signature of a
notebook whose kernelspec is sandboxed, and never signs one. Other notebooks are signed and
checked as jupyter_server does.

Set ``SandboxExtension.trust_sandboxed_notebooks = True`` for the server's own behaviour.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nbformat.sign import NotebookNotary

# The kernelspec this package installs (kernelspec/sandboxed-python/kernel.json), and the
# metadata entry it and every `jupyter sandbox install-kernel` copy carry.
KERNELSPEC_NAME = "sandboxed-python"
KERNELSPEC_METADATA_KEY = "jupyter_sandbox"


def sandboxed_kernelspec_test(kernel_spec_manager: Any) -> Callable[[str], bool]:
    """Whether the kernelspec of that name is sandboxed: its metadata has a ``jupyter_sandbox``
    entry (kernel.json, and every ``install-kernel`` copy); one this server no longer has is
    judged by the installed name."""

    def is_sandboxed(name: str) -> bool:
        try:
            spec = kernel_spec_manager.get_kernel_spec(name)
        except KeyError:  # jupyter_client's NoSuchKernel: removed since
            return name == KERNELSPEC_NAME
        return bool((spec.metadata or {}).get(KERNELSPEC_METADATA_KEY))

    return is_sandboxed


class SandboxedNotebookNotary(NotebookNotary):
    """The contents manager's notary (who calls: ContentsManager.get marks cells by
    :meth:`check_signature`; save signs after :meth:`check_cells`), distrusting notebooks of
    sandboxed kernels."""

    def __init__(self, is_sandboxed: Callable[[str], bool], **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]  # nbformat is untyped
        self.is_sandboxed = is_sandboxed

    def sandboxed(self, nb: Any) -> bool:
        kernelspec = (nb.get("metadata") or {}).get("kernelspec") or {}
        name = kernelspec.get("name") if isinstance(kernelspec, dict) else None
        return isinstance(name, str) and self.is_sandboxed(name)

    def check_signature(self, nb: Any) -> bool:
        if self.sandboxed(nb):
            return False
        return bool(super().check_signature(nb))  # type: ignore[no-untyped-call]

    def check_cells(self, nb: Any) -> bool:
        if self.sandboxed(nb):
            # As the base class does, take the frontend's per-cell marks off what is saved.
            for cell in nb.get("cells", []):
                if cell.get("cell_type") == "code":
                    cell.get("metadata", {}).pop("trusted", None)
            return False
        return bool(super().check_cells(nb))  # type: ignore[no-untyped-call]


def distrust_sandboxed_notebooks(contents_manager: Any, kernel_spec_manager: Any) -> None:
    """Give ``contents_manager`` a :class:`SandboxedNotebookNotary` (configured as its own
    notary was: NotebookNotary's settings apply to it, a subclass)."""
    contents_manager.notary = SandboxedNotebookNotary(
        sandboxed_kernelspec_test(kernel_spec_manager), parent=contents_manager
    )

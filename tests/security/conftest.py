"""The security battery: one test per row of the security checklist that applies, on runc and on
runsc, each marked ``checklist(row=, attack=, expected=)`` and recording what it ``observe``d.

``python scripts/security_report.py`` runs the marked tests and writes docs/security.md from
their JUnit properties. Every attack also checks that a neighbour (another owner's sandbox on the
same engine) and the host are unaffected.
"""

from __future__ import annotations

import errno
from typing import Any

import pytest

from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from tests.kernel_client import answers, output_of


@pytest.fixture
async def neighbour(manager: SandboxManager, runtime: str, purpose: str) -> Sandbox:
    """Another owner's sandbox, with a file in its workspace, that no attack may disturb."""
    sandbox = await manager.create("bob", runtime=runtime, purpose=purpose)
    await output_of(sandbox.connection_info, "open('/workspace/mine.txt', 'w').write('intact')")
    return sandbox


async def assert_unaffected(neighbour: Sandbox) -> None:
    """The neighbour still answers, computes, and has its file."""
    assert await answers(neighbour.connection_info, timeout=30)
    assert await output_of(neighbour.connection_info, "print(open('mine.txt').read())") == "intact"


def errno_name(result: int | str) -> str:
    """EPERM for 1; anything that is not an errno number ("ok") as it is."""
    if isinstance(result, int) or str(result).isdigit():
        return errno.errorcode.get(int(result), str(result))
    return str(result)


def run(sandbox: Sandbox, code: str, **kwargs: Any) -> Any:
    """What ``code`` printed in ``sandbox``'s kernel (a coroutine to await)."""
    return output_of(sandbox.connection_info, code, **kwargs)

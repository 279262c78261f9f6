"""Row 35: what sandbox code writes where the host starts its own Python is never run there.

With a read-write /workspace, sandbox code writes the notebook's directory, where the host
starts the next proxy kernel (and, under JupyterLab, the user's own uploads land in the server's
working directory, where the zygote and the network proxies start). ``python -m`` would import
a ``jupyter_sandbox/`` or ``json.py`` from there before the real ones.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.host.python_command import module_command
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.server_extension.fast_start import Zygote
from tests.sandbox.snapshots.workspace_files import OWNER
from tests.shadowing import MARKER, imported, sources, working_directory

pytestmark = pytest.mark.integration

LAUNCHER = Path(__file__).parents[2] / "kernelspec" / "sandboxed-python" / "launch.py"
WRITE = """
import json, pathlib, sys
for relative, text in json.loads(sys.argv[1]).items():
    path = pathlib.Path('/workspace', relative)
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
"""


def kernel_command(connection_file: Path) -> list[str]:
    """The command the kernelspec's launcher becomes without a zygote."""
    spec = importlib.util.spec_from_file_location("sandboxed_python_launch", LAUNCHER)
    assert spec is not None
    assert spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    return list(launcher.kernel_command(str(connection_file)))


def run_host_programs(launch: Path, missing: Path) -> None:
    """The kernel's command and a network proxy's, started in ``launch``: each is the real
    program (the kernel complains of its missing connection file, the proxy gives its usage)."""
    kernel = subprocess.run(kernel_command(missing), cwd=launch, capture_output=True, timeout=60)
    assert str(missing).encode() in kernel.stderr, kernel.stderr
    proxy = subprocess.run(
        module_command("jupyter_sandbox.sandbox.network"), cwd=launch, capture_output=True
    )
    assert b"The host proxy process of one sandbox" in proxy.stderr, proxy.stderr


@pytest.mark.checklist(
    row=35,
    attack="sandbox code in a read-write /workspace planting a jupyter_sandbox package and a "
    "json.py in the notebook's directory, where the host starts proxy kernels, the zygote and "
    "network proxies",
    expected="none of them is imported on the host: each host program started there runs the "
    "real package",
)
async def test_row35_modules_planted_where_the_host_starts_python_never_run(
    manager: SandboxManager,
    runtime: str,
    purpose: str,
    tmp_path: Path,
    observe: Callable[[str], None],
) -> None:
    launch = tmp_path / "notebooks"
    launch.mkdir()
    # The notebook's directory is the user's; the sandbox runs as that user (as root: its own).
    os.chown(launch, manager.settings.effective_uid, -1)
    manager.settings.workspace_mode = "read-write"
    sandbox = await manager.create(OWNER, runtime=runtime, purpose=purpose, launch_dir=str(launch))
    planted = await manager.exec(
        OWNER, sandbox.sandbox_id, ["python3", "-c", WRITE, json.dumps(sources(launch))]
    )
    assert planted.exit_code == 0, planted.stderr.decode()
    assert (launch / "jupyter_sandbox" / "__init__.py").is_file()  # it reached the host
    assert not (launch / MARKER).exists()

    await asyncio.to_thread(run_host_programs, launch, tmp_path / "missing.json")
    with working_directory(launch):
        zygote = Zygote(tmp_path / "state")
        assert zygote.start(stderr=subprocess.DEVNULL)
    try:
        assert await zygote.wait_ready()
    finally:
        await zygote.stop()
    assert imported(launch) is None
    observe(
        "the sandbox wrote jupyter_sandbox/__init__.py and json.py into the notebook's "
        "directory; the proxy kernel's command, a network proxy and the zygote started there "
        "each ran the real package and imported neither"
    )

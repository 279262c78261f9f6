"""A notebook's own `%pip install`: the image's venv is read-only, so the supervisor
(images/python/sandbox-init.py) gives pip a prefix in the sandbox's /tmp that the kernel's
path includes. The package here is a wheel beside the notebook, so no index is needed."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox import labels
from tests.kernel.kernels import run, running_kernel, value_of
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env

CLI = (sys.executable, "-m", "jupyter_sandbox.cli")

pytestmark = pytest.mark.integration


@pytest.fixture
def env(purpose: str) -> Iterator[Path]:
    with sandbox_kernel_env(purpose) as state_dir:
        yield state_dir


def demo_wheel(directory: Path, name: str = "jsbx_demo", version: str = "1.0") -> Path:
    """A pure-Python wheel whose module holds ANSWER = 42."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "ANSWER = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={_digest(text.encode())},{len(text.encode())}"
        for path, text in files.items()
    ]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_pip_install_in_a_cell_works_and_lasts_across_restarts(env: Path, runtime: str) -> None:
    wheel = demo_wheel(notebook_dir(env))
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc):
        out, reply = run(kc, f"%pip install --no-index /workspace/{wheel.name}", timeout=120)
        assert reply["status"] == "ok", out
        assert "Successfully installed" in out, out
        assert value_of(kc, "__import__('jsbx_demo').ANSWER") == "42"
        assert value_of(kc, "__import__('jsbx_demo').__file__").startswith("'/tmp/.local/")
        # A command run in the sandbox (not the kernel's child) sees it too, and pip's prefix.
        (container,) = containers_under(env)
        sandbox_id = container.labels[labels.SANDBOX_ID]
        code = "import jsbx_demo, os; print(jsbx_demo.ANSWER, os.environ['PIP_PREFIX'])"
        ran = subprocess.run(
            [*CLI, "exec", sandbox_id, "--", "python", "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert (ran.returncode, ran.stdout) == (0, "42 /tmp/.local\n"), ran.stderr
        km.restart_kernel()
        # As after any kernel's restart: until the client's iopub has reconnected, the new
        # kernel's output goes to no subscriber (seen: 5 runs of 10 timed out without it).
        kc.wait_for_ready(timeout=120)
        assert value_of(kc, "__import__('jsbx_demo').ANSWER") == "42"  # a fresh interpreter


# Run in the kernel: a wheel whose package holds a compiled module, made from one of the image's
# own Python's extension modules (so its ABI is the sandbox's), written beside the notebook.
NATIVE_WHEEL = r"""
import _bz2, base64, hashlib, os, zipfile
def digest(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
native = open(_bz2.__file__, "rb").read()
info = "jsbx_native-1.0.dist-info"
files = {
    "jsbx_native/__init__.py": b"",
    "jsbx_native/" + os.path.basename(_bz2.__file__): native,
    info + "/METADATA": b"Metadata-Version: 2.1\nName: jsbx_native\nVersion: 1.0\n",
    info + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\n"
    b"Tag: py3-none-any\n",
}
record = [f"{path},sha256={digest(data)},{len(data)}" for path, data in files.items()]
files[info + "/RECORD"] = ("\n".join([*record, info + "/RECORD,,"]) + "\n").encode()
with zipfile.ZipFile("/workspace/jsbx_native-1.0-py3-none-any.whl", "w") as archive:
    for path, data in files.items():
        archive.writestr(path, data)
"""


def test_pip_install_of_a_compiled_module_loads(env: Path, runtime: str) -> None:
    """/tmp is noexec, and under runc Linux refuses to map a .so from a noexec mount ("failed
    to map segment from shared object"): pip's prefix is a mount of its own that allows it."""
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME=runtime) as (_, kc):
        out, reply = run(kc, NATIVE_WHEEL, timeout=60)
        assert reply["status"] == "ok", out
        wheel = "/workspace/jsbx_native-1.0-py3-none-any.whl"
        out, reply = run(kc, f"%pip install --no-index {wheel}", timeout=120)
        assert "Successfully installed" in out, out
        loaded = "__import__('jsbx_native._bz2').__file__"
        assert value_of(kc, loaded).startswith("'/tmp/.local/lib/"), out
        assert value_of(kc, "__import__('jsbx_native._bz2')._bz2.BZ2Decompressor.__name__") == (
            "'BZ2Decompressor'"
        )

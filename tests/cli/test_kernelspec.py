"""`jupyter sandbox install-kernel`: a kernelspec whose kernels run another image and runtime,
found and started by jupyter_client as JupyterLab does."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from jupyter_sandbox.sandbox.settings import DEFAULT_IMAGE
from tests.conftest import ADDED_PACKAGE
from tests.kernel.kernels import run, running_kernel, value_of
from tests.kernel.sandbox_env import notebook_dir, sandbox_kernel_env

INSTALL = [sys.executable, "-m", "jupyter_sandbox.cli", "install-kernel"]


def install_kernel(prefix: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*INSTALL, f"--prefix={prefix}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def kernels_in(prefix: Path) -> Path:
    return prefix / "share" / "jupyter" / "kernels"


def test_the_kernelspec_carries_the_choices_in_its_environment(tmp_path: Path) -> None:
    result = install_kernel(
        tmp_path, "--name=sandboxed-open", "--runtime=runc", "--network=pypi.org,!evil.pypi.org"
    )
    assert result.returncode == 0, result.stderr
    spec = KernelSpecManager(kernel_dirs=[str(kernels_in(tmp_path))]).get_kernel_spec(
        "sandboxed-open"
    )
    assert spec.env == {
        "JUPYTER_SANDBOX_RUNTIME": "runc",
        "JUPYTER_SANDBOX_NETWORK": "pypi.org,!evil.pypi.org",
    }
    assert spec.display_name == "Sandboxed Python (runc)"
    assert spec.interrupt_mode == "message"
    assert spec.metadata["debugger"] is False  # only an image with debugpy offers it
    # outside this environment, the kernelspec names this interpreter, which has the package
    assert spec.argv[0] == sys.executable
    assert (Path(spec.resource_dir) / "launch.py").is_file()
    assert not (Path(spec.resource_dir) / "__pycache__").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--name=sandboxed-python", "--runtime=runc"], "other than 'sandboxed-python'"),
        (["--name=has space", "--runtime=runc"], "--name must be a kernelspec name"),
        (["--name=ok"], "give --image, --runtime, --network or --limits"),
        (["--name=ok", "--limits=memory=1k"], "below the minimum"),
        (["--name=ok", "--limits=mem=1g"], "unknown limit(s) mem"),
        (["--name=ok", "--limits=4g"], "JUPYTER_SANDBOX_LIMITS must be name=value pairs"),
        (
            ["--name=ok", "--runtime=kata"],
            "JUPYTER_SANDBOX_RUNTIME must be 'runsc' (gVisor) or 'runc'",
        ),
        (["--name=ok", "--network=*"], "would allow every host"),
        (["--name=ok", "--image=someone/else:1"], "is not allowed here"),
    ],
)
def test_bad_choices_are_refused_and_nothing_is_installed(
    tmp_path: Path, args: list[str], says: str
) -> None:
    result = install_kernel(tmp_path, *args)
    assert result.returncode == 1
    assert says in result.stderr
    assert not kernels_in(tmp_path).exists()


def test_a_missing_image_is_named_with_the_command_that_builds_it(tmp_path: Path) -> None:
    result = install_kernel(tmp_path, "--name=later", "--image=jupyter-sandbox/later:1")
    assert result.returncode == 0, result.stderr
    assert "build it with 'jupyter sandbox build-image --tag=jupyter-sandbox/later:1'" in (
        result.stderr
    )
    assert (kernels_in(tmp_path) / "later" / "kernel.json").is_file()


@pytest.mark.integration
def test_an_image_with_debugpy_gives_kernelspecs_the_debugger(
    tmp_path: Path, debugger_image: str, packages_image: str
) -> None:
    def debugger(name: str, image: str) -> bool:
        result = install_kernel(tmp_path, f"--name={name}", f"--image={image}")
        assert result.returncode == 0, result.stderr
        on: bool = json.loads((kernels_in(tmp_path) / name / "kernel.json").read_text())[
            "metadata"
        ]["debugger"]
        assert on == ("offer the JupyterLab debugger" in result.stdout)
        return on

    assert debugger("debugging", debugger_image)
    assert not debugger("tables", packages_image)


@pytest.fixture
def env(purpose: str) -> Iterator[Path]:
    with sandbox_kernel_env(purpose) as state_dir:
        yield state_dir


@pytest.mark.integration
def test_its_kernels_run_in_the_image_it_names(
    env: Path, tmp_path: Path, packages_image: str
) -> None:
    result = install_kernel(
        tmp_path,
        "--name=sandboxed-tables",
        f"--image={packages_image}",
        "--runtime=runc",
        "--limits=memory=768m",
    )
    assert result.returncode == 0, result.stderr
    specs = KernelSpecManager(kernel_dirs=[str(kernels_in(tmp_path))])
    with running_kernel(notebook_dir(env), kernelspec=("sandboxed-tables", specs)) as (_, kc):
        out, reply = run(kc, f"import {ADDED_PACKAGE}; print({ADDED_PACKAGE}.__name__)")
        assert reply["status"] == "ok", out
        # runc shares the host's kernel; gVisor would report its own release (4.4.0)
        assert value_of(kc, "__import__('platform').release()") != "'4.4.0'"
        assert "memory 768m (no swap)" in kc.kernel_info(reply=True)["content"]["banner"]
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME="runc") as (_, kc):
        out, reply = run(kc, f"import {ADDED_PACKAGE}")
        assert reply["status"] == "error"
        assert "ModuleNotFoundError" in out


@pytest.mark.integration
def test_a_context_keeps_its_image(env: Path, packages_image: str) -> None:
    def kernel(image: str) -> AbstractContextManager[tuple[KernelManager, BlockingKernelClient]]:
        return running_kernel(
            notebook_dir(env),
            JUPYTER_SANDBOX_CONTEXT="tables",
            JUPYTER_SANDBOX_RUNTIME="runc",
            JUPYTER_SANDBOX_IMAGE=image,
        )

    with kernel(packages_image) as (_, kc):
        run(kc, "x = 42")
    with kernel(DEFAULT_IMAGE) as (_, kc):
        out, reply = run(kc, "x")
        assert reply["status"] == "error"
        assert f"context 'tables' runs image {packages_image}, not {DEFAULT_IMAGE}" in out
    with kernel(packages_image) as (_, kc):
        assert value_of(kc, "x") == "42"

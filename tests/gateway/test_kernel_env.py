"""What a gateway client may choose for its kernel (jupyter_sandbox/gateway/kernel_env.py): the
KERNEL_SANDBOX_* choices, the owner (never the client's), and the working directory inside the
owner's root, symbolic links followed. Real directories under a temporary root; no engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_sandbox.gateway.kernel_env import (
    MAX_VALUE_LENGTH,
    kernel_launch,
    user_root_of,
    working_directory,
)
from jupyter_sandbox.protocol.errors import InvalidSettingError


@pytest.fixture
def homes(tmp_path: Path) -> Path:
    (tmp_path / "alice" / "notes").mkdir(parents=True)
    (tmp_path / "bob").mkdir()
    return tmp_path


def test_the_choices_become_the_kernels_variables(homes: Path) -> None:
    sent = {
        "KERNEL_SANDBOX_CONTEXT": "analysis",
        "KERNEL_SANDBOX_RUNTIME": "runc",
        "KERNEL_SANDBOX_LIMITS": "memory=1g",
        "KERNEL_SANDBOX_NETWORK": "none",
        "KERNEL_SANDBOX_IMAGE": "jupyter-sandbox/python:0.1.0",
        "KERNEL_WORKING_DIR": str(homes / "alice" / "notes"),
        "KERNEL_LAUNCH_TIMEOUT": "40",
    }
    launch = kernel_launch(sent, "alice", homes / "alice", base_env={"PATH": "/usr/bin"})
    assert launch.env == {
        "PATH": "/usr/bin",
        "JUPYTER_SANDBOX_CONTEXT": "analysis",
        "JUPYTER_SANDBOX_RUNTIME": "runc",
        "JUPYTER_SANDBOX_LIMITS": "memory=1g",
        "JUPYTER_SANDBOX_NETWORK": "none",
        "JUPYTER_SANDBOX_IMAGE": "jupyter-sandbox/python:0.1.0",
        "JUPYTER_SANDBOX_OWNER": "alice",
        "JUPYTER_SANDBOX_WORKSPACE_ROOT": str(homes / "alice"),  # walked from, without links
    }
    assert launch.cwd == str(homes / "alice" / "notes")


def test_the_owner_is_never_the_clients(homes: Path) -> None:
    sent = {
        "KERNEL_USERNAME": "bob",
        "JUPYTER_SANDBOX_OWNER": "bob",
        "JUPYTERHUB_USER": "bob",
        "KERNEL_SANDBOX_OWNER": "bob",
    }
    base = {
        "JUPYTERHUB_API_TOKEN": "the service's",
        "JUPYTER_SANDBOX_CONTEXT": "gateway's",
        "JUPYTER_SANDBOX_WORKSPACE_ROOT": "/",
    }
    launch = kernel_launch(sent, "alice", homes / "alice", base_env=base)
    assert launch.env == {  # nor the gateway's secrets, nor a root of its own
        "JUPYTER_SANDBOX_OWNER": "alice",
        "JUPYTER_SANDBOX_WORKSPACE_ROOT": str(homes / "alice"),
    }
    assert launch.cwd == str(homes / "alice")


@pytest.mark.parametrize(
    ("sent", "said"),
    [
        ([], "an object of strings"),
        ({"KERNEL_SANDBOX_RUNTIME": 1}, "must be a string"),
        ({"KERNEL_SANDBOX_NETWORK": "a\nb"}, "printable"),
        ({"KERNEL_SANDBOX_NETWORK": "x" * (MAX_VALUE_LENGTH + 1)}, "at most"),
        ({f"KERNEL_{n}": "" for n in range(300)}, "more than"),
        ({"KERNEL_WORKING_DIR": "notes"}, "absolute path"),
        ({"KERNEL_WORKING_DIR": "/nowhere/at/all"}, "does not exist"),
    ],
)
def test_bad_input_is_refused_with_what_to_send(homes: Path, sent: object, said: str) -> None:
    with pytest.raises(InvalidSettingError, match=said):
        kernel_launch(sent, "alice", homes / "alice", base_env={})


def test_a_directory_outside_the_root_is_refused(homes: Path) -> None:
    root = homes / "alice"
    for outside in [homes / "bob", root / ".." / "bob", Path("/")]:
        with pytest.raises(InvalidSettingError, match="leads outside your files"):
            working_directory(str(outside), root)


def test_a_symbolic_link_out_of_the_root_is_refused(homes: Path) -> None:
    root = homes / "alice"
    (root / "escape").symlink_to(homes / "bob")
    with pytest.raises(InvalidSettingError, match="through a symbolic link"):
        working_directory(str(root / "escape"), root)
    (root / "inside").symlink_to(root / "notes")  # a link that stays inside is followed
    assert working_directory(str(root / "inside"), root) == root / "notes"


def test_a_root_the_gateway_cannot_see_says_so(homes: Path) -> None:
    with pytest.raises(InvalidSettingError, match="cannot see this user's files"):
        working_directory(None, homes / "carol")


def test_a_user_name_that_is_not_a_directory_name_is_refused() -> None:
    assert user_root_of("/home/{username}", "alice") == Path("/home/alice")
    for name in ["..", "a/b", "."]:
        with pytest.raises(InvalidSettingError, match="cannot name a directory"):
            user_root_of("/home/{username}", name)

"""What a kernel asks for, read from its environment: syntax checked when the kernel starts."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from jupyter_sandbox.kernel.kernel_request import KernelRequest, parse_limits
from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.records import SandboxInfo
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.settings import SandboxSettings


def test_an_empty_environment_asks_for_the_defaults() -> None:
    request = KernelRequest.from_environment({})
    assert request == KernelRequest(runtime=None, image=None, limits=None, network=None)


def test_every_choice_is_read() -> None:
    request = KernelRequest.from_environment(
        {
            "JUPYTER_SANDBOX_RUNTIME": "runc",
            "JUPYTER_SANDBOX_IMAGE": "jupyter-sandbox/python-ml:1",
            "JUPYTER_SANDBOX_LIMITS": " memory = 4g , cpus=1.5,pids=512",
            "JUPYTER_SANDBOX_NETWORK": "pypi.org",
            "JPY_SESSION_NAME": "work/analysis.ipynb",
            "JUPYTER_SANDBOX_PURPOSE": "test",
        }
    )
    assert request == KernelRequest(
        runtime="runc",
        image="jupyter-sandbox/python-ml:1",
        limits={"memory": "4g", "cpus": "1.5", "pids": 512},
        network="pypi.org",
        notebook="work/analysis.ipynb",
        purpose="test",
    )


def test_empty_variables_are_unset() -> None:
    environ = {
        "JUPYTER_SANDBOX_IMAGE": "",
        "JUPYTER_SANDBOX_LIMITS": " ",
        "JUPYTER_SANDBOX_RUNTIME": "",
    }
    assert KernelRequest.from_environment(environ) == KernelRequest.from_environment({})


def test_an_unknown_runtime_is_refused_naming_the_variable() -> None:
    with pytest.raises(InvalidSettingError, match="JUPYTER_SANDBOX_RUNTIME must be 'runsc'"):
        KernelRequest.from_environment({"JUPYTER_SANDBOX_RUNTIME": "kata"})


@pytest.mark.parametrize("text", ["4g", "memory=", "=4g", "memory=4g,,cpus=1", "memory:4g"])
def test_limits_that_are_not_pairs_are_refused_with_an_example(text: str) -> None:
    with pytest.raises(InvalidSettingError) as raised:
        parse_limits(text)
    assert "JUPYTER_SANDBOX_LIMITS must be name=value pairs" in raised.value.message
    assert "'memory=4g,cpus=2'" in raised.value.message


def found_context(manager: SandboxManager, state: dict[str, Any] | None) -> SandboxInfo:
    """A context's sandbox as the engine lists it, with ``state`` as its state file (None: a
    state file that cannot be read at all, so any read of it fails the test)."""
    sandbox_id = "a1b2c3d4e5f6"
    directory = SandboxDirectory(manager.settings.state_path, sandbox_id)
    directory.root.mkdir(parents=True)
    if state is None:
        directory.state_file.mkdir()
    else:
        directory.write_state(state)
    return SandboxInfo(
        sandbox_id=sandbox_id,
        container_id="0" * 64,
        name=labels.container_name(sandbox_id),
        owner="alice",
        runtime="runc",
        image="jupyter-sandbox/python:1",
        status="running",
        labels={},
        host_dir=str(directory.root),
        created="",
    )


async def test_a_reattach_asking_for_nothing_fixed_reads_no_state(manager: SandboxManager) -> None:
    found = found_context(manager, None)
    request = KernelRequest(runtime="runc", image=None, limits=None, network="open")
    request.check_found(manager, found, "c1", named=False)  # an unnamed kernel's restart


async def test_only_the_limits_asked_for_are_compared(manager: SandboxManager) -> None:
    made_with = manager.settings.default_limits().with_overrides(memory="2g", cpus=1)
    found = found_context(manager, {"limits": made_with.as_settings()})
    asking = KernelRequest.from_environment({"JUPYTER_SANDBOX_LIMITS": "memory=2g"})
    asking.check_found(manager, found, "c1", named=True)
    more = KernelRequest.from_environment({"JUPYTER_SANDBOX_LIMITS": "memory=4g"})
    with pytest.raises(InvalidSettingError, match=r"context .c1. has limits .*shut it down"):
        more.check_found(manager, found, "c1", named=True)


async def test_a_named_context_with_another_network_policy_is_refused(
    manager: SandboxManager,
) -> None:
    found = found_context(manager, {})
    request = KernelRequest(runtime=None, image=None, limits=None, network="open")
    with pytest.raises(InvalidSettingError, match=r"network policy .*PUT /api/sandboxes/"):
        request.check_found(manager, found, "c1", named=True)


def test_the_image_is_read_in_its_full_form_and_bad_text_is_refused() -> None:
    request = KernelRequest.from_environment({"JUPYTER_SANDBOX_IMAGE": "jupyter-sandbox/ml"})
    assert request.image == "jupyter-sandbox/ml:latest"
    with pytest.raises(InvalidSettingError, match="JUPYTER_SANDBOX_IMAGE: 'ML' is not an image"):
        KernelRequest.from_environment({"JUPYTER_SANDBOX_IMAGE": "ML"})


async def test_a_context_made_with_another_spelling_of_its_image_is_found(
    manager: SandboxManager,
) -> None:
    found = found_context(manager, {})
    found = dataclasses.replace(found, image="jupyter-sandbox/python")  # made before full forms
    same = KernelRequest.from_environment({"JUPYTER_SANDBOX_IMAGE": "jupyter-sandbox/python"})
    same.check_found(manager, found, "c1", named=True)
    other = KernelRequest.from_environment({"JUPYTER_SANDBOX_IMAGE": "jupyter-sandbox/python:1"})
    with pytest.raises(InvalidSettingError, match="runs image jupyter-sandbox/python, not"):
        other.check_found(manager, found, "c1", named=True)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("pids=\u00b2", "name=value pairs"),  # isdigit(), and int() refused it
        ("pids=" + "9" * 100, "each value at most 32"),
        ("pids=" + "9" * 5000, "at most 1024 characters"),
        ("pids=\u0661\u0660\u0660", "name=value pairs"),  # isdigit(), and int() took it
        ("memory=\u0662g", "name=value pairs"),
        ("memory=1\u2003g", "name=value pairs"),
        ("memory\u2003=1g", "name=value pairs"),
        ("memory=1g,memory=2g", "names memory twice"),
        ("memory=1g," * 200, "at most"),
    ],
)
def test_limits_are_ascii_bounded_and_named_once(text: str, said: str) -> None:
    with pytest.raises(InvalidSettingError, match=said):
        parse_limits(text)


@pytest.mark.parametrize("text", ["pids=" + "9" * 32, "memory=" + "9" * 32, "cpus=" + "9" * 32])
def test_long_numbers_are_refused_by_the_limits_parser(text: str) -> None:
    """Whole, as the syntax lets them through: a bad setting (400), never an overflow (500)."""
    limits = parse_limits(text)
    with pytest.raises(InvalidSettingError):
        SandboxSettings().requested_limits(limits)


def test_limits_keep_ascii_whole_numbers_as_ints() -> None:
    assert parse_limits("pids=100, memory = 64 MB") == {"pids": 100, "memory": "64 MB"}

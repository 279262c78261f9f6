"""What a kernel asks for, read from its environment: syntax checked when the kernel starts."""

from __future__ import annotations

import pytest

from jupyter_sandbox.kernel.kernel_request import KernelRequest, parse_limits
from jupyter_sandbox.sandbox.errors import InvalidSettingError


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

"""The proxy kernel passes the same protocol tests as plain ipykernel, on both runtimes."""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any, ClassVar

import jupyter_kernel_test
import pytest
from jupyter_client.manager import start_new_kernel

from tests.conftest import purpose_label
from tests.kernel.sandbox_env import notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration


class _SandboxEnv:
    """Gives a unittest class its own sandbox environment for the lifetime of the class."""

    _stack: ClassVar[ExitStack]

    @classmethod
    def enter_sandbox_env(cls, runtime: str) -> Path:
        cls._stack = ExitStack()
        state_dir: Path = cls._stack.enter_context(sandbox_kernel_env(purpose_label(cls.__name__)))
        os.environ["JUPYTER_SANDBOX_RUNTIME"] = runtime
        return state_dir

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            super().tearDownClass()  # type: ignore[misc]
        finally:
            cls._stack.close()


class _SandboxedPythonTests(_SandboxEnv, jupyter_kernel_test.KernelTests):
    __test__ = False  # the runtime-specific subclasses below are the tests
    kernel_name = "sandboxed-python"
    runtime = "runsc"

    language_name = "python"
    file_extension = ".py"
    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"
    completion_samples: ClassVar[list[dict[str, Any]]] = [
        {"text": "zi", "matches": {"zip"}},
        {"text": "import col", "matches": {"collections", "colorsys"}},
    ]
    complete_code_samples: ClassVar[list[str]] = [
        "1",
        "print('hello, world')",
        "def f(x):\n  return x*2\n\n\n",
    ]
    incomplete_code_samples: ClassVar[list[str]] = ["print('''hello", "def f(x):\n  x*2"]
    invalid_code_samples: ClassVar[list[str]] = ["import = 7q"]
    code_page_something = "zip?"
    code_generate_error = "raise ValueError('boom')"
    code_execute_result: ClassVar[list[dict[str, str]]] = [
        {"code": "1+2+3", "result": "6"},
        {"code": "[n*n for n in range(1, 4)]", "result": "[1, 4, 9]"},
    ]
    code_display_data: ClassVar[list[dict[str, str]]] = [
        {
            "code": "from IPython.display import HTML, display; display(HTML('<b>test</b>'))",
            "mime": "text/html",
        },
        {
            "code": "from IPython.display import Math, display; display(Math('\\\\frac{1}{2}'))",
            "mime": "text/latex",
        },
    ]
    code_history_pattern = "1?2*"
    # "range" fails against the plain python3 kernel too (IPython writes history to its database
    # asynchronously); skipping it here skips nothing the plain ipykernel passes.
    supported_history_operations = ("tail", "search")
    code_inspect_sample = "zip"
    code_clear_output = "from IPython.display import clear_output; clear_output()"

    @classmethod
    def setUpClass(cls) -> None:
        state_dir = cls.enter_sandbox_env(cls.runtime)
        cls.km, cls.kc = start_new_kernel(
            kernel_name=cls.kernel_name, cwd=str(notebook_dir(state_dir))
        )

    def test_banner_states_the_isolation(self) -> None:
        reply = self.kc.kernel_info(reply=True)["content"]
        assert (
            f"Sandboxed Python on {'gVisor' if self.runtime == 'runsc' else 'runc'}"
            in reply["banner"]
        )
        assert "network: none" in reply["banner"]
        assert "attested: " in reply["banner"], reply["banner"]
        assert reply["language_info"]["name"] == "python"


@pytest.mark.runsc
class TestSandboxedPythonOnRunsc(_SandboxedPythonTests):
    __test__ = True
    runtime = "runsc"


@pytest.mark.runc
class TestSandboxedPythonOnRunc(_SandboxedPythonTests):
    __test__ = True
    runtime = "runc"


class TestIopubWelcome(_SandboxEnv, jupyter_kernel_test.IopubWelcomeTests):
    kernel_name = "sandboxed-python"
    support_iopub_welcome = True

    @classmethod
    def setUpClass(cls) -> None:
        cls.enter_sandbox_env("runc")
        super().setUpClass()

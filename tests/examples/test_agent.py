"""examples/agent.py works as its docstring says: results, errors, and a context that lives on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.kernel.sandbox_env import notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration
AGENT = Path(__file__).parents[2] / "examples" / "agent.py"


def test_agent_example_keeps_its_context_between_runs(purpose: str) -> None:
    with sandbox_kernel_env(purpose) as state_dir:
        runs = [
            subprocess.run(
                [sys.executable, str(AGENT), "--context", "agent", "--runtime", "runc"],
                capture_output=True,
                text=True,
                timeout=180,
                cwd=notebook_dir(state_dir),
                check=True,
            ).stdout
            for _ in range(2)
        ]
    assert "stdout: run number 1" in runs[0]
    assert "stdout: run number 2" in runs[1]
    # No network: the refusal names the policy (sandbox/network/forwarder.py, refusal_text).
    assert "jupyter-sandbox: network policy none: example.com:80 not allowed" in runs[0]
    assert "error: PermissionError" in runs[0]  # read-only, non-root

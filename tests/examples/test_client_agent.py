"""examples/client_agent.py against a real Jupyter Server with the extension, over real HTTP,
as tests/examples/test_rest_agent.py runs examples/rest_agent.py."""

from __future__ import annotations

import pytest

from jupyter_sandbox.server_extension import SandboxExtension
from tests.examples.example_runs import run_example, token_of
from tests.server_extension.conftest import *  # noqa: F403  (fixtures, used by name)

pytestmark = pytest.mark.integration


async def test_client_agent_example_does_what_it_says(
    extension: SandboxExtension, server_url: str, jp_auth_header: dict[str, str]
) -> None:
    arguments = ("--task", "t-8")
    run = await run_example("client_agent.py", server_url, token_of(jp_auth_header), *arguments)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    sandbox_id = lines[0].split()[1]
    assert lines[0].startswith(f"sandbox {sandbox_id} (runc), expires 20"), lines

    # radius, defined by one run, used by the next ones.
    assert "area of radius 2: 12.566370614359172" in lines
    assert "raised, as data: ZeroDivisionError: division by zero" in lines
    streamed = lines[lines.index("streamed run:") + 1 : lines.index("  [execute_result] 20") + 1]
    assert streamed == [
        "  [stdout] epoch 0: loss 1.00",
        "  [stdout] epoch 1: loss 0.50",
        "  [stdout] epoch 2: loss 0.33",
        "  [stderr] no GPU here, on the CPU",
        "  [execute_result] 20",  # after the prints
    ], run.stdout
    assert lines[lines.index("  [execute_result] 20") + 1].startswith("  status ok in ")

    job = lines.index(next(line for line in lines if line.startswith("background job ")))
    assert lines[job + 1 : job + 5] == ["  | step 0", "  | step 1", "  | step 2", "  exit code 0"]
    assert "read back: sum of squares: 285" in lines
    assert f"found by metadata: ['{sandbox_id}']" in lines
    assert lines[-1] == f"removed {sandbox_id}"
    owner = extension.owner_of(None)  # type: ignore[arg-type]
    assert await extension.manager.list_sandboxes(owner) == []

    # A wrong token is refused with a message that says what to check, not a traceback.
    refused = await run_example("client_agent.py", server_url, "wrong", *arguments, timeout=60)
    assert refused.returncode == 1
    assert refused.stderr.startswith("SandboxError: POST http://127.0.0.1"), refused.stderr
    assert "was refused (403" in refused.stderr
    assert "check the token" in refused.stderr
    assert "Traceback" not in refused.stderr

"""examples/rest_agent.py against a real Jupyter Server with the extension, over real HTTP.

The server is pytest-jupyter's (on 127.0.0.1), set up as tests/server_extension's is: its
fixtures are imported here by name rather than shared through a conftest, so that the other
examples' tests do not start a server.
"""

from __future__ import annotations

import pytest

from jupyter_sandbox.server_extension import SandboxExtension
from tests.examples.example_runs import run_example, token_of
from tests.server_extension.conftest import *  # noqa: F403  (fixtures, used by name)

pytestmark = pytest.mark.integration


async def test_rest_agent_example_does_what_it_says(
    extension: SandboxExtension, server_url: str, jp_auth_header: dict[str, str]
) -> None:
    arguments = ("--task", "t-7")
    run = await run_example("rest_agent.py", server_url, token_of(jp_auth_header), *arguments)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "exit 0 in" in out
    assert "stdout: hello from /workspace/job as uid" in out
    assert "stderr: GREETING is hi" in out
    commands, _, code = out.partition("streamed run:\n")
    streamed = [line for line in commands.splitlines() if line.startswith("  [stdout]")]
    assert streamed[1:] == [
        "  [stdout] step 0",
        "  [stdout] step 1",
        "  [stdout] step 2",
        "  [stdout] one line, written in two pieces",  # a line that came in two events
    ], out

    # Code in the interpreter: radius, defined by one run, used by the next ones.
    assert "area of radius 2: 12.566370614359172\n" in commands
    assert "raised, as data: status error, ZeroDivisionError: division by zero\n" in commands
    assert "  its traceback ends: ZeroDivisionError: division by zero\n" in commands
    events = [line for line in code.splitlines() if line.startswith("  ")]
    assert [line for line in events if line.startswith("  [stdout]")] == [
        "  [stdout] epoch 0: loss 1.00",
        "  [stdout] epoch 1: loss 0.50",
        "  [stdout] epoch 2: loss 0.33",
    ], out
    assert "  [stderr] no GPU here, on the CPU" in events, out
    assert events[-2:-1] == ["  [execute_result] 20"], out  # after the prints
    assert events[-1].startswith("  status ok in "), out
    assert "found by metadata: ['" in out
    assert "now expires" in out
    assert "removed" in out
    owner = extension.owner_of(None)  # type: ignore[arg-type]
    assert await extension.manager.list_sandboxes(owner) == []

    # A wrong token is refused with the server's own answer, not a traceback.
    refused = await run_example("rest_agent.py", server_url, "wrong", *arguments, timeout=60)
    assert refused.returncode == 1
    assert "POST http://127.0.0.1" in refused.stderr
    assert "403" in refused.stderr
    assert "Traceback" not in refused.stderr

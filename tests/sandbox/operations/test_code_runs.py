"""Code run in a sandbox's live kernel from the host (sandbox/operations/code_runs.py), against a real
engine: state kept between runs, outputs as a notebook shows them, the timeout's interrupt, the
caps, a stream and a caller who leaves, and every way a run can end without a result. The
REST route is tested in tests/server_extension/test_execute.py, the CLI in
tests/cli/test_code.py."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest

from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    OutputTooLargeError,
    SandboxConflictError,
    SandboxDiedError,
    SandboxNotFoundError,
)
from jupyter_sandbox.sandbox.kernel_link import execution as kernel_execution
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations import code_runs
from jupyter_sandbox.sandbox.operations.code_runs import (
    DEFAULT_TIMEOUT,
    CodeRequest,
    CodeResult,
    run_code,
    stream_code,
)


async def run(
    manager: SandboxManager, sandbox: Sandbox, code: str, timeout: float = 60
) -> CodeResult:
    return await run_code(manager, "alice", sandbox.sandbox_id, CodeRequest(code, timeout))


@pytest.fixture
async def runc_sandbox(manager: SandboxManager, purpose: str) -> Sandbox:
    return await manager.create("alice", runtime="runc", purpose=purpose)


# -- what a request may hold ------------------------------------------------------------------


def test_a_request_needs_only_code() -> None:
    assert CodeRequest.from_json({"code": "1"}) == CodeRequest("1", DEFAULT_TIMEOUT, False)
    given = CodeRequest.from_json({"code": "x", "timeout": 5, "stream": True})
    assert given == CodeRequest("x", 5.0, True)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([], "the body must be a JSON object"),
        ({}, "code must be a non-empty string of Python"),
        ({"code": "  \n"}, "code must be a non-empty string"),
        ({"code": 1}, "code must be a non-empty string"),
        ({"code": "1", "timeout": 0}, "timeout must be a number of seconds above 0"),
        ({"code": "1", "timeout": 3601}, "at most 3600"),
        ({"code": "1", "timeout": True}, "timeout must be a number"),
        ({"code": "1", "stream": "yes"}, "stream must be true"),
        ({"code": "1", "cwd": "/"}, "unknown field(s) cwd: a run takes code, timeout and stream"),
    ],
)
def test_bad_requests_say_what_to_fix(body: Any, says: str) -> None:
    with pytest.raises(InvalidRequestError, match=None) as caught:
        CodeRequest.from_json(body)
    assert says in caught.value.message


def test_code_past_its_cap_is_refused_with_where_to_put_it() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        CodeRequest.from_json({"code": "#" * (code_runs.MAX_CODE + 1)})
    assert "put larger programs in a file" in caught.value.message


def test_tracebacks_lose_their_terminal_colours() -> None:
    coloured = ["\x1b[0;31mZeroDivisionError\x1b[0m: division by zero", "\x1b[?25lplain"]
    assert kernel_execution.plain_traceback(coloured) == [
        "ZeroDivisionError: division by zero",
        "plain",
    ]


# -- running ----------------------------------------------------------------------------------


async def test_runs_share_the_interpreter_and_return_what_it_printed_and_computed(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    first = await run(
        manager, sandbox, "import sys\nx = 41\nprint('out'); print('err', file=sys.stderr)"
    )
    assert (first.status, first.stdout, first.stderr, first.outputs) == ("ok", "out\n", "err\n", [])
    second = await run(manager, sandbox, "x + 1")
    assert second.status == "ok"
    assert second.error is None
    assert second.outputs == [
        {"type": "execute_result", "data": {"text/plain": "42"}, "metadata": {}, "transient": {}}
    ]
    assert second.execution_count == first.execution_count + 1  # type: ignore[operator]
    assert not second.timed_out
    assert not second.still_running


async def test_an_exception_comes_back_as_data_with_a_plain_traceback(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    result = await run(manager, sandbox, "def f():\n    return 1 / 0\nf()")
    assert result.status == "error"
    assert result.error is not None
    assert (result.error["ename"], result.error["evalue"]) == (
        "ZeroDivisionError",
        "division by zero",
    )
    text = "\n".join(result.error["traceback"])
    assert "return 1 / 0" in text
    assert "\x1b" not in text
    assert (await run(manager, sandbox, "'still here'")).outputs[0]["data"] == {
        "text/plain": "'still here'"
    }


async def test_input_is_refused_rather_than_waited_for(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    result = await run(manager, runc_sandbox, "input('name? ')", timeout=20)
    assert result.status == "error"
    assert not result.timed_out
    assert result.error is not None
    assert result.error["ename"] == "StdinNotImplementedError"


async def test_a_figure_comes_back_as_a_png(manager: SandboxManager, runc_sandbox: Sandbox) -> None:
    result = await run(
        manager,
        runc_sandbox,
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()",
    )
    assert result.status == "ok", result.error
    [figure] = result.outputs
    assert figure["type"] == "display_data"
    assert base64.b64decode(figure["data"]["image/png"]).startswith(b"\x89PNG\r\n\x1a\n")


async def test_outputs_are_kept_as_a_notebook_would_show_them(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    code = """
from IPython.display import HTML, clear_output, display
print("gone")
display(HTML("<b>gone too</b>"))
clear_output()
handle = display(HTML("<i>first</i>"), display_id=True)
print("kept")
handle.update(HTML("<i>updated</i>"))
"""
    result = await run(manager, runc_sandbox, code)
    assert result.stdout == "kept\n"
    [shown] = result.outputs
    assert shown["data"]["text/html"] == "<i>updated</i>"
    waited = await run(
        manager,
        runc_sandbox,
        "from IPython.display import clear_output\nprint('old')\nclear_output(wait=True)\n"
        "print('new')",
    )
    assert waited.stdout == "new\n"
    updated = await run(
        manager,
        runc_sandbox,
        "from IPython.display import HTML, clear_output, display\n"
        "handle = display(HTML('a'), display_id=True)\n"
        "clear_output(wait=True)\nhandle.update(HTML('b'))",
    )
    [kept] = updated.outputs  # an update is not a new output: the clear still waits for one
    assert kept["data"]["text/html"] == "b"


async def test_past_its_timeout_the_code_is_interrupted_and_the_interpreter_keeps_its_state(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    await run(manager, sandbox, "kept = 'yes'")
    result = await run(
        manager, sandbox, "import time\nprint('began', flush=True)\ntime.sleep(60)", 1
    )
    assert result.timed_out
    assert not result.still_running
    assert result.status == "error"
    assert result.error is not None
    assert result.error["ename"] == "KeyboardInterrupt"
    assert result.stdout == "began\n"
    assert (await run(manager, sandbox, "kept")).outputs[0]["data"]["text/plain"] == "'yes'"


async def test_code_that_ignores_the_interrupt_is_reported_still_running(
    manager: SandboxManager, runc_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kernel_execution, "INTERRUPT_GRACE", 1.0)
    code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(3)"
    result = await run(manager, runc_sandbox, code, timeout=1)
    assert result.timed_out
    assert result.still_running
    assert result.status == "error"
    assert result.error is not None
    assert result.error["ename"] == "TimeoutError"
    assert "did not stop when interrupted" in result.error["evalue"]
    # It ends on its own; the next run waits for it, as a queued cell would.
    assert (await run(manager, runc_sandbox, "'after'", timeout=30)).status == "ok"


async def test_output_past_the_cap_interrupts_the_code(
    manager: SandboxManager, runc_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(code_runs, "MAX_OUTPUT", 64 * 1024)
    code = "import time\nfor i in range(100000):\n    print('x' * 1000, flush=True)\n    time.sleep(0.001)"
    with pytest.raises(OutputTooLargeError) as caught:
        await run(manager, runc_sandbox, code, timeout=120)
    assert '"stream": true' in caught.value.message
    # Interrupted, not left printing: the next run sees the loop stopped well before its end.
    after = await run(manager, runc_sandbox, "i", timeout=30)
    assert after.status == "ok"
    assert not after.timed_out  # its own timeout's interrupt did not stop the loop for it
    assert int(after.outputs[0]["data"]["text/plain"]) < 99999


async def test_runs_from_two_callers_queue_and_an_error_aborts_neither(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    results = await asyncio.gather(
        run(manager, runc_sandbox, "import time\ntime.sleep(0.5)\n1 / 0"),
        run(manager, runc_sandbox, "'second'"),
    )
    assert [r.status for r in results] == ["error", "ok"]
    assert results[1].outputs[0]["data"]["text/plain"] == "'second'"


# -- streamed ---------------------------------------------------------------------------------


async def test_a_stream_sends_each_output_as_it_comes_then_the_result(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    code = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.3)\n'done'"
    request = CodeRequest(code, 60, stream=True)
    events = []
    async for name, data in stream_code(manager, "alice", sandbox.sandbox_id, request):
        events.append((name, data, time.monotonic()))
    names = [name for name, _, _ in events]
    assert names == ["stdout", "stdout", "stdout", "display", "result"]
    assert [data["text"] for _, data, _ in events[:3]] == ["0\n", "1\n", "2\n"]
    assert events[2][2] - events[0][2] > 0.4  # sent as printed, not all at the end
    result = events[-1][1]
    assert result["status"] == "ok"
    assert result["stdout"] == ""
    assert result["outputs"] == []


async def test_a_caller_who_leaves_a_stream_interrupts_the_code(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    code = "import time\nfor step in range(600):\n    print(step, flush=True)\n    time.sleep(0.1)"
    events = stream_code(manager, "alice", runc_sandbox.sandbox_id, CodeRequest(code, 120, True))
    async for name, _ in events:
        assert name == "stdout"
        break
    await events.aclose()
    after = await run(manager, runc_sandbox, "step", timeout=30)
    assert after.status == "ok"
    assert not after.timed_out
    assert int(after.outputs[0]["data"]["text/plain"]) < 599


async def test_what_fails_before_a_stream_begins_is_raised(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    with pytest.raises(SandboxNotFoundError):
        async for _ in stream_code(manager, "bob", runc_sandbox.sandbox_id, CodeRequest("1")):
            pass


# -- runs that end without a result -----------------------------------------------------------


async def test_only_the_owner_of_a_running_sandbox_can_run_code(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    with pytest.raises(SandboxNotFoundError):
        await run_code(manager, "bob", runc_sandbox.sandbox_id, CodeRequest("1"))
    await manager.pause("alice", runc_sandbox.sandbox_id)
    with pytest.raises(SandboxConflictError, match="resume it first"):
        await run(manager, runc_sandbox, "1")
    await manager.resume("alice", runc_sandbox.sandbox_id)
    assert (await run(manager, runc_sandbox, "1")).status == "ok"


async def test_a_kernel_that_dies_during_the_run_ends_it_with_the_cause(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    with pytest.raises(SandboxDiedError, match="ended without a result: the sandbox stopped"):
        await run(manager, runc_sandbox, "import os, time\ntime.sleep(0.5)\nos._exit(3)", 60)


async def test_a_restart_during_the_run_ends_it_and_says_so(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    running = asyncio.ensure_future(run(manager, runc_sandbox, "import time\ntime.sleep(60)", 90))
    await asyncio.sleep(1.0)
    await manager.restart_kernel("alice", runc_sandbox.sandbox_id)
    with pytest.raises(SandboxConflictError, match="its interpreter was restarted"):
        await running
    assert (await run(manager, runc_sandbox, "'fresh'")).status == "ok"


# -- runs queued behind other code -------------------------------------------------------------


async def test_a_queued_runs_timeout_counts_from_its_start_and_spares_the_code_ahead(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    ahead = asyncio.ensure_future(run(manager, runc_sandbox, "import time\ntime.sleep(3)\n'ahead'"))
    await asyncio.sleep(0.5)
    queued = await run(manager, runc_sandbox, "'queued'", timeout=1)
    first = await ahead
    assert first.status == "ok"  # not interrupted by the queued run's short timeout
    assert not first.timed_out
    assert queued.status == "ok"
    assert not queued.timed_out
    assert queued.queued > 1  # it waited for the code ahead, longer than its own timeout


async def test_a_run_given_up_while_queued_is_stopped_when_it_starts(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    ahead = asyncio.ensure_future(run(manager, runc_sandbox, "import time\ntime.sleep(5)\n'ahead'"))
    await asyncio.sleep(0.5)
    code = "import time\ntime.sleep(60)\nlate = True"
    abandoned = asyncio.ensure_future(run(manager, runc_sandbox, code, timeout=120))
    await asyncio.sleep(0.5)
    abandoned.cancel()
    # Its caller is let go at once, not when the code ahead of it ends (asyncio.wait_for on
    # a run waits for the cancelled run to finish).
    await asyncio.wait({abandoned}, timeout=4)
    assert abandoned.cancelled()
    assert not ahead.done()
    first = await ahead
    assert first.status == "ok"
    assert not first.timed_out
    # Interrupted as it started: the next run is not kept waiting for its minute of sleep.
    after = await run(manager, runc_sandbox, "'late' in globals()", timeout=20)
    assert not after.timed_out
    assert after.outputs[0]["data"]["text/plain"] == "False"
    assert manager.kernel_clients.counts.closed >= 1  # the abandoned run's, once it stopped


async def test_a_display_updated_often_counts_once_against_the_cap(
    manager: SandboxManager, runc_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(code_runs, "MAX_OUTPUT", 64 * 1024)
    code = """
from IPython.display import HTML, display
bar = display(HTML(""), display_id=True)
for step in range(200):
    bar.update(HTML(f"<progress value={step}>" + "." * 2000))
"""
    result = await run(manager, runc_sandbox, code)
    assert result.status == "ok"
    [bar] = result.outputs
    assert bar["data"]["text/html"].startswith("<progress value=199>")

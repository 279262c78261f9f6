"""Sandbox.run_code: Execution as the API answers it, an exception as data that
raise_for_error raises, and a streamed run whose callbacks see each piece in order as it
comes, gathered into the same Execution a plain run gives (the gathering's rules alone:
tests/protocol/test_cell_output.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from jupyter_sandbox.client import CodeFailedError, Execution, SandboxClient

RESULT = {
    "status": "ok",
    "execution_count": 3,
    "stdout": "",
    "stderr": "",
    "outputs": [],
    "error": None,
    "timed_out": False,
    "still_running": False,
    "duration": 0.5,
    "queued": 0.0,
}


def test_raise_for_error_says_how_the_run_ended() -> None:
    ok = Execution.from_answer(RESULT)
    assert ok.raise_for_error() is ok
    assert ok.text is None  # no last expression

    error = {"ename": "ValueError", "evalue": "bad", "traceback": ["...", "ValueError: bad"]}
    raised = Execution.from_answer({**RESULT, "status": "error", "error": error})
    with pytest.raises(CodeFailedError, match=r"raised ValueError: bad \(its traceback ends"):
        raised.raise_for_error()

    interrupt = {"ename": "KeyboardInterrupt", "evalue": "", "traceback": []}
    late = Execution.from_answer(
        {**RESULT, "status": "error", "error": interrupt} | {"timed_out": True}
    )
    with pytest.raises(CodeFailedError, match="past its timeout and was interrupted") as caught:
        late.raise_for_error()
    assert caught.value.execution is late
    stuck = Execution.from_answer(
        {**RESULT, "status": "error", "timed_out": True} | {"still_running": True}
    )
    with pytest.raises(CodeFailedError, match=r"restart the interpreter \(sandbox.restart\(\)\)"):
        stuck.raise_for_error()
    with pytest.raises(CodeFailedError, match="status 'aborted'"):
        Execution.from_answer({**RESULT, "status": "aborted"}).raise_for_error()


@pytest.mark.integration
@pytest.mark.runc
async def test_runs_share_the_interpreter_and_return_results_and_errors(
    client: SandboxClient,
) -> None:
    def scenario() -> None:
        with client.create(runtime="runc") as sandbox:
            first = sandbox.run_code("import math\nr = 2\nprint('radius', r)")
            assert (first.status, first.stdout, first.outputs, first.error) == (
                "ok",
                "radius 2\n",
                [],
                None,
            )
            area = sandbox.run_code("math.pi * r ** 2")
            assert area.text == "12.566370614359172"
            assert area.execution_count == first.execution_count + 1  # type: ignore[operator]
            assert area.raise_for_error() is area

            failed = sandbox.run_code("r / 0")
            assert (failed.status, failed.ok, failed.text) == ("error", False, None)
            assert failed.error is not None
            assert str(failed.error) == "ZeroDivisionError: division by zero"
            assert failed.error.traceback[-1] == "ZeroDivisionError: division by zero"
            with pytest.raises(CodeFailedError, match="raised ZeroDivisionError") as caught:
                failed.raise_for_error()
            assert caught.value.error == failed.error

            late = sandbox.run_code("import time; time.sleep(30)", timeout=1)
            assert (late.timed_out, late.still_running) == (True, False)
            assert late.error is not None
            assert late.error.ename == "KeyboardInterrupt"
            assert sandbox.run_code("r").text == "2"  # the interrupt kept the state

            # A callback that raises ends the run: the connection closes and the server
            # interrupts the code, so the interpreter is free at once for the next run.
            def enough(text: str) -> None:
                raise LookupError(f"enough after {text!r}")

            started = time.monotonic()
            with pytest.raises(LookupError, match=r"enough after 'tick\\n'"):
                sandbox.run_code("import time\nprint('tick')\ntime.sleep(60)", on_stdout=enough)
            assert sandbox.run_code("r", timeout=20).text == "2"
            assert time.monotonic() - started < 30
        assert client.list() == []

    await asyncio.to_thread(scenario)


@pytest.mark.integration
@pytest.mark.runc
async def test_a_streamed_run_calls_back_in_order_as_output_comes(client: SandboxClient) -> None:
    code = (
        "import sys, time\n"
        "from IPython.display import HTML, display\n"
        "print('first', flush=True)\n"
        "time.sleep(1.5)\n"
        "print('to stderr', file=sys.stderr, flush=True)\n"
        "display(HTML('<b>bold</b>'))\n"
        "print('last line')\n"
        "6 * 7"
    )
    seen: list[tuple[str, Any, float]] = []

    def scenario() -> tuple[Execution, Execution, float]:
        with client.create(runtime="runc") as sandbox:
            execution = sandbox.run_code(
                code,
                on_stdout=lambda text: seen.append(("stdout", text, time.monotonic())),
                on_stderr=lambda text: seen.append(("stderr", text, time.monotonic())),
                on_display=lambda data: seen.append(("display", data, time.monotonic())),
            )
            ended = time.monotonic()
            plain = sandbox.run_code(code)  # the same code, answered whole
        assert client.list() == []
        return execution, plain, ended

    execution, plain, ended = await asyncio.to_thread(scenario)
    assert [(kind, what) for kind, what, _ in seen if kind != "display"] == [
        ("stdout", "first\n"),
        ("stderr", "to stderr\n"),
        ("stdout", "last line\n"),
    ]
    displays = [what for kind, what, _ in seen if kind == "display"]
    assert [d["type"] for d in displays] == ["display_data", "execute_result"]
    assert displays[0]["data"]["text/html"] == "<b>bold</b>"
    order = [kind for kind, _, _ in seen]
    assert order.index("display") > order.index("stderr")  # displays come in their place
    # The first line came as it was printed, well before the run ended.
    assert ended - seen[0][2] > 0.5, seen
    # Gathered as the server gathers a plain answer.
    assert (execution.stdout, execution.stderr) == (plain.stdout, plain.stderr)
    assert execution.stdout == "first\nlast line\n"
    assert execution.outputs == plain.outputs
    assert execution.text == plain.text == "42"
    assert execution.status == "ok"

"""/api/sandboxes/{id}/execute, against a real server and a real engine: code run in the
sandbox's live interpreter. Every answer is checked against openapi.yaml by ``api``."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import pytest

from jupyter_sandbox.sandbox.kernel_link import link
from jupyter_sandbox.sandbox.operations import code_runs
from tests.conftest import BOTH_RUNTIMES
from tests.memory_growth import peak_growth
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.openapi_check import EVENT_STREAM
from tests.server_extension.test_auth_and_spec import with_named_users
from tests.server_extension.test_commands import hang_up_after, stream
from tests.server_extension.test_snapshots import ALICE, BOB

pytestmark = pytest.mark.integration


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return with_named_users(jp_server_config)


async def execute(fetch: Fetch, sandbox_id: str, body: Any, **who: Any) -> tuple[int, Any]:
    return await api(fetch, "POST", sandbox_id, "execute", body=body, **(who or ALICE))


async def run(fetch: Fetch, sandbox_id: str, code: str, **fields: Any) -> dict[str, Any]:
    """Run ``code`` as alice; its result, which must be a 200."""
    status, result = await execute(fetch, sandbox_id, {"code": code, **fields})
    assert status == 200, result
    assert isinstance(result, dict), result
    return result


async def new_sandbox(fetch: Fetch, runtime: str = "runc") -> str:
    status, made = await api(fetch, "POST", body={"runtime": runtime}, **ALICE)
    assert status == 201, made
    return str(made["id"])


def plain(result: dict[str, Any]) -> list[str]:
    """The text/plain of each rich output of a result."""
    return [output["data"]["text/plain"] for output in result["outputs"]]


@pytest.mark.parametrize("runtime", BOTH_RUNTIMES)
async def test_runs_share_the_interpreter_and_show_what_a_notebook_shows(
    jp_fetch: Fetch, runtime: str
) -> None:
    sandbox_id = await new_sandbox(jp_fetch, runtime)

    first = await run(jp_fetch, sandbox_id, "x = 41")
    assert (first["status"], first["outputs"], first["error"]) == ("ok", [], None), first
    second = await run(jp_fetch, sandbox_id, "x + 1")
    assert second["status"] == "ok", second
    assert [o["type"] for o in second["outputs"]] == ["execute_result"], second
    assert plain(second) == ["42"]
    assert second["execution_count"] == first["execution_count"] + 1

    # Printed text, each stream whole; rich output in order, as the notebook would end up
    # showing it: an updated display shows its last data, cleared output is gone.
    code = (
        "import sys\n"
        "from IPython.display import HTML, clear_output, display\n"
        "print('gone'); clear_output()\n"
        "print('out'); print('err', file=sys.stderr)\n"
        "display(HTML('<b>bold</b>'))\n"
        "shown = display('one', display_id=True)\n"
        "shown.update('two')\n"
        "'last'"
    )
    shown = await run(jp_fetch, sandbox_id, code)
    assert (shown["stdout"], shown["stderr"]) == ("out\n", "err\n"), shown
    types = [o["type"] for o in shown["outputs"]]
    assert types == ["display_data", "display_data", "execute_result"], shown
    assert shown["outputs"][0]["data"]["text/html"] == "<b>bold</b>"
    assert plain(shown)[1:] == ["'two'", "'last'"]
    assert shown["outputs"][1]["transient"]["display_id"]

    # Streamed: the same kinds of output as events, then the result without them.
    ran = await stream(jp_fetch, sandbox_id, {"code": code}, route="execute")
    assert (ran.status, ran.content_type) == (200, EVENT_STREAM), ran
    names = [name for _, name, _ in ran.events]
    assert names[0] == "stdout"
    assert names[1] == "clear", names
    assert names[-1] == "result", names
    kinds = [data["type"] for _, name, data in ran.events if name == "display"]
    assert kinds == ["display_data", "display_data", "update_display_data", "execute_result"]
    result = ran.last()[1]
    assert (result["status"], result["stdout"], result["outputs"]) == ("ok", "", []), result
    assert ran.text("stdout") == "gone\nout\n"


async def test_an_exception_is_a_result_with_a_plain_traceback(jp_fetch: Fetch) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    code = "def divide(a, b):\n    return a / b\n\nprint('before')\ndivide(1, 0)"
    result = await run(jp_fetch, sandbox_id, code)
    assert (result["status"], result["stdout"], result["timed_out"]) == ("error", "before\n", False)
    error = result["error"]
    assert (error["ename"], error["evalue"]) == ("ZeroDivisionError", "division by zero"), error
    traceback = "\n".join(error["traceback"])
    assert "divide(1, 0)" in traceback
    assert "return a / b" in traceback
    assert "\x1b" not in traceback, traceback  # no terminal colours
    # An error does not stop the next run.
    assert plain(await run(jp_fetch, sandbox_id, "'next'")) == ["'next'"]


async def test_code_past_its_timeout_is_interrupted_and_the_interpreter_kept(
    jp_fetch: Fetch,
) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    await run(jp_fetch, sandbox_id, "kept = 'still here'")
    result = await run(jp_fetch, sandbox_id, "import time; time.sleep(30)", timeout=1)
    assert (result["timed_out"], result["still_running"]) == (True, False), result
    assert (result["status"], result["error"]["ename"]) == ("error", "KeyboardInterrupt"), result
    assert result["duration"] < 30  # it did not sleep to the end
    after = await run(jp_fetch, sandbox_id, "kept", timeout=20)
    assert (after["timed_out"], plain(after)) == (False, ["'still here'"]), after


async def test_a_streamed_run_sends_its_output_as_it_comes(jp_fetch: Fetch) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    code = (
        "import sys, time\n"
        "print('first', flush=True)\n"
        "time.sleep(1)\n"
        "print('second', flush=True)\n"
        "print('oops', file=sys.stderr, flush=True)\n"
        "6 * 7"
    )
    ran = await stream(jp_fetch, sandbox_id, {"code": code}, route="execute")
    assert (ran.status, ran.content_type) == (200, EVENT_STREAM), ran
    assert [(name, data) for _, name, data in ran.events][:3] == [
        ("stdout", {"text": "first\n"}),
        ("stdout", {"text": "second\n"}),
        ("stderr", {"text": "oops\n"}),
    ], ran.events
    # The first line came while the code still slept: before the second, and the answer's end.
    assert ran.events[1][0] - ran.events[0][0] >= 0.8, ran.events
    assert ran.ended - ran.events[0][0] >= 0.8
    name, display = ran.events[3][1:]
    assert (name, display["type"], display["data"]) == (
        "display",
        "execute_result",
        {"text/plain": "42"},
    ), ran.events
    name, result = ran.last()
    assert (name, result["status"], result["timed_out"]) == ("result", "ok", False), result
    assert (result["stdout"], result["stderr"], result["outputs"]) == ("", "", [])
    assert result["duration"] >= 1
    assert len(ran.events) == 5, ran.events

    # An exception is still a result, streamed; what fails before any output is an ordinary
    # error answer (another user's sandbox: not found).
    ran = await stream(jp_fetch, sandbox_id, {"code": "1 / 0"}, route="execute")
    name, result = ran.last()
    assert (name, result["status"], result["error"]["ename"]) == (
        "result",
        "error",
        "ZeroDivisionError",
    ), ran.events
    ran = await stream(jp_fetch, sandbox_id, {"code": "1"}, route="execute", **BOB)
    assert (ran.status, ran.content_type) == (404, "application/json"), ran


async def test_a_client_that_leaves_a_stream_interrupts_the_code(
    jp_fetch: Fetch, jp_http_port: int, jp_base_url: str
) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    await run(jp_fetch, sandbox_id, "x = 5")
    loop = (
        "import time\n"
        "i = -1\n"
        "print('started', flush=True)\n"
        "for i in range(60):\n"
        "    time.sleep(1)\n"
    )
    path = f"{jp_base_url}api/sandboxes/{sandbox_id}/execute"
    await hang_up_after(jp_http_port, path, {"code": loop, "timeout": 900}, b'"started\\n"')

    # Runs queue in the kernel: had the loop gone on, this one would wait its 10 s out and
    # interrupt it itself (timed_out; 10 s and the interrupt's grace stay within the HTTP
    # client's 20 s). It ran at once instead, the loop stopped early.
    after = await run(jp_fetch, sandbox_id, "x, i", timeout=10)
    assert (after["status"], after["timed_out"]) == ("ok", False), after
    x, i = ast.literal_eval(plain(after)[0])
    assert x == 5
    assert i < 59, after


async def test_a_bad_request_says_what_to_send_and_runs_nothing(jp_fetch: Fetch) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    ran = "ran = True"  # what would show that a refused request ran
    bodies = [
        ('"x = 1"', "must be a JSON object"),
        ("{not json", "not valid JSON"),
        ("[" * 100_000, "nested too deeply"),  # json.loads: RecursionError, a 500
        ('{"code": "1", "code": "ran = True"}', "names a key twice"),  # json.loads: the last
        ('{"code": "ran = True", "timeout": NaN}', "NaN is not a JSON number"),
        ({}, "code must be a non-empty string"),
        ({"code": "  \n"}, "code must be a non-empty string"),
        ({"code": 5}, "code must be a non-empty string"),
        ({"code": "#" * (code_runs.MAX_CODE + 1)}, "code may hold at most 4 Mi characters"),
        ({"code": ran, "timeout": 0}, "timeout must be a number of seconds above 0"),
        ({"code": ran, "timeout": 7200}, "at most 3600"),
        ({"code": ran, "timeout": True}, "timeout must be"),
        ({"code": ran, "cells": [ran]}, "unknown field(s) cells"),
        ({"code": ran, "stream": "yes"}, "stream must be true"),
        ({"code": ran, "stream": None}, "not None"),
    ]
    for body, says in bodies:
        status, error = await execute(jp_fetch, sandbox_id, body)
        assert (status, error["code"]) == (400, "invalid_request"), (body, error)
        assert says in error["message"], (says, error["message"])
    assert plain(await run(jp_fetch, sandbox_id, "'ran' in globals()")) == ["False"]


async def test_another_users_sandbox_is_not_found(jp_fetch: Fetch) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    for stream_it in (False, True):
        body = {"code": "stolen = True", "stream": stream_it}
        status, error = await execute(jp_fetch, sandbox_id, body, **BOB)
        assert (status, error["code"]) == (404, "sandbox_not_found"), error
    status, error = await execute(jp_fetch, "0123456789ab", {"code": "1"})
    assert (status, error["code"]) == (404, "sandbox_not_found"), error
    assert plain(await run(jp_fetch, sandbox_id, "'stolen' in globals()")) == ["False"]


async def test_a_paused_sandbox_is_a_conflict_naming_the_fix(jp_fetch: Fetch) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    await run(jp_fetch, sandbox_id, "x = 'before the pause'")
    status, _ = await api(jp_fetch, "POST", sandbox_id, "pause", **ALICE)
    assert status == 200
    for stream_it in (False, True):  # streamed too: an ordinary answer, nothing was sent yet
        body = {"code": "x", "stream": stream_it}
        status, error = await execute(jp_fetch, sandbox_id, body)
        assert (status, error["code"]) == (409, "sandbox_conflict"), error
        assert "resume it first" in error["message"]
    status, _ = await api(jp_fetch, "POST", sandbox_id, "resume", **ALICE)
    assert status == 200
    assert plain(await run(jp_fetch, sandbox_id, "x", timeout=20)) == ["'before the pause'"]


async def test_output_past_the_cap_is_refused_and_the_code_interrupted(
    jp_fetch: Fetch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server runs in this process (pytest-jupyter), so a smaller cap is the server's.
    cap = 64 * 1024
    monkeypatch.setattr(code_runs, "MAX_OUTPUT", cap)
    sandbox_id = await new_sandbox(jp_fetch)
    status, error = await execute(jp_fetch, sandbox_id, {"code": f"print('a' * {cap + 1})"})
    assert (status, error["code"]) == (413, "output_too_large"), error
    assert '"stream": true' in error["message"]
    assert "/files/content" in error["message"]

    # Output past the cap interrupts the code, however long it would go on: the next run
    # does not wait behind it (it would time out and interrupt it itself).
    endless = "n = 0\nwhile True:\n    n += 1\n    print('x' * 1000)"
    status, error = await execute(jp_fetch, sandbox_id, {"code": endless, "timeout": 600})
    assert (status, error["code"]) == (413, "output_too_large"), error
    after = await run(jp_fetch, sandbox_id, "n > 0", timeout=20)
    assert (after["timed_out"], plain(after)) == (False, ["True"]), after

    # Streamed, the output has no cap.
    ran = await stream(jp_fetch, sandbox_id, {"code": f"print('a' * {4 * cap})"}, route="execute")
    assert ran.status == 200, ran.body
    assert ran.text("stdout") == "a" * (4 * cap) + "\n"
    assert ran.last()[0] == "result", ran.events


@pytest.mark.checklist(
    row=48,
    attack="an oversized exception from a code run over REST: raise ValueError of 4x the "
    "output cap (issue 31: a 20 MB error was answered 200 where a 20 MB print gets 413)",
    expected="413 output_too_large, as for a large print, saying what to do; a small "
    "exception is still a 200 result with its traceback; the interpreter runs on",
)
@pytest.mark.parametrize("runtime", BOTH_RUNTIMES)
async def test_an_exception_past_the_cap_is_refused_as_a_large_print_is(
    jp_fetch: Fetch, monkeypatch: pytest.MonkeyPatch, runtime: str, observe: Callable[..., None]
) -> None:
    cap = 64 * 1024
    monkeypatch.setattr(code_runs, "MAX_OUTPUT", cap)
    sandbox_id = await new_sandbox(jp_fetch, runtime)
    status, error = await execute(
        jp_fetch, sandbox_id, {"code": f"raise ValueError('e' * {4 * cap})"}
    )
    assert status == 413, (status, str(error)[:500])  # was a 200 carrying the exception
    assert error["code"] == "output_too_large", error
    assert "exception" in error["message"]
    assert "/files/content" in error["message"]
    assert len(str(error)) < 2048  # the answer does not carry the exception
    # Output and exception together: each under the cap, past it in all.
    half = f"print('o' * {cap // 2 + 1}); raise ValueError('e' * {cap // 2})"
    status, error = await execute(jp_fetch, sandbox_id, {"code": half})
    assert status == 413, (status, str(error)[:500])  # was a 200 carrying the exception
    assert error["code"] == "output_too_large", error
    small = await run(jp_fetch, sandbox_id, "raise ValueError('small')")
    assert (small["status"], small["error"]["evalue"]) == ("error", "small"), small
    assert plain(await run(jp_fetch, sandbox_id, "6 * 7")) == ["42"]
    observe(
        f"an exception of {4 * cap >> 10} KiB and output plus exception past the {cap >> 10} KiB "
        "cap: 413 output_too_large each; a small exception a 200 result; the interpreter answered",
        cases=2,
    )


@pytest.mark.checklist(
    row=10,
    attack="a code run over REST whose kernel sends the server a message of 256 MB: one part, "
    "or one 1 MB buffer named in 256 parts; the server's clients take 8 MB here "
    "(kernel_link.link.MAX_MESSAGE_BYTES)",
    expected="the server never holds it (its memory grows by far less): the run is told it was "
    "dropped, and the next run works, from the same interpreter",
)
@pytest.mark.parametrize(
    "buffers", ["[memoryview(bytearray(256 * 2**20))]", "[memoryview(bytearray(2**20))] * 256"]
)
async def test_a_message_too_large_is_never_held_by_the_server(
    jp_fetch: Fetch, monkeypatch: pytest.MonkeyPatch, observe: Callable[..., None], buffers: str
) -> None:
    monkeypatch.setattr(link, "MAX_MESSAGE_BYTES", 8 * 2**20)  # the server runs in this process
    sandbox_id = await new_sandbox(jp_fetch)
    await run(jp_fetch, sandbox_id, "kept = 'still here'")
    huge = (
        "from IPython import get_ipython\n"
        "kernel = get_ipython().kernel\n"
        "kernel.session.send(kernel.iopub_socket, 'display_data', {'data': {}, 'metadata': {}},"
        f" parent=kernel.get_parent(), buffers={buffers})\n"
    )
    with peak_growth() as grown:
        result = await run(jp_fetch, sandbox_id, huge, timeout=5)
    # The connection was cut: the run ends at its timeout, or with the idle status the kernel
    # sent once ZMQ had connected again; either way it says what was lost.
    assert "it was dropped" in result["stderr"], result
    assert grown() < 128 * 2**20, grown()
    after = await run(jp_fetch, sandbox_id, "kept", timeout=20)
    assert (after["timed_out"], plain(after)) == (False, ["'still here'"]), after
    observe(
        f"{buffers}: the run was told it was dropped; the server's memory grew by "
        f"{grown() >> 20} MiB at most while the 256 MB were sent; the next run answered from "
        "the same interpreter"
    )

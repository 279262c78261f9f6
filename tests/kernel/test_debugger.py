"""The JupyterLab debugger through the proxy: an image that keeps debugpy (``build-image
--requirements`` listing it) gives kernels that advertise the debugger and serve a whole debug
session, as JupyterLab drives one: debug_request/debug_reply on control, debug_event on iopub.
The standard image leaves debugpy out, and its kernels advertise no debugger."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from tests.kernel.kernels import running_kernel
from tests.kernel.sandbox_env import notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration

TIMEOUT = 60
CELL = "def add(a, b):\n    total = a + b\n    return total\n\nresult = add(2, 3)\n"
# What JupyterLab sends first (@jupyterlab/debugger's session.ts).
INITIALIZE = {
    "clientID": "jupyterlab",
    "clientName": "JupyterLab",
    "adapterID": "python",
    "pathFormat": "path",
    "linesStartAt1": True,
    "columnsStartAt1": True,
    "supportsVariableType": True,
    "supportsVariablePaging": True,
    "supportsRunInTerminalRequest": True,
    "locale": "en",
}


@pytest.fixture
def env(purpose: str) -> Iterator[Path]:
    with sandbox_kernel_env(purpose) as state_dir:
        yield state_dir


class DebugClient:
    """Debug Adapter Protocol requests over the control channel, as JupyterLab sends them."""

    def __init__(self, kc: BlockingKernelClient) -> None:
        self.kc = kc
        self.seq = itertools.count(1)

    def request(self, command: str, **arguments: Any) -> dict[str, Any]:
        content = {"type": "request", "seq": next(self.seq), "command": command}
        msg = self.kc.session.msg("debug_request", {**content, "arguments": arguments})
        self.kc.control_channel.send(msg)
        while True:
            reply = self.kc.control_channel.get_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                assert reply["msg_type"] == "debug_reply"
                body: dict[str, Any] = reply["content"]
                assert body.get("success"), body
                return body

    def event(self, name: str) -> dict[str, Any]:
        while True:
            msg = self.kc.get_iopub_msg(timeout=TIMEOUT)
            if msg["msg_type"] == "debug_event" and msg["content"].get("event") == name:
                body: dict[str, Any] = msg["content"]["body"]
                return body


def supported_features(kc: BlockingKernelClient) -> list[str]:
    features: list[str] = kc.kernel_info(reply=True)["content"].get("supported_features", [])
    return features


def test_a_breakpoint_stops_the_cell_and_shows_its_variables(
    env: Path, runtime: str, debugger_image: str
) -> None:
    with running_kernel(
        notebook_dir(env), JUPYTER_SANDBOX_RUNTIME=runtime, JUPYTER_SANDBOX_IMAGE=debugger_image
    ) as (_, kc):
        assert "debugger" in supported_features(kc)
        debug = DebugClient(kc)
        debug.request("initialize", **INITIALIZE)
        debug.request("attach")
        source = debug.request("dumpCell", code=CELL)["body"]["sourcePath"]
        assert source.startswith("/tmp/")  # the cell's file is the sandbox's, in its own /tmp
        placed = debug.request("setBreakpoints", breakpoints=[{"line": 2}], source={"path": source})
        assert placed["body"]["breakpoints"][0]["verified"]
        debug.request("configurationDone")

        cell = kc.execute(CELL)
        stopped = debug.event("stopped")
        assert stopped["reason"] == "breakpoint"
        thread = stopped["threadId"]
        frame = debug.request("stackTrace", threadId=thread)["body"]["stackFrames"][0]
        assert (frame["name"], frame["line"], frame["source"]["path"]) == ("add", 2, source)
        scope = debug.request("scopes", frameId=frame["id"])["body"]["scopes"][0]
        variables = debug.request("variables", variablesReference=scope["variablesReference"])
        assert {v["name"]: v["value"] for v in variables["body"]["variables"]} == {
            "a": "2",
            "b": "3",
        }

        debug.request("continue", threadId=thread)
        reply = kc.get_shell_msg(timeout=TIMEOUT)
        assert reply["parent_header"]["msg_id"] == cell
        assert reply["content"]["status"] == "ok"
        debug.request("disconnect", restart=False, terminateDebuggee=True)
        after = kc.execute_interactive("assert result == 5", timeout=TIMEOUT)
        assert after["content"]["status"] == "ok"  # the kernel works on without the debugger


def test_the_standard_image_offers_no_debugger(env: Path) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME="runc") as (_, kc):
        assert "debugger" not in supported_features(kc)

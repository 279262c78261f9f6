"""Rows 10 and 47: output floods from a cell, through the proxy kernel as JupyterLab reaches it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from tests.conftest import purpose_label
from tests.kernel.kernels import run, running_kernel, value_of
from tests.kernel.sandbox_env import notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration

FLOOD_MB = 64


def peak_memory_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return -1


@pytest.mark.checklist(
    row=10,
    attack=f"output flood: a cell printing {FLOOD_MB} MB",
    expected="what reaches the frontend is cut at the cell output cap with a notice saying why; "
    "the cell and the kernel run on; the proxy's memory stays bounded",
)
def test_row10_output_flood_is_capped(
    request: pytest.FixtureRequest, runtime: str, observe: Callable[..., None]
) -> None:
    purpose = purpose_label(request.node.nodeid)
    with (
        sandbox_kernel_env(purpose, max_cell_output="1m") as state_dir,
        running_kernel(notebook_dir(state_dir), JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc),
    ):
        out, reply = run(
            kc,
            f"line = 'x' * 2**20\nfor _ in range({FLOOD_MB}): print(line)\nprint('cell ended')",
            timeout=240,
        )
        assert reply["status"] == "ok"
        assert "this cell's output passed 1m" in out
        assert len(out.encode()) < 2**20 + 1024
        assert "cell ended" not in out  # past the cap: not shown, yet the cell finished
        assert value_of(kc, "6 * 7") == "42"
        peak = peak_memory_mb(km.provisioner.pid)  # type: ignore[union-attr]
    observe(
        f"{FLOOD_MB} MB printed; {len(out.encode()) >> 10} KiB reached the frontend, ending with "
        f"the notice; the cell finished and the kernel answered; proxy peak memory {peak} MB",
        cases=1,
    )


# A cell that sends past the cap what the cap did not count (issue 31): tracebacks (error
# messages), comm messages, and stream output under a fresh parent msg_id each, each kind
# HOLE_MB messages of 1 MiB, sent as the kernel's own session sends them.
HOLE_MB = 16
HOLES_CELL = f"""
import uuid
from IPython import get_ipython
ip = get_ipython()
kernel, big = ip.kernel, 'e' * 2**20
for _ in range({HOLE_MB}):
    try:
        raise ValueError(big)
    except ValueError:
        ip.showtraceback()
for _ in range({HOLE_MB}):
    kernel.session.send(kernel.iopub_socket, 'comm_msg', {{'comm_id': 'c', 'data': {{'d': big}}}},
                        parent=kernel.get_parent(), ident=b'comm-c')
for _ in range({HOLE_MB}):
    forged = {{'header': {{'msg_id': uuid.uuid4().hex, 'msg_type': 'execute_request'}}}}
    kernel.session.send(kernel.iopub_socket, 'stream', {{'name': 'stdout', 'text': big}},
                        parent=forged, ident=b'stream')
print('cell ended')
"""


def iopub_until_idle(kc: Any, msg_id: str, timeout: float) -> tuple[int, list[dict[str, Any]]]:
    """Every iopub message the frontend receives until ``msg_id``'s idle, whatever its parent:
    the bytes they hold (content, metadata, buffers) and the messages."""
    received: list[dict[str, Any]] = []
    size = 0
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        received.append(msg)
        size += len(json.dumps(msg["content"])) + len(json.dumps(msg["metadata"]))
        size += sum(len(buffer) for buffer in msg.get("buffers") or [])
        if (
            msg["msg_type"] == "status"
            and msg["parent_header"].get("msg_id") == msg_id
            and msg["content"].get("execution_state") == "idle"
        ):
            return size, received


@pytest.fixture
def capped_kernel(request: pytest.FixtureRequest, runtime: str) -> Iterator[BlockingKernelClient]:
    """A sandboxed kernel of ``runtime`` whose cells' output to frontends is capped at 1 MiB."""
    purpose = purpose_label(request.node.nodeid)
    with (
        sandbox_kernel_env(purpose, max_cell_output="1m") as state_dir,
        running_kernel(notebook_dir(state_dir), JUPYTER_SANDBOX_RUNTIME=runtime) as (_, kc),
    ):
        yield kc


def run_to_reply(
    kc: Any, code: str, timeout: float
) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
    """Run ``code``: the iopub bytes and messages until its idle (iopub_until_idle), and every
    shell message until its execute_reply, which comes last (kernel_info's may come first)."""
    msg_id = kc.execute(code)
    size, received = iopub_until_idle(kc, msg_id, timeout)
    replies = [kc.get_shell_msg(timeout=60)]
    while replies[-1]["parent_header"].get("msg_id") != msg_id or (
        replies[-1]["msg_type"] != "execute_reply"
    ):
        replies.append(kc.get_shell_msg(timeout=60))
    return size, received, replies


@pytest.mark.checklist(
    row=47,
    attack=f"output the cap did not count: {HOLE_MB} tracebacks, {HOLE_MB} comm messages and "
    f"{HOLE_MB} stream messages under forged parent ids, 1 MiB each, and one exception of "
    f"{HOLE_MB} MB (on iopub and in its execute_reply), under a 1 MiB cap",
    expected="every iopub message counts against the running cell, whatever parent it names: "
    "what reaches the frontend stays near the cap, with the notice; the cell and kernel run on",
)
def test_row47_errors_comms_and_forged_parents_count_against_the_cap(
    capped_kernel: BlockingKernelClient, observe: Callable[..., None]
) -> None:
    kc = capped_kernel
    size, received, replies = run_to_reply(kc, HOLES_CELL, timeout=240)
    assert replies[-1]["content"]["status"] == "ok", replies[-1]["content"]
    texts = "".join(m["content"].get("text", "") for m in received if m["msg_type"] == "stream")
    assert "this cell's output passed 1m" in texts
    assert "cell ended" not in texts  # past the cap: not shown, yet the cell finished
    assert size < 2**20 + 64 * 1024, size
    assert value_of(kc, "6 * 7") == "42"  # the next cell has a budget of its own
    # One exception of HOLE_MB MB: ipykernel sends it on iopub and again in the reply.
    error_size, _, replies = run_to_reply(
        kc, f"raise ValueError('e' * {HOLE_MB << 20})", timeout=240
    )
    reply = replies[-1]
    reply_size = len(json.dumps(reply["content"]))
    assert (reply["content"]["status"], reply["content"]["ename"]) == ("error", "ValueError")
    assert error_size + reply_size < 2**20 + 64 * 1024, (error_size, reply_size)
    assert value_of(kc, "6 * 7") == "42"
    kinds = sorted({m["msg_type"] for m in received})
    observe(
        f"{3 * HOLE_MB} MB sent as tracebacks, comm messages and stream under forged parents; "
        f"{size} bytes reached the frontend ({', '.join(kinds)}), with the notice; an "
        f"exception of {HOLE_MB} MB: {error_size} bytes on iopub and a reply of "
        f"{reply_size} bytes; the cells finished and the kernel answered",
        cases=4,
    )


# A cell that sends what no cap counted: a reply the frontend did not ask for, on shell (a
# completion of ROUTE_MB MB), and output whose routing identity (its iopub topic) holds ROUTE_MB
# MB, as the kernel's own session sends them.
ROUTE_MB = 4
ROUTES_CELL = f"""
from IPython import get_ipython
kernel = get_ipython().kernel
parent, big = kernel.get_parent(), 'x' * ({ROUTE_MB} << 20)
if getattr(kernel, '_supports_kernel_subshells', False):
    shell = kernel.shell_channel_thread.manager.get_subshell_to_shell_channel_socket(None)
else:
    shell = kernel.shell_stream
kernel.session.send(shell, 'complete_reply', {{'matches': [big], 'cursor_start': 0,
                    'cursor_end': 0, 'metadata': {{}}, 'status': 'ok'}}, parent,
                    ident=kernel._parent_ident['shell'])
kernel.session.send(kernel.iopub_socket, 'stream', {{'name': 'stdout', 'text': 'routed'}},
                    parent=parent, ident=[big.encode()])
print('sent')
"""


@pytest.mark.checklist(
    row=47,
    attack=f"what no cap counted, under a 1 MiB cap: an unasked completion reply of {ROUTE_MB} "
    f"MB on shell, and a stream message whose routing identity (iopub topic) holds {ROUTE_MB} MB",
    expected="neither reaches the frontend; the cell's own output and reply do, and the kernel "
    "runs on",
)
def test_row47_replies_and_routing_identities_count_too(
    capped_kernel: BlockingKernelClient, observe: Callable[..., None]
) -> None:
    kc = capped_kernel
    size, received, replies = run_to_reply(kc, ROUTES_CELL, timeout=120)
    assert replies[-1]["content"]["status"] == "ok", replies[-1]["content"]
    assert "complete_reply" not in [reply["msg_type"] for reply in replies]
    texts = [m["content"].get("text") for m in received if m["msg_type"] == "stream"]
    assert texts == ["sent\n"], texts
    assert size < 64 * 1024, size
    assert value_of(kc, "6 * 7") == "42"
    observe(
        f"the {ROUTE_MB} MB completion reply and the stream under a {ROUTE_MB} MB topic were "
        f"dropped; the frontend got {size} bytes of iopub (the cell's own output) and its "
        "execute_reply; the kernel answered",
        cases=2,
    )


# Messages the sandbox makes too large for the host to hold (memory_bound.py): one part past a
# quarter of the proxy's bound, then one small buffer named in many parts (which costs the
# sandbox nothing), as the kernel's own session sends them.
PROXY_BOUND_MB = 256
HUGE_CELL = """
import time
from IPython import get_ipython
kernel = get_ipython().kernel
buffer = memoryview(bytearray({part_mb} * 2**20))
kernel.session.send(kernel.iopub_socket, 'display_data', {{'data': {{}}, 'metadata': {{}}}},
                    parent=kernel.get_parent(), ident=b'display_data', buffers=[buffer] * {parts})
del buffer
time.sleep(1)
print('sent')
"""
HUGE = [(PROXY_BOUND_MB // 2, 1), (1, 2 * PROXY_BOUND_MB)]  # (MB a part, parts)


@pytest.mark.checklist(
    row=10,
    attack=f"messages too large to hold, under a {PROXY_BOUND_MB} MB bound of the proxy's "
    f"memory: one part of {HUGE[0][0]} MB, and one 1 MB buffer named in {HUGE[1][1]} parts",
    expected="the proxy's memory stays within its bound: the sandbox's connection drops and is "
    "made again; the cell is told, ends, and the kernel runs on",
)
def test_row10_a_message_too_large_to_hold_is_never_held(
    request: pytest.FixtureRequest, runtime: str, observe: Callable[..., None]
) -> None:
    purpose = purpose_label(request.node.nodeid)
    with (
        sandbox_kernel_env(purpose, proxy_memory_limit=f"{PROXY_BOUND_MB}m") as state_dir,
        running_kernel(notebook_dir(state_dir), JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc),
    ):
        pid = km.provisioner.pid  # type: ignore[union-attr]
        before = peak_memory_mb(pid)
        for part_mb, parts in HUGE:
            out, reply = run(kc, HUGE_CELL.format(part_mb=part_mb, parts=parts), timeout=240)
            assert reply["status"] == "ok"
            assert "dropped and was made again" in out, out
            assert "c.SandboxSettings.proxy_memory_limit" in out
            assert value_of(kc, "6 * 7") == "42"
        peak = peak_memory_mb(pid)
        assert km.is_alive()
    # The bound holds the process's data; its code and libraries come on top.
    assert peak < PROXY_BOUND_MB + before, (before, peak)
    observe(
        f"parts of {HUGE[0][0]} MB and {HUGE[1][1]} parts of 1 MB: the connection dropped and "
        f"was made again, the cells were told and ended, the kernel answered; proxy peak "
        f"memory {peak} MB (at start {before} MB) under a {PROXY_BOUND_MB} MB bound",
        cases=2,
    )

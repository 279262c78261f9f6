"""Run code in a sandbox's kernel with plain jupyter_client, as any frontend would."""

from __future__ import annotations

import queue
import time
from typing import Any

from jupyter_client.asynchronous.client import AsyncKernelClient


async def execute(
    connection_info: dict[str, Any], code: str, *, timeout: float = 60.0
) -> tuple[str, dict[str, Any]]:
    """Execute ``code``; return everything it printed and the execute_reply content."""
    client = AsyncKernelClient()
    client.load_connection_info(connection_info)
    client.start_channels(hb=False, stdin=False, control=False)
    try:
        # Until iopub has joined (ZMQ's slow joiner), output of the cell could be missed.
        await client.wait_for_ready(timeout=timeout)
        msg_id = client.execute(code)
        reply = await client.get_shell_msg(timeout=timeout)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = await client.get_shell_msg(timeout=timeout)
        output = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = await client.get_iopub_msg(timeout=timeout)
            except queue.Empty:
                break
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                output.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                output.append("\n".join(msg["content"]["traceback"]))
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        return "".join(output), dict(reply["content"])
    finally:
        client.stop_channels()


async def output_of(connection_info: dict[str, Any], code: str, *, timeout: float = 60.0) -> str:
    """What ``code`` printed, stripped; fails the test when the cell raised."""
    out, reply = await execute(connection_info, code, timeout=timeout)
    assert reply["status"] == "ok", out
    return out.strip()


async def answers(connection_info: dict[str, Any], *, timeout: float) -> bool:
    """Whether the kernel replies to kernel_info within ``timeout`` seconds."""
    client = AsyncKernelClient()
    client.load_connection_info(connection_info)
    client.start_channels(hb=False, stdin=False, control=False, iopub=False)
    try:
        client.kernel_info()
        try:
            await client.get_shell_msg(timeout=timeout)
        except queue.Empty:
            return False
        return True
    finally:
        client.stop_channels()

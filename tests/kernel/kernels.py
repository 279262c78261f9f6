"""Start Sandboxed Python kernels with jupyter_client, as agent code and JupyterLab do."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager


@contextmanager
def running_kernel(
    cwd: Path,
    *,
    stderr: IO[str] | None = None,
    ready: bool = True,
    kernelspec: tuple[str, KernelSpecManager] | None = None,
    **env: str,
) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """A started sandboxed-python kernel (or ``kernelspec``: a name and where to find it) with
    ``env`` added to its environment; ready (it answered kernel_info on shell) unless
    ``ready`` is False."""
    if kernelspec is None:
        km = KernelManager(kernel_name="sandboxed-python")
    else:
        km = KernelManager(kernel_name=kernelspec[0], kernel_spec_manager=kernelspec[1])
    km.start_kernel(cwd=str(cwd), env={**os.environ, **env}, stderr=stderr)
    kc = km.client()
    kc.start_channels()
    try:
        if ready:
            kc.wait_for_ready(timeout=120)
        yield km, kc
    finally:
        kc.stop_channels()
        if km.has_kernel and km.is_alive():
            km.shutdown_kernel(now=False)
        km.cleanup_resources()


def run(kc: BlockingKernelClient, code: str, timeout: float = 60) -> tuple[str, dict[str, Any]]:
    """Execute ``code``; return what it printed (errors included) and the reply content."""
    printed: list[str] = []

    def collect(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            printed.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            printed.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=collect)
    return "".join(printed), reply["content"]


def value_of(kc: BlockingKernelClient, expression: str) -> str:
    out, reply = run(kc, f"print(repr({expression}))")
    assert reply["status"] == "ok", out
    return out.strip()


def value_after_error(kc: BlockingKernelClient, expression: str) -> str:
    """``value_of`` right after a cell that ended in an error (an interrupt): ipykernel aborts
    the requests that reach it before it has finished aborting its queue, a window it opens
    after sending the error's reply. A client quick enough, or a kernel slow enough (a loaded
    machine), lands in it: the request is answered "aborted" and is sent again."""
    for _ in range(5):
        out, reply = run(kc, f"print(repr({expression}))")
        if reply["status"] != "aborted":
            assert reply["status"] == "ok", out
            return out.strip()
    raise AssertionError(f"{expression}: aborted five times after the error")


def is_input_of(message: dict[str, Any], msg_id: str) -> bool:
    """Whether an iopub ``message`` shows the kernel has begun the cell ``msg_id``."""
    return message["msg_type"] == "execute_input" and message["parent_header"]["msg_id"] == msg_id

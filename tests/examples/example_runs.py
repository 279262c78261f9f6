"""Running an example agent against the test's server, as its user would from a shell."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parents[2] / "examples"


async def run_example(
    name: str, server_url: str, token: str, *arguments: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``examples/<name>`` run to its end on runc against ``server_url`` with ``token``. In a
    thread: the server answering it runs on the test's event loop."""
    command = [
        *(sys.executable, str(EXAMPLES / name), "--runtime", "runc", *arguments),
        *("--url", server_url, "--token", token),
    ]
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=timeout
    )


def token_of(auth_header: dict[str, str]) -> str:
    """The server's own token (pytest-jupyter's ``jp_auth_header``)."""
    return auth_header["Authorization"].removeprefix("token ")

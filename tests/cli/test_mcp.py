"""`jupyter sandbox mcp`'s own checks, before it speaks MCP: the URL required, the token from
JUPYTER_TOKEN or the first line of --token-file and from nowhere else, each mistake a one-line
error saying what to do (the protocol itself: tests/mcp_server/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_sandbox.cli.mcp import McpApp
from jupyter_sandbox.protocol.errors import InvalidSettingError

JUPYTER = [sys.executable, "-m", "jupyter_sandbox.cli", "mcp"]


def _mcp(*args: str, token: str = "") -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "JUPYTER_TOKEN": token}
    return subprocess.run(
        [*JUPYTER, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=environment,
        stdin=subprocess.DEVNULL,
    )


def test_the_url_and_a_token_are_required() -> None:
    no_url = _mcp(token="t")
    assert no_url.returncode == 1
    assert no_url.stderr.startswith("error: --url is required:")
    assert no_url.stdout == ""  # stdout is the protocol's alone
    no_token = _mcp("--url", "http://127.0.0.1:9/")
    assert no_token.returncode == 1
    assert no_token.stderr.startswith("error: no token: set JUPYTER_TOKEN")
    missing_file = _mcp("--url", "http://127.0.0.1:9/", "--token-file", "/nonexistent/token")
    assert missing_file.returncode == 1
    assert "--token-file /nonexistent/token: cannot read it (No such file or directory)" in (
        missing_file.stderr
    )


def test_the_token_file_gives_its_first_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_TOKEN", "from-the-environment")
    assert McpApp().token() == "from-the-environment"
    token_file = tmp_path / "token"
    token_file.write_text("  from-the-file \nsecond line\n")
    assert McpApp(token_file=str(token_file)).token() == "from-the-file"
    for wrong in ("\n", "x" * 5000):
        token_file.write_text(wrong)
        with pytest.raises(InvalidSettingError, match="must hold the token on its first line"):
            McpApp(token_file=str(token_file)).token()

"""A Sandbox's lifetime and state against a real server: its timeout moved, paused (code and
commands refused with SandboxConflictError) and resumed with its state, its interpreter
restarted, its stats, its network policy changed live, and a snapshot restored into a new
sandbox."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox.client import (
    InvalidRequestError,
    InvalidSettingError,
    SandboxClient,
    SandboxConflictError,
)

pytestmark = [pytest.mark.integration, pytest.mark.runc]


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**jp_server_config, "Snapshots": {"snapshot_dir": str(tmp_path / "snapshots")}}


def expires(info: dict[str, Any]) -> datetime.datetime:
    return datetime.datetime.fromisoformat(info["expires"])


async def test_timeout_pause_resume_restart_and_stats(client: SandboxClient) -> None:
    def scenario() -> None:
        with client.create(runtime="runc", timeout=600) as sandbox:
            first = expires(sandbox.info)
            sandbox.set_timeout(3600)
            assert expires(sandbox.info) - first > datetime.timedelta(minutes=49)  # ~3000 s later
            assert sandbox.refresh()["expires"] == sandbox.info["expires"]
            with pytest.raises(InvalidRequestError, match="seconds"):
                sandbox.set_timeout(10**9)  # past the server's time to live

            sandbox.run_code("kept = 'before the pause'")
            sandbox.pause()
            assert sandbox.status == "paused"
            with pytest.raises(SandboxConflictError, match="resume it first"):
                sandbox.run_code("kept")
            with pytest.raises(SandboxConflictError):
                sandbox.run_code("kept", on_stdout=print)  # streamed: refused before any event
            with pytest.raises(SandboxConflictError):
                sandbox.run("true")
            sandbox.resume()
            assert sandbox.status == "running"
            assert sandbox.run_code("kept").text == "'before the pause'"

            stats = sandbox.stats()
            assert stats["pids"] > 0, stats
            assert "memory" in str(stats), stats

            sandbox.restart()  # a fresh interpreter: the variable is gone
            gone = sandbox.run_code("kept")
            assert gone.error is not None
            assert gone.error.ename == "NameError"
        assert client.list() == []

    await asyncio.to_thread(scenario)


async def test_network_policy_changed_live_and_a_snapshot_restored(client: SandboxClient) -> None:
    def scenario() -> None:
        with client.create(runtime="runc", network="none") as sandbox:
            assert sandbox.network.get()["mode"] == "none"
            policy = sandbox.network.set("allowlist", allow=["pypi.org"], deny=["evil.test"])
            assert policy == {
                "mode": "allowlist",
                "allow": ["pypi.org"],
                "deny": ["evil.test"],
                "proxy_running": True,
            }
            assert sandbox.network.get() == policy
            assert sandbox.network.audit(limit=10) == []  # nothing asked for yet
            with pytest.raises(
                InvalidSettingError, match="must be one of none, allowlist, ask, open"
            ):
                sandbox.network.set("everything")

            sandbox.files.write("results/out.txt", "kept in the snapshot\n")
            snapshot = sandbox.snapshot(note="after the run")
            assert (snapshot["note"], snapshot["kind"]) == ("after the run", "workspace")
        with client.create(runtime="runc", snapshot=snapshot["id"]) as restored:
            assert restored.files.read_text("results/out.txt") == "kept in the snapshot\n"
        assert client.list() == []

    await asyncio.to_thread(scenario)

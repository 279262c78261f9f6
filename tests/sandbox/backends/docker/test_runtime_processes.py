"""Recognising gVisor's processes by their command lines, on a /proc-shaped tree."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.backends.docker import runtime_processes
from jupyter_sandbox.sandbox.backends.docker.runtime_processes import process_age, runsc_processes

CID = "4187ae836405821e0781bbf15650877cf9f27b22ea1dd423735bbda7fc9631d8"


def fake_process(proc: Path, pid: int, *argv: str) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_runsc_processes_are_found_by_their_bundle(tmp_path: Path) -> None:
    bundle = f"/var/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/{CID}"
    fake_process(
        tmp_path,
        10,
        "runsc-sandbox",
        "--root=/var/run/docker/runtime-runc/moby",
        f"--log={bundle}/log.json",
        "boot",
        f"--bundle={bundle}",
    )
    fake_process(tmp_path, 11, "runsc-gofer", "gofer", "--bundle", bundle)
    fake_process(tmp_path, 12, "/usr/bin/containerd-shim-runc-v2", "-id", CID)
    fake_process(tmp_path, 13, "python3", f"/tmp/{CID}/x")
    (tmp_path / "self").mkdir()
    assert runsc_processes(tmp_path) == {10: CID, 11: CID}


def test_process_age_of_this_process_is_small() -> None:
    # A process just started (this test process may be older than any bound: the suite runs
    # longer than 10 minutes on a loaded machine).
    young = subprocess.Popen(["sleep", "30"])
    try:
        assert 0 <= process_age(young.pid) < 600
    finally:
        young.kill()
        young.wait()
    assert process_age(2**22 + 1) == float("inf")


async def test_the_scan_for_runsc_processes_leaves_the_event_loop_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scan reads every process's command line: on a thread, never on the loop that
    serves every owner (it runs at every reaping pass, and at every hung removal)."""
    if os.geteuid() != 0:
        pytest.skip("only root ends runsc processes; elsewhere there is no scan")
    loop_thread = threading.get_ident()
    scanned_on = []
    scan = runtime_processes.runsc_processes

    def watched(proc: Path = Path("/proc")) -> dict[int, str]:  # the real scan, watched
        scanned_on.append(threading.get_ident())
        return scan(proc)

    monkeypatch.setattr(runtime_processes, "runsc_processes", watched)
    # No container id is kept, but none is asked for either: nothing is killed.
    assert await runtime_processes.kill_runsc_processes(set()) == []
    assert scanned_on
    assert loop_thread not in scanned_on

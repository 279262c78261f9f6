"""Recognising gVisor's processes by their command lines, on a /proc-shaped tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

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

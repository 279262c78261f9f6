"""The engine bootstrap: idempotent, and it keeps what daemon.json already holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parents[2] / "scripts"


def register(daemon_json: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "register-runsc.py"), str(daemon_json), "/usr/bin/runsc"],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def test_registration_keeps_other_settings_and_is_idempotent(tmp_path: Path) -> None:
    daemon_json = tmp_path / "daemon.json"
    daemon_json.write_text(json.dumps({"log-level": "warn", "runtimes": {"kata": {"path": "/k"}}}))
    assert register(daemon_json) == "restart"  # experimental mode is new: dockerd must restart
    assert register(daemon_json) == "unchanged"
    config = json.loads(daemon_json.read_text())
    assert config["log-level"] == "warn"
    assert config["experimental"] is True
    assert config["runtimes"]["kata"] == {"path": "/k"}
    assert config["runtimes"]["runsc"] == {
        "path": "/usr/bin/runsc",
        "runtimeArgs": ["--network=none", "--host-uds=create"],
    }


def test_registration_creates_a_missing_file(tmp_path: Path) -> None:
    daemon_json = tmp_path / "daemon.json"
    assert register(daemon_json) == "restart"
    assert "runsc" in json.loads(daemon_json.read_text())["runtimes"]


def test_a_new_runtime_path_needs_only_a_reload(tmp_path: Path) -> None:
    daemon_json = tmp_path / "daemon.json"
    daemon_json.write_text(json.dumps({"experimental": True}))
    assert register(daemon_json) == "changed"


@pytest.mark.integration
def test_bootstrap_changes_nothing_when_the_engine_answers() -> None:
    result = subprocess.run(
        ["bash", str(SCRIPTS / "engine-bootstrap.sh")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stdout

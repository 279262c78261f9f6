"""`jupyter sandbox credentials set|list|rm` as a person runs it: values never on the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jupyter_sandbox.sandbox.network.credentials import CredentialStore

JUPYTER = [sys.executable, "-m", "jupyter_sandbox.cli", "credentials"]
SECRET = "cli-secret-5d2a9c71e0"


def credentials_cli(
    *args: str, state_dir: Path, store: Path, given: str = ""
) -> subprocess.CompletedProcess[str]:
    command = [
        *JUPYTER,
        *args,
        f"--SandboxSettings.state_dir={state_dir}",
        f"--NetworkSettings.credentials_dir={store}",
        "--owner=alice",
    ]
    return subprocess.run(
        command, input=given, capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )


def test_set_list_rm_reads_values_from_stdin_and_never_prints_them(
    state_dir: Path, tmp_path: Path
) -> None:
    store = tmp_path / "credentials"
    made = credentials_cli(
        "set",
        "gh",
        "--host=api.example.com",
        "--host=*.example.org",
        "--header=Authorization",
        "--header=X-Team",
        state_dir=state_dir,
        store=store,
        given=f"Bearer {SECRET}\nteam-1\n",
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout == "set gh: Authorization, X-Team for api.example.com, *.example.org\n"
    basic = credentials_cli(
        "set",
        "idx",
        "--host=pkg.example.com",
        "--basic=bob",
        state_dir=state_dir,
        store=store,
        given=f"{SECRET}\n",
    )
    assert basic.returncode == 0, basic.stderr
    assert CredentialStore(store).headers_for("alice", "api.example.com", 80) == [
        ("Authorization", f"Bearer {SECRET}"),
        ("X-Team", "team-1"),
    ]
    listed = credentials_cli("list", state_dir=state_dir, store=store)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["NAME", "HOSTS", "HEADERS"]
    assert [line.split()[0] for line in lines[1:]] == ["gh", "idx"]
    removed = credentials_cli("rm", "gh", state_dir=state_dir, store=store)
    assert removed.returncode == 0, removed.stderr
    again = credentials_cli("rm", "gh", state_dir=state_dir, store=store)
    assert (again.returncode, again.stderr.startswith("error: no credential 'gh'")) == (1, True)
    for result in (made, basic, listed, removed, again):
        assert SECRET not in result.stdout + result.stderr


def test_a_value_on_the_command_line_is_refused(state_dir: Path, tmp_path: Path) -> None:
    refused = credentials_cli(
        "set",
        "gh",
        "--host=api.example.com",
        f"--header=Authorization: Bearer {SECRET}",
        state_dir=state_dir,
        store=tmp_path / "credentials",
    )
    assert refused.returncode == 1
    assert "its value is asked for" in refused.stderr
    assert SECRET not in refused.stderr
    assert not (tmp_path / "credentials").exists()

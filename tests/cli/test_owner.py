"""Every ``jupyter sandbox`` app takes JupyterApp's own options (``--log-level``, ``--config``,
``--debug``...) besides its own: a verb's ``aliases`` and ``flags`` add to them (cli/owner.py's
SandboxCommandApp), where a class attribute used to replace them and ``jupyter sandbox list
--log-level=DEBUG`` was refused as an unknown argument."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_core.application import JupyterApp

from jupyter_sandbox.cli.main import SandboxApp
from jupyter_sandbox.cli.owner import OwnerCommand, SandboxCommandApp


def apps(
    group: type[SandboxCommandApp] = SandboxApp, words: str = ""
) -> Iterator[tuple[str, type]]:
    """Each app under ``group`` (the groups too), with the words that run it."""
    subcommands = group.subcommands  # a verb's is the Application's trait, not a dict
    for verb, (app, _) in (subcommands if isinstance(subcommands, dict) else {}).items():
        if isinstance(app, str):  # another kind of app (the gateway server), by import name
            continue
        yield f"{words} {verb}".strip(), app
        yield from apps(app, f"{words} {verb}")


APPS = dict(apps())


def test_the_groups_hold_the_verbs() -> None:
    assert {
        "list",
        "doctor",
        "install-kernel",
        "snapshot list",
        "files ls",
        "background rm",
    } <= set(APPS)


@pytest.mark.parametrize("app", APPS.values(), ids=APPS)
def test_every_app_takes_jupyters_options_and_its_own(app: type[SandboxCommandApp]) -> None:
    assert issubclass(app, SandboxCommandApp)
    assert app.aliases.items() >= JupyterApp.aliases.items()
    assert app.flags.keys() >= JupyterApp.flags.keys()
    assert {"log-level", "config", "debug"} <= app.aliases.keys() | app.flags.keys()
    if issubclass(app, OwnerCommand):
        assert "owner" in app.aliases
    # Its own, declared in its class body, are still there.
    for base in app.__mro__:
        assert app.aliases.keys() >= (vars(base).get("aliases") or {}).keys()


@pytest.mark.parametrize("words", ["list", "doctor", "snapshot list", "stop", "background output"])
def test_log_level_sets_the_verbs_level(words: str) -> None:
    app = APPS[words]()
    app.parse_command_line(
        ["--log-level=DEBUG", "--owner=alice"] if "owner" in app.aliases else ["--log-level=DEBUG"]
    )
    assert app.log_level == logging.DEBUG


def test_a_verb_run_with_log_level_debug_logs_at_debug(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "jupyter_sandbox.cli",
        "snapshot",
        "list",
        "--log-level=DEBUG",
        f"--SandboxSettings.state_dir={tmp_path / 'state'}",
        f"--Snapshots.snapshot_dir={tmp_path / 'snapshots'}",
        "--owner=alice",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("SNAPSHOT")
    assert "[ListApp] Looking for jupyter_sandbox_config in" in result.stderr


def test_each_verb_is_named_by_its_group_and_usage() -> None:
    verbs = {words: app for words, app in APPS.items() if issubclass(app, OwnerCommand)}
    assert {"stop", "exec", "files ls", "snapshot list", "background rm"} <= set(verbs)
    for words, app in verbs.items():
        assert app.verb == words.split()[-1]
        assert app.name == "jupyter-sandbox-" + words.replace(" ", "-")


@pytest.mark.parametrize(
    ("words", "given", "taken"),
    [
        ("files ls", ["s1"], True),
        ("files ls", ["s1", "dir"], True),
        ("files ls", ["s1", "dir", "more"], False),
        ("files put", ["s1", "local"], False),
        ("files put", ["s1", "local", "path"], True),
        ("exec", ["s1"], False),
        ("exec", ["s1", "ls", "-la", "/tmp"], True),
        ("background rm", ["s1"], False),
        ("background rm", ["s1", "c1", "c2"], True),
        ("snapshot list", [], True),
        ("snapshot list", ["extra"], False),
    ],
)
def test_a_verb_takes_the_arguments_its_run_names(
    words: str, given: list[str], taken: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    app = APPS[words]()
    app.parse_command_line(["--", *given] if words == "exec" else given)
    if taken:
        assert app._arguments() == given
        return
    with pytest.raises(SystemExit) as exited:
        app._arguments()
    assert exited.value.code == 2
    usage = " ".join(["usage: jupyter sandbox", *words.split()[:-1], app.usage])
    assert capsys.readouterr().err == usage + "\n"

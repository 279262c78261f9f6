"""The host's Python programs of this package never import from their working directory."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.host.python_command import module_command
from tests.shadowing import imported, plant


@pytest.mark.parametrize("safe_path_flag", [True, False], ids=["-P", "bootstrap"])
def test_a_module_runs_from_a_directory_with_modules_of_the_same_name(
    tmp_path: Path, safe_path_flag: bool
) -> None:
    directory = plant(tmp_path)
    argv = module_command("json.tool", "--sort-keys", safe_path_flag=safe_path_flag)
    done = subprocess.run(
        argv, cwd=directory, input=b'{"b": 1, "a": 2}', capture_output=True, timeout=60
    )
    assert imported(directory) is None, done.stderr
    assert done.returncode == 0, done.stderr
    # The module saw the arguments -m would have given it, and none of the bootstrap's.
    assert done.stdout == b'{\n    "a": 2,\n    "b": 1\n}\n'


@pytest.mark.parametrize("safe_path_flag", [True, False], ids=["-P", "bootstrap"])
def test_the_module_sees_what_python_m_shows_it_and_pythonpath_still_counts(
    tmp_path: Path, safe_path_flag: bool
) -> None:
    modules, elsewhere = tmp_path / "modules", tmp_path / "elsewhere"
    modules.mkdir()
    elsewhere.mkdir()
    (modules / "argv_probe.py").write_text(
        "import json, sys; print(json.dumps([__name__, sys.argv]))"
    )
    argv = module_command("argv_probe", "-f", "x", safe_path_flag=safe_path_flag)
    done = subprocess.run(
        argv,
        cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": str(modules)},
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    name, seen = json.loads(done.stdout)
    assert name == "__main__"
    assert seen == [str(modules / "argv_probe.py"), "-f", "x"]

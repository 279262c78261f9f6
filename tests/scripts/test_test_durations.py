"""scripts/test_durations.py: each test file's seconds from JUnit XML, for the order of files
that tests/conftest.py gives pytest-xdist's workers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "test_durations.py"

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.scripts.test_test_durations" name="a" time="1.25"/>
<testcase classname="tests.scripts.test_test_durations" name="b" time="0.5"/>
<testcase classname="tests.conftest.SomeClass" name="c" time="2.0"/>
<testcase classname="tests.no_such_file" name="d" time="9.0"/>
</testsuite></testsuites>
"""


def run(tmp_path: Path, *junit: str) -> subprocess.CompletedProcess[str]:
    paths = []
    for number, text in enumerate(junit):
        path = tmp_path / f"run{number}.xml"
        path.write_text(text)
        paths.append(str(path))
    return subprocess.run(
        [sys.executable, str(SCRIPT), *paths, "--output", str(tmp_path / "durations.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_seconds_are_summed_per_file_across_runs_and_classes(tmp_path: Path) -> None:
    result = run(tmp_path, JUNIT, JUNIT)
    assert result.returncode == 0, result.stderr
    written = json.loads((tmp_path / "durations.json").read_text())
    # A class's tests count for its file; a classname naming no file here is left out.
    assert written == {"tests/conftest.py": 4.0, "tests/scripts/test_test_durations.py": 3.5}


def test_xml_of_no_file_here_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    other = '<testsuite><testcase classname="elsewhere.test_x" name="a" time="1"/></testsuite>'
    result = run(tmp_path, other)
    assert result.returncode == 2
    assert "no test case of a file in this repository" in result.stderr
    assert not (tmp_path / "durations.json").exists()


def test_the_committed_durations_name_test_files_with_seconds() -> None:
    committed = json.loads((SCRIPT.parents[1] / "tests" / "file_durations.json").read_text())
    assert committed
    malformed = {
        name: seconds
        for name, seconds in committed.items()
        if not (name.startswith("tests/") and name.endswith(".py") and seconds >= 0)
    }
    assert malformed == {}

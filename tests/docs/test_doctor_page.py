"""The troubleshooting guide describes every check `jupyter sandbox doctor` can report.

docs/how-to/doctor.md has a row per check, with what its failure means and its fix; a check
added to jupyter_sandbox/sandbox/doctor.py without a row there fails here, naming it. The
checks' names are read from the source (each ``Check(name, ...)``; an f-string name such as
``f"runtime {runtime}"`` by its fixed start).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.python_ast import parse

REPO = Path(__file__).resolve().parents[2]
DOCTOR = REPO / "jupyter_sandbox" / "sandbox" / "doctor.py"
GUIDE = REPO / "docs" / "how-to" / "doctor.md"


def check_names(source: str) -> set[str]:
    names = set()
    for node in ast.walk(parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Check"
            and node.args
        ):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            names.add(first.value)
        elif isinstance(first, ast.JoinedStr):
            fixed = ""
            for part in first.values:
                if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                    break
                fixed += part.value
            names.add(fixed)
    return names


def table_rows(markdown: str) -> list[str]:
    """The first cell of each row of the guide's tables."""
    return [
        line.split("|")[1].strip()
        for line in markdown.splitlines()
        if line.startswith("|") and not line.startswith("| ---")
    ]


def test_every_check_of_the_doctor_has_a_row_in_the_guide() -> None:
    names = check_names(DOCTOR.read_text(encoding="utf-8"))
    assert {"engine", "image", "runtime "} <= names  # the reading of the source finds them
    rows = table_rows(GUIDE.read_text(encoding="utf-8"))
    missing = sorted(name for name in names if not any(row.startswith(name) for row in rows))
    assert missing == [], (
        f"{GUIDE.relative_to(REPO)} has no row for these checks of the doctor: add what each "
        "failure means and its fix"
    )


def test_a_check_without_a_row_is_found() -> None:
    source = 'Check("engine", "ok", "x")\nCheck(f"kernel on {runtime}", "fail", "y")\n'
    assert check_names(source) == {"engine", "kernel on "}
    rows = table_rows("| check | meaning |\n| --- | --- |\n| engine | ... |\n")
    assert rows == ["check", "engine"]
    assert [n for n in sorted(check_names(source)) if not any(r.startswith(n) for r in rows)] == [
        "kernel on "
    ]

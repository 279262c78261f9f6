"""No measured figure in the package's docstrings or help texts: they say why, the figures live
in docs/explanation/performance.md ("Figures behind the code") and benchmarks/.

A sentence is flagged when it has a number with a unit (ms, s, MiB, %, x...) and a word of
measurement (took, costs, measured, median, faster, slower, quicker, saves, against...).
Defaults and limits ("16 MiB by default", "at most 1 MiB", "every 0.2 s") are configuration
and pass.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.docs.test_links import REPO
from tests.python_ast import parse

UNIT = re.compile(
    r"(?<![\w.])\d[\d,.]*(?:-\d[\d.]*)?\s?"
    r"(?:ms|µs|us|ns|s|seconds?|minutes?|MiB|KiB|GiB|MB|KB|GB|%|x|\u00d7)(?!\w)"
)
MEASURE = re.compile(
    r"(?i)\b(took|takes|take|costs?|measured|median|faster|slower|quicker|spread|p50|p99|"
    r"saves?|froze|per MB|against|less per|more per|holds|added)\b|~\d"
)


def texts(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring and ``help=`` text of ``source``."""
    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((getattr(node, "lineno", 1), doc))
        elif isinstance(node, ast.keyword) and node.arg == "help":
            parts = [
                part.value
                for part in ast.walk(node.value)
                if isinstance(part, ast.Constant) and isinstance(part.value, str)
            ]
            found.append((node.value.lineno, " ".join(parts)))
    return found


def figures(source: str) -> list[str]:
    flagged = []
    for line, text in texts(source):
        for sentence in re.split(r"(?<=[.;])\s+", text):
            if UNIT.search(sentence) and MEASURE.search(sentence):
                flagged.append(f"{line}: {' '.join(sentence.split())}")
    return flagged


def test_no_measured_figure_in_docstrings_or_help() -> None:
    flagged = []
    for path in sorted((REPO / "jupyter_sandbox").rglob("*.py")):
        if "labextension" in path.parts:
            continue
        flagged += [
            f"{path.relative_to(REPO)}:{hit}" for hit in figures(path.read_text(encoding="utf-8"))
        ]
    assert not flagged, "measured figures belong in docs/explanation/performance.md:\n" + "\n".join(
        flagged
    )


def test_the_check_flags_measurements_not_configuration() -> None:
    source = (
        '"""Starting takes ~0.5 s of imports. Output is kept up to 16 MiB by default."""\n'
        'x = Int(1, help="Seconds between checks; 2 s by default.")\n'
        'y = Int(1, help="Its proxy costs 3 ms more per round trip.")\n'
    )
    assert [hit.split(": ", 1)[1] for hit in figures(source)] == [
        "Starting takes ~0.5 s of imports.",
        "Its proxy costs 3 ms more per round trip.",
    ]
    assert not figures('"""Path(__file__).parents[2]: 0 means off."""\n')
    assert Path(REPO / "docs" / "explanation" / "performance.md").exists()

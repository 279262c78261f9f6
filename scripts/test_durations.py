"""Write tests/file_durations.json: the seconds each test file took in a run's JUnit XML.

Usage: ``.venv/bin/python scripts/test_durations.py JUNIT.xml [JUNIT.xml ...]``
(``make test JUNIT=PREFIX`` writes PREFIX-parallel.xml and PREFIX-alone.xml).

Under ``make test`` pytest-xdist hands each worker whole files, one after another;
tests/conftest.py hands them out longest first, from this file, so that the run does not end
with one worker still in a long file while the others have nothing left. Refresh it
after a full run when files grew or moved: a stale figure costs balance, nothing else.
"""

from __future__ import annotations

import argparse
import collections
import json
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "tests" / "file_durations.json"


def test_file(classname: str) -> str | None:
    """The file a JUnit classname names (``tests.kernel.test_x`` or ``tests.kernel.test_x.Cls``),
    relative to the repository, if it exists."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = Path(*parts[:end]).with_suffix(".py")
        if (ROOT / candidate).is_file():
            return candidate.as_posix()
    return None


def file_seconds(paths: list[Path]) -> dict[str, float]:
    seconds: collections.Counter[str] = collections.Counter()
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            name = test_file(case.get("classname", ""))
            if name is not None:
                seconds[name] += float(case.get("time") or 0)
    return {name: round(value, 1) for name, value in sorted(seconds.items())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path, nargs="+", help="JUnit XML of a whole run")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    seconds = file_seconds(args.junit)
    if not seconds:
        parser.error("no test case of a file in this repository in the given XML")
    args.output.write_text(json.dumps(seconds, indent=1) + "\n")
    print(f"{args.output}: {len(seconds)} files, {sum(seconds.values()):.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

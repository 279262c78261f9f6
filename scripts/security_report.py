"""Run the security battery and write docs/security.md from what it observed.

Usage: ``.venv/bin/python scripts/security_report.py [--output docs/security.md] [pytest args]``

Every test marked ``checklist(row=, attack=, expected=)`` (tests/security/, and the snapshot and
network tests that cover their rows) runs on both runtimes; each records what it ``observe``d.
The page is rewritten from those results: nothing in it is typed by hand, so a regression shows
up as a failed row rather than a stale claim.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Rows 1-39 are the original checklist; 40-69 came from round two of the security work (an
# outside attack review and an API fuzzer), each row's attack and expectation in its marker:
# 40-69 and 73-76 security round two, 70-71 lifetimes, 80-84 the E2B API, 85-87 the MCP server,
# 88-94 the JupyterHub gateway, 96-98 network refusals, 99-102 widgets in Lab, 110-113 the
# network's ask mode, 114-115 the E2B API's process calls and the OpenAI Agents SDK's helper
# scripts, 116-119 injected credentials, 120-123 TLS inspection, 124-125 the gateway's
# workspace pin and per-user warm pools; round three of the host's hardening: 126-127 kernel
# messages the server reads, 130-132 connections an owner holds, 134-140 what requests store and
# move, 142-148 the gateway's kernels and the culler's passes, 150-152 request bodies. The
# numbers between were not used.
CHECKLIST_ROWS = [
    *range(1, 72),
    *range(73, 77),
    *range(80, 95),
    *range(96, 103),
    *range(110, 128),
    *range(130, 133),
    *range(134, 141),
    *range(142, 149),
    *range(150, 153),
]
# Rows whose subject is not built yet or cannot apply; each reason says which.
NOT_COVERED: dict[int, str] = {}


@dataclass
class Result:
    row: int  # 0 for load and fault scenarios (marker "resilience")
    attack: str
    expected: str
    runtime: str
    test: str
    passed: bool
    observed: str
    cases: int
    failure: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def run_battery(pytest_args: list[str]) -> list[Result]:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "battery.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-m",
            "checklist or resilience",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "-o",
            "junit_family=xunit2",
            *(pytest_args or ["tests"]),
        ]
        print("running:", " ".join(command), flush=True)
        subprocess.run(command, cwd=ROOT, check=False)
        return parse_junit(junit)


def parse_junit(path: Path) -> list[Result]:
    results = []
    for case in ET.parse(path).getroot().iter("testcase"):
        properties: dict[str, str] = {}
        cases = 0
        for prop in case.iter("property"):
            name, value = prop.get("name", ""), prop.get("value", "")
            if name == "cases":
                cases += int(value)
            elif name == "observed":
                properties["observed"] = (properties.get("observed", "") + " " + value).strip()
            else:
                properties[name] = value
        if "row" not in properties and "scenario" not in properties:
            continue
        failure = case.find("failure")
        error = case.find("error")
        problem = failure if failure is not None else error
        results.append(
            Result(
                row=int(properties.get("row", 0)),
                attack=properties.get("attack") or properties.get("scenario", ""),
                expected=properties.get("expected", ""),
                runtime=properties.get("runtime", "—"),
                test=f"{case.get('classname', '')}::{case.get('name', '')}",
                passed=problem is None and case.find("skipped") is None,
                observed=properties.get("observed", ""),
                cases=cases or 1,
                failure=(problem.get("message", "") if problem is not None else "")[:200],
            )
        )
    return sorted(results, key=lambda r: (r.row, r.runtime, r.test))


def engine_versions() -> str:
    def first_line(argv: list[str]) -> str:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        return out.strip().splitlines()[0] if out.strip() else "unknown"

    docker = first_line(["docker", "version", "--format", "{{.Server.Version}}"])
    runsc = first_line(["runsc", "--version"])
    runc = first_line(["runc", "--version"])
    return f"Docker {docker}, {runc}, {runsc}, Linux {platform.release()}"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def outcome(result: Result) -> str:
    """The result column of a row: pass, or the failure's first words."""
    return "pass" if result.passed else f"**FAIL**: {cell(result.failure)}"


def render(all_results: list[Result]) -> str:
    results = [r for r in all_results if r.row]
    # One owner flooding a shared server while another is timed: a section of its own.
    floods = [r for r in all_results if not r.row and r.attack.startswith("denial of service")]
    scenarios = [r for r in all_results if not r.row and r not in floods]
    covered = sorted({r.row for r in results})
    passed = [r for r in all_results if r.passed]
    failed = [r for r in all_results if not r.passed]
    attacks = sum(r.cases for r in results)
    loads = [r for r in scenarios if r.attack.startswith("load")]
    inside = {r.row for r in results if r.test.startswith("tests.security")}
    elsewhere = sorted({r.row for r in results} - inside)
    faults = [r for r in scenarios if r.attack.startswith("fault")]
    lines = [
        "# Security battery",
        "",
        "Generated by `.venv/bin/python scripts/security_report.py` on "
        f"{datetime.date.today().isoformat()}; do not edit by hand. Machine: {engine_versions()}.",
        "",
        "Each row of the project's security checklist has a test named after it, in "
        "`tests/security/`"
        + (
            f" (rows {', '.join(map(str, elsewhere))} beside the code they exercise)"
            if elsewhere
            else ""
        )
        + ", run on runc and on runsc (gVisor) where a sandbox is involved. Every attack "
        "asserts the expected behaviour and that the host and a neighbouring sandbox of another "
        "user are unaffected. How the host around the sandbox holds, row by row, is explained in "
        "[How the host holds](explanation/host-hardening.md).",
        "",
        "## Headline",
        "",
        f"- checklist rows covered: **{len(covered)}** of {len(CHECKLIST_ROWS)}",
        f"- attacks and bad inputs tried: **{attacks}** in {len(results)} test runs",
        *(f"- load held: **{r.observed}**" for r in loads if r.passed),
        f"- faults survived: **{sum(r.passed for r in faults)}** of {len(faults)}",
        *(
            [
                f"- floods by one owner that left another's requests within their bound: "
                f"**{sum(r.passed for r in floods)}** of {len(floods)}"
            ]
            if floods
            else []
        ),
        f"- passed: **{len(passed)}**, failed: **{len(failed)}**",
        "- data lost: **0** (every attack checks that the neighbour's files and the host's are "
        "intact)"
        if not failed
        else "- data lost: see the failed rows below",
        "",
        "## Results",
        "",
        "| row | attack | runtime | expected | observed | result |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r.row} | {cell(r.attack)} | {r.runtime} | {cell(r.expected)} | "
            f"{cell(r.observed) or '—'} | {outcome(r)} |"
        )
    if scenarios:
        lines += [
            "",
            "## Load and faults",
            "",
            "| scenario | runtime | expected | observed | result |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in scenarios:
            lines.append(
                f"| {cell(r.attack)} | {r.runtime} | {cell(r.expected)} | "
                f"{cell(r.observed) or '—'} | {outcome(r)} |"
            )
    if floods:
        lines += [
            "",
            "## Denial of service",
            "",
            "Two owners on one real server: while one floods it, the other's requests (a list, "
            "a file read, an execute of 1+1, a watch) are timed, quiet and under the flood.",
            "",
            "| scenario | runtime | expected | observed | result |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in floods:
            lines.append(
                f"| {cell(r.attack.removeprefix('denial of service: '))} | {r.runtime} | "
                f"{cell(r.expected)} | {cell(r.observed) or '—'} | {outcome(r)} |"
            )
    missing = [row for row in CHECKLIST_ROWS if row not in covered]
    if missing:
        lines += ["", "## Rows without a test here", ""]
        for row in missing:
            lines.append(f"- row {row}: {NOT_COVERED.get(row, 'not covered yet')}")
    lines += [
        "",
        "## Tests",
        "",
        *(f"- `{r.test}`" for r in all_results),
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "security.md")
    parser.add_argument(
        "--from-junit",
        type=Path,
        action="append",
        help="render from the JUnit XML of a run that already happened instead of running the "
        "battery again; given once for each report (`make test JUNIT=PREFIX` writes "
        "PREFIX-parallel.xml and PREFIX-alone.xml)",
    )
    args, pytest_args = parser.parse_known_args()
    if args.from_junit:
        results = [result for path in args.from_junit for result in parse_junit(path)]
    else:
        results = run_battery(pytest_args)
    if not results:
        print("no checklist test ran: is the engine up ('make engine') and the image built?")
        return 1
    args.output.write_text(render(results))
    failed = sum(not r.passed for r in results)
    print(f"wrote {args.output}: {len(results)} results, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

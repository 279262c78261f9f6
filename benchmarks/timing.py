"""What the benchmarks share: the p90 they report, and the two ways they are run.

- :func:`per_runtime` runs a benchmark that times operations in one sandbox of each
  ``--runtime`` (exec.py, code_runs.py) and prints a row per runtime and operation: median, p90
  and, for the streaming row, the rate;
- :func:`against_local` runs one that times sandboxed kernels against a plain local ipykernel
  (startup.py, restart.py): ``--runs``, ``--json`` for the raw numbers, the local kernel checked
  to run this interpreter (else the comparison would not be fair), Ctrl-C ending it with 130.

Not a benchmark itself: the others import it, run as scripts from benchmarks/ (whose directory
is then on sys.path).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from jupyter_client.manager import AsyncKernelManager

Samples = TypeVar("Samples")
Summary = dict[str, dict[str, Any]]


def p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def per_runtime(
    doc: str,
    *,
    title: str,
    column: str,
    names: Sequence[str],
    runs_help: str,
    measure: Callable[[str, int], Coroutine[Any, Any, dict[str, list[float]]]],
    streamed: tuple[str, int],
) -> None:
    """Parse ``--runtime`` (repeated; default both) and ``--runs``, then print ``title`` (with
    ``{runs}``) and a row of each of ``names`` per runtime, in milliseconds, from ``measure(
    runtime, runs)``; the row named ``streamed[0]`` also gets the rate of ``streamed[1]``
    bytes."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--runtime", action="append", choices=["runc", "runsc"])
    parser.add_argument("--runs", type=int, default=30, help=runs_help)
    args = parser.parse_args()
    width = max(len(name) for name in [column, *names])
    print(title.format(runs=args.runs))
    print(f"{'runtime':<8} {column:<{width}} {'median ms':>10} {'p90 ms':>8}")
    stream_name, stream_bytes = streamed
    for runtime in args.runtime or ["runc", "runsc"]:
        for name, values in asyncio.run(measure(runtime, args.runs)).items():
            median, high = statistics.median(values) * 1000, p90(values) * 1000
            rate = (
                f"  {stream_bytes / 1e6 / statistics.median(values):.0f} MB/s"
                if name == stream_name
                else ""
            )
            print(f"{runtime:<8} {name:<{width}} {median:>10.1f} {high:>8.1f}{rate}")


def against_targets(samples: dict[str, list[float]], targets: dict[str, float]) -> Summary:
    """Median, p90 and the median's ratio to the ``local`` kind's, per kind; a kind with a
    target also gets it and whether its ratio met it."""
    local = statistics.median(samples["local"])
    summary: Summary = {}
    for kind, values in samples.items():
        median = statistics.median(values)
        row: dict[str, Any] = {"median": median, "p90": p90(values), "ratio": median / local}
        if kind in targets:
            row["target"] = targets[kind]
            row["met"] = row["ratio"] <= targets[kind]
        summary[kind] = row
    return summary


def print_against_targets(summary: Summary, title: str) -> None:
    """The table of :func:`against_targets`, under ``title``, in milliseconds."""
    print(title)
    print(f"{'':<6} {'median ms':>10} {'p90 ms':>8} {'vs local':>9} {'target':>8}  met")
    for kind, row in summary.items():
        target = f"<= {row['target']}x" if "target" in row else ""
        met = ("yes" if row["met"] else "NO") if "met" in row else ""
        print(
            f"{kind:<6} {row['median'] * 1000:>10.0f} {row['p90'] * 1000:>8.0f}"
            f" {row['ratio']:>8.2f}x {target:>8}  {met}"
        )


def local_kernel_python() -> str:
    """The interpreter of the local kernel; it must be this one (the venv's python)."""
    python: str = AsyncKernelManager(kernel_name="python3").format_kernel_cmd()[0]
    if python != sys.executable:
        sys.exit(f"kernelspec python3 runs {python}, not this interpreter {sys.executable}")
    return python


def against_local(
    doc: str,
    *,
    runs_help: str,
    measure: Callable[[int], Coroutine[Any, Any, Samples]],
    summarize: Callable[[Samples], Summary],
    print_table: Callable[[Summary, int], None],
) -> int:
    """Parse ``--runs`` (default 10) and ``--json``, check the local kernel's interpreter, run
    ``measure(runs)``, print its summary's table and write the raw numbers to ``--json``;
    returns the exit status."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help=runs_help)
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the raw numbers here")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    python = local_kernel_python()  # the local kernel must run this interpreter, to be fair
    try:
        samples = asyncio.run(measure(args.runs))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    summary = summarize(samples)
    print_table(summary, args.runs)
    if args.json:
        result = {"runs": args.runs, "unit": "seconds", "local_kernel_python": python}
        result.update(samples=samples, summary=summary)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0

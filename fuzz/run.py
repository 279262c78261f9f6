"""Coverage-guided fuzzing (atheris) of the parsers that read bytes a sandbox or a user controls.

    .venv/bin/python fuzz/run.py [TARGET ...] [--seconds N] [--seed N] [--grow]

Each target (``fuzz/targets/<name>.py``, all of them when none is named) runs in a process of
its own, on a copy of its corpus (``fuzz/corpus/<name>/``, so a short run leaves the repository
as it was), for ``--seconds`` with a fixed ``--seed``; an input that takes longer than
``--timeout`` seconds or a process above ``--rss-limit-mb`` is a failure too, so slowness and
memory growth are found as well as exceptions. What fails is written to
``fuzz/crashes/<name>/`` (crash-*, timeout-*, oom-*: the input itself), and this script exits
non-zero. ``--grow`` copies the inputs that reached new code back into the kept corpus.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

FUZZ = Path(__file__).resolve().parent
TARGETS = FUZZ / "targets"
CORPUS = FUZZ / "corpus"
CRASHES = FUZZ / "crashes"
# Inputs longer than this are not tried unless a target says otherwise (its MAX_LEN): the
# parsers' own size limits are 64 KiB at most, and a larger input only slows the search.
DEFAULT_MAX_LEN = 8192


def target_names() -> list[str]:
    """Every target, by name (the file name under fuzz/targets/ without .py)."""
    return sorted(p.stem for p in TARGETS.glob("*.py") if not p.name.startswith("_"))


def load_target(name: str) -> ModuleType:
    """The target's module (by its file: fuzz/ is not a package on the path)."""
    spec = importlib.util.spec_from_file_location(f"fuzz_target_{name}", TARGETS / f"{name}.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"no fuzz target {name!r}: the targets are {', '.join(target_names())}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "fuzz_one_input", None)):
        raise SystemExit(f"fuzz/targets/{name}.py defines no fuzz_one_input(data: bytes)")
    return module


def corpus_files(name: str) -> list[Path]:
    """The kept seeds and finds of ``name``."""
    folder = CORPUS / name
    return sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


@dataclass
class Outcome:
    name: str
    returncode: int
    runs: int
    coverage: int
    seconds: float
    log: str

    @property
    def failed(self) -> bool:
        return self.returncode != 0


def run_target(
    name: str,
    *,
    seconds: int,
    seed: int,
    rss_limit_mb: int,
    timeout: int,
    grow: bool = False,
) -> Outcome:
    """Fuzz ``name`` for ``seconds`` in a child process; its outcome and figures."""
    max_len = getattr(load_target(name), "MAX_LEN", DEFAULT_MAX_LEN)
    crashes = CRASHES / name
    crashes.mkdir(parents=True, exist_ok=True)
    # The jsbx- prefix: CI's check for the tests' leftovers in /tmp covers this copy too.
    work = Path(tempfile.mkdtemp(prefix="jsbx-fuzz-"))
    started = time.monotonic()
    try:
        for seed_file in corpus_files(name):
            shutil.copy(seed_file, work / seed_file.name)
        options = [
            f"-seed={seed}",
            f"-max_total_time={seconds}",
            f"-rss_limit_mb={rss_limit_mb}",
            f"-timeout={timeout}",
            f"-max_len={max_len}",
            f"-artifact_prefix={crashes}/",
            "-print_final_stats=1",
        ]
        # libFuzzer's own -max_total_time ends the run; the margin covers the start.
        done = _child(name, [*options, str(work)], seconds + 120)
        if done.returncode == 0 and grow:
            # What the run kept in its copy are the inputs that reached new code (libFuzzer
            # names each by its SHA-1, so a kept one is not copied twice). Not libFuzzer's
            # -merge: it re-runs argv[0] as a program, and this child is a script's mode.
            kept = CORPUS / name
            kept.mkdir(parents=True, exist_ok=True)
            for found in work.iterdir():
                if not (kept / found.name).exists():
                    shutil.copy(found, kept / found.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log = done.stdout + done.stderr
    runs = re.findall(r"stat::number_of_executed_units: (\d+)", log)
    coverage = re.findall(r"\bcov: (\d+)", log)
    return Outcome(
        name,
        done.returncode,
        int(runs[-1]) if runs else 0,
        int(coverage[-1]) if coverage else 0,
        time.monotonic() - started,
        log,
    )


def _child(name: str, options: list[str], limit: float) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name, *options]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=limit, check=False)
    except subprocess.TimeoutExpired as exc:  # the child ignored its own time limit
        return subprocess.CompletedProcess(command, -9, _text(exc.stdout), _text(exc.stderr))


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def fuzz_in_this_process(name: str, options: list[str]) -> None:
    """The child: instrument the project's modules, load the target, hand over to libFuzzer
    (which exits the process when done)."""
    import atheris

    # String comparisons (startswith, endswith) guide the search into the parsers' cases. Not
    # atheris's RegEx hook: its pattern proxy breaks re's match(string, pos), which json uses.
    atheris.enabled_hooks.add("str")
    with atheris.instrument_imports(include=["jupyter_sandbox"]):
        module = load_target(name)
    atheris.Setup([sys.argv[0], *options], module.fuzz_one_input)
    atheris.Fuzz()


def failure_of(log: str) -> str:
    """What a failed run's log says of the failure: from the exception (or libFuzzer's own
    report of a timeout or an out-of-memory) on, else its end."""
    for mark in ("=== Uncaught Python exception", "==ERROR: libFuzzer", "ERROR: libFuzzer"):
        if mark in log:
            return log[log.index(mark) :][:8000]
    return log[-8000:]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        fuzz_in_this_process(argv[1], argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", help="targets to run (default: all)")
    parser.add_argument("--seconds", type=int, default=15, help="per target (default 15)")
    parser.add_argument("--seed", type=int, default=1, help="libFuzzer's seed (default 1)")
    parser.add_argument("--rss-limit-mb", type=int, default=1024, help="default 1024")
    parser.add_argument("--timeout", type=int, default=5, help="seconds per input (default 5)")
    parser.add_argument(
        "--grow",
        action="store_true",
        help="copy the inputs that reached new code into fuzz/corpus/<name>/",
    )
    args = parser.parse_args(argv)
    names = args.targets or target_names()
    unknown = sorted(set(names) - set(target_names()))
    if unknown:
        parser.error(f"no target {', '.join(unknown)}: the targets are {', '.join(target_names())}")
    failed = []
    for name in names:
        outcome = run_target(
            name,
            seconds=args.seconds,
            seed=args.seed,
            rss_limit_mb=args.rss_limit_mb,
            timeout=args.timeout,
            grow=args.grow,
        )
        print(
            f"{name}: {'FAILED' if outcome.failed else 'ok'} {outcome.runs} inputs in "
            f"{outcome.seconds:.0f} s, coverage {outcome.coverage}",
            flush=True,
        )
        if outcome.failed:
            failed.append(name)
            print(failure_of(outcome.log), file=sys.stderr)
    if failed:
        print(f"failures in {', '.join(failed)}: the inputs are in {CRASHES}/<target>/")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

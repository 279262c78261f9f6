"""The fuzz targets (fuzz/targets/): every kept input replays cleanly through its target, and a
short coverage-guided run of each with a fixed seed finds nothing (make fuzz runs long ones)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

FUZZ = Path(__file__).parents[2] / "fuzz"
SECONDS = 6  # per target, a smoke run: make fuzz gives each target minutes


def _load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_run", FUZZ / "run.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_run"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


runner = _load_runner()
TARGETS = runner.target_names()


def test_every_target_has_a_corpus() -> None:
    assert TARGETS, "fuzz/targets/ holds the targets"
    assert [name for name in TARGETS if not runner.corpus_files(name)] == []


@pytest.mark.parametrize("name", TARGETS)
def test_corpus_replays(name: str) -> None:
    """Each kept input (seeds, earlier finds, crashes turned regressions) runs through its
    target without an error the target does not expect."""
    target = runner.load_target(name)
    for path in runner.corpus_files(name):
        try:
            target.fuzz_one_input(path.read_bytes())
        except Exception as exc:
            raise AssertionError(f"fuzz/corpus/{name}/{path.name}: {exc!r}") from exc


@pytest.mark.parametrize("name", TARGETS)
def test_short_fuzzing_run_finds_nothing(name: str) -> None:
    outcome = runner.run_target(name, seconds=SECONDS, seed=1, rss_limit_mb=1024, timeout=5)
    assert not outcome.failed, (
        f"{name}: the fuzzer failed (exit {outcome.returncode}); the input is in "
        f"fuzz/crashes/{name}/:\n{runner.failure_of(outcome.log)}"
    )
    assert outcome.runs > 0, outcome.log[-2000:]

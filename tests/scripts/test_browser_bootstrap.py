"""The browser bootstrap: with Chromium there, it changes nothing and says nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "browser-bootstrap.sh"


def test_with_chromium_installed_it_does_nothing() -> None:
    assert Path("/usr/bin/chromium").exists(), "make browser installs it before the tests"
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")

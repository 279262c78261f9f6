"""REST attacks run against a real Jupyter server: the server extension's test fixtures."""

from __future__ import annotations

from tests.server_extension.conftest import *  # fixtures, used by name (F403 allowed in pyproject)

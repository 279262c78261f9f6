"""``GET /api/sandbox-features``: the optional features, named by what the server's routes are,
answered with a 200 (the Lab extension learns them from it without probing routes)."""

from __future__ import annotations

from tornado import web

from jupyter_sandbox.server_extension import app, handlers
from tests.server_extension.conftest import Fetch, api


async def test_features_name_every_optional_route_this_server_has(jp_fetch: Fetch) -> None:
    status, answer = await api(jp_fetch, "GET", root="sandbox-features")
    assert status == 200, answer
    assert answer == {"features": list(handlers.OPTIONAL_FEATURES)}


def test_a_feature_whose_routes_are_missing_is_not_named() -> None:
    without_terminal_or_snapshots = [
        (pattern, handler)
        for pattern, handler in app.default_handlers
        if "/terminal" not in pattern and "snapshots" not in pattern
    ]
    assert handlers.server_features(without_terminal_or_snapshots) == (
        "network",
        "files",
        "commands",
        "ports",
    )
    assert handlers.server_features([(r"/api/sandboxes/?", web.RequestHandler)]) == ()

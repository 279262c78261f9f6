"""The E2B API's routes, which the server extension's app adds to its own (app.py).

Kept out of the package's ``__init__`` so that its parsers (connect_protocol.py and the
services) import without the server extension, as the fuzz targets import them.
"""

from __future__ import annotations

from tornado import web

from jupyter_sandbox.e2b_api.control_plane import control_plane_handlers
from jupyter_sandbox.e2b_api.data_plane import data_plane_handlers

e2b_handlers: list[tuple[str, type[web.RequestHandler]]] = [
    *control_plane_handlers,
    *data_plane_handlers,
]

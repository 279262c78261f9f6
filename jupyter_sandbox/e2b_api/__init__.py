"""An E2B-compatible API on the server extension: what ``e2b`` and ``e2b-code-interpreter``
call, answered by the same core calls as our own REST API (issue 34; docs/how-to/e2b.md).

* control plane, ``{base_url}api/e2b`` (``E2B_API_URL``): control_plane.py;
* data plane, ``{base_url}api/e2b/sandbox`` (``E2B_SANDBOX_URL``): data_plane.py routes each
  request by E2B's own headers to envd's Connect services (process_service.py, its PTY
  pty_service.py, filesystem_service.py, over connect_protocol.py), its ``/files`` and
  ``/health`` (file_transfer.py), or the code interpreter's ``/execute`` (execute_stream.py).
  The OpenAI Agents SDK's helper scripts are run through /bin/sh: agents_helpers.py.

The routes: routes.py (the server extension adds them). Keys and access tokens: keys.py;
E2B's error answers: errors.py; E2B's home and user: home.py.
"""

from __future__ import annotations

"""An MCP (Model Context Protocol) server over one user's sandboxes: ``jupyter sandbox mcp``.

A host (a desktop assistant, an IDE, an agent framework) starts it and calls its tools over
stdio: sandbox_create, sandbox_list, sandbox_kill, run_code, command_run, file_read,
file_write, file_list. It is a client of a Jupyter Server with the jupyter_sandbox extension,
through :class:`~jupyter_sandbox.client.SandboxClient` (REST), so a host gets exactly the
isolation, ownership and quotas the REST API gives. It needs the ``mcp`` package
(``pip install 'jupyter-sandbox[mcp]'``); nothing else in jupyter_sandbox imports this one.

Modules, one concept each: server.py (the protocol's handlers and the stdio transport),
streamable_http.py (the Streamable HTTP transport, behind a bearer check),
tools.py (each tool's description, schema and work), arguments.py (a call's arguments checked
against its schema) and content.py (run outputs as MCP content, bounded).
"""

from __future__ import annotations

from jupyter_sandbox.mcp_server.server import sandbox_server, serve_stdio

__all__ = ["sandbox_server", "serve_stdio"]

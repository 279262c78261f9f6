"""MCP over Streamable HTTP, for hosts that connect to a URL rather than start a command:
``jupyter sandbox mcp --transport http --port PORT``, a process of its own serving
``http://IP:PORT/mcp``, on 127.0.0.1 unless told otherwise.

Whoever can reach that URL acts with the Jupyter token the process holds, so every request must
carry that same token as a bearer token (``Authorization: Bearer TOKEN``): a caller gains
nothing it could not do with the token over REST already. The MCP package's own checks of the
Host and Origin headers (against DNS rebinding) apply on a loopback address.
"""

from __future__ import annotations

import hmac

import uvicorn
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from jupyter_sandbox.client.client import SandboxClient
from jupyter_sandbox.mcp_server.server import sandbox_server

PATH = "/mcp"


class BearerCheck:
    """An ASGI app that answers 401 to an HTTP request without ``Authorization: Bearer
    TOKEN`` and passes every other one (and the server's lifespan events) to ``app``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = [value for name, value in scope["headers"] if name == b"authorization"]
            # One header, compared in constant time: the token is not guessed byte by byte.
            if len(given) != 1 or not hmac.compare_digest(given[0], self.expected):
                refusal = JSONResponse(
                    {
                        "error": "unauthorized",
                        "message": "send the Jupyter token this MCP server was started with "
                        "as Authorization: Bearer TOKEN",
                    },
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def serve_http(client: SandboxClient, token: str, ip: str, port: int) -> None:
    """Serve MCP at ``http://ip:port/mcp`` to callers bearing ``token`` until interrupted
    (SIGINT or SIGTERM)."""
    server = sandbox_server(client)
    app = BearerCheck(server.streamable_http_app(streamable_http_path=PATH, host=ip), token)
    config = uvicorn.Config(app, host=ip, port=port, log_level="warning", lifespan="on")
    uvicorn.Server(config).run()

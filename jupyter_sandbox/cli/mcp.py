"""``jupyter sandbox mcp --url BASE_URL``: an MCP server over stdio whose tools act on the
sandboxes of a Jupyter Server with the extension (jupyter_sandbox/mcp_server/), for an MCP
host to start as a subprocess.

The token comes from ``JUPYTER_TOKEN`` or a file (``--token-file``), never from the command
line, where any user of the machine could read it (``ps``). The ``mcp`` package is imported
only when the verb runs, so ``jupyter sandbox`` works without it and says how to install it.
"""

from __future__ import annotations

import os
from pathlib import Path

from traitlets import Enum, Float, Int, Unicode

from jupyter_sandbox.cli.owner import SandboxCommandApp
from jupyter_sandbox.protocol.errors import InvalidSettingError

TOKEN_VARIABLE = "JUPYTER_TOKEN"
MAX_TOKEN_FILE = 4096  # bytes: a token is tens of characters; a larger file is the wrong one


class McpApp(SandboxCommandApp):
    name = "jupyter-sandbox-mcp"
    description = (
        "Serve MCP (Model Context Protocol) over stdio: tools to create sandboxes, run code "
        "and commands and read and write files in them, on the Jupyter Server at --url. The "
        "token is JUPYTER_TOKEN's, or --token-file's."
    )
    examples = "\n".join(
        [
            "JUPYTER_TOKEN=... jupyter sandbox mcp --url http://127.0.0.1:8888/",
            "jupyter sandbox mcp --url https://hub.example.com/user/NAME/ --token-file ~/.token",
            "jupyter sandbox mcp --url http://127.0.0.1:8888/ --transport http --port 8765",
        ]
    )
    url = Unicode(
        "",
        config=True,
        help="""The Jupyter Server's URL with its base URL, e.g. http://127.0.0.1:8888/ or
        https://HUB/user/NAME/ (required).""",
    )
    token_file = Unicode(
        "",
        config=True,
        help=f"""A file holding the server's API token (its first line, at most
        {MAX_TOKEN_FILE} bytes); default: the {TOKEN_VARIABLE} environment variable.""",
    )
    timeout = Float(
        120.0,
        config=True,
        help="""Seconds to wait for the server to answer a request (a code run or command
        waits its own timeout on top of it).""",
    )
    transport = Enum(
        ["stdio", "http"],
        "stdio",
        config=True,
        help="""stdio: speak MCP on this process's stdin and stdout, for a host that starts
        it; http: serve MCP's Streamable HTTP at http://IP:PORT/mcp (--ip, --port), each
        request bearing the token as Authorization: Bearer TOKEN.""",
    )
    ip = Unicode(
        "127.0.0.1",
        config=True,
        help="With --transport http: the address to listen on (default: loopback only).",
    )
    port = Int(
        8765,
        config=True,
        help="With --transport http: the TCP port to listen on.",
    )
    aliases = {
        "url": "McpApp.url",
        "token-file": "McpApp.token_file",
        "timeout": "McpApp.timeout",
        "transport": "McpApp.transport",
        "ip": "McpApp.ip",
        "port": "McpApp.port",
    }

    def start(self) -> None:
        self.exit_with(self.serve)

    def serve(self) -> int:
        if not self.url:
            raise InvalidSettingError(
                "--url is required: the Jupyter Server's URL with its base URL, e.g. "
                "jupyter sandbox mcp --url http://127.0.0.1:8888/"
            )
        token = self.token()
        try:
            from jupyter_sandbox.mcp_server.server import serve_stdio
        except ImportError as error:
            raise InvalidSettingError(
                f"jupyter sandbox mcp needs the mcp package ({error}): install it with "
                "pip install 'jupyter-sandbox[mcp]'"
            ) from None
        from jupyter_sandbox.client.client import SandboxClient

        client = SandboxClient(self.url, token=token, timeout=self.timeout)
        if self.transport == "http":
            from jupyter_sandbox.mcp_server.streamable_http import serve_http

            self.log.warning("serving MCP at http://%s:%d/mcp", self.ip, self.port)
            serve_http(client, token, self.ip, self.port)
        else:
            serve_stdio(client)
        return 0

    def token(self) -> str:
        """The API token: the first line of --token-file, else JUPYTER_TOKEN."""
        if not self.token_file:
            token = os.environ.get(TOKEN_VARIABLE, "")
            if not token:
                raise InvalidSettingError(
                    f"no token: set {TOKEN_VARIABLE} in the MCP server's environment (the "
                    "host's configuration has an env entry for it), or name a file holding it "
                    "with --token-file"
                )
            return token
        path = Path(self.token_file).expanduser()
        try:
            with path.open("rb") as file:
                data = file.read(MAX_TOKEN_FILE + 1)
        except OSError as error:
            raise InvalidSettingError(
                f"--token-file {path}: cannot read it ({error.strerror})"
            ) from None
        lines = data.decode("utf-8", "replace").splitlines()
        token = lines[0].strip() if lines else ""
        if len(data) > MAX_TOKEN_FILE or not token:
            raise InvalidSettingError(
                f"--token-file {path} must hold the token on its first line (and be at most "
                f"{MAX_TOKEN_FILE} bytes)"
            )
        return token

"""The terminal WebSocket's reading of a client's message (server_extension/terminal_handlers.py).

Every frame a client sends is fed to ``client_message`` as the handler gets it (text frames as
str, binary ones as bytes). Malformed input is InvalidRequestError, which the handler logs and
ignores; anything else would escape ``on_message`` and drop the connection. What it returns
must be one of the two messages in the shape the terminal takes: stdin as bytes, set_size as
whole numbers within MAX_SIZE.
"""

from __future__ import annotations

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.operations.terminals import MAX_SIZE
from jupyter_sandbox.server_extension.terminal_handlers import client_message

MAX_LEN = 16384


def fuzz_one_input(data: bytes) -> None:
    # The first byte picks the frame's kind: text (decoded as tornado decodes it) or binary.
    if not data:
        return
    message: str | bytes = data[1:]
    if data[0] & 1:
        try:
            message = data[1:].decode("utf-8")
        except UnicodeDecodeError:
            return  # tornado closes a connection whose text frame is not UTF-8
    try:
        kind, content = client_message(message)
    except InvalidRequestError:
        return
    if kind == "stdin":
        assert isinstance(content, bytes)
    else:
        assert kind == "set_size", kind
        rows, cols = content
        for value in (rows, cols):
            assert type(value) is int, content
            assert 1 <= value <= MAX_SIZE, content

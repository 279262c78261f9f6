"""The E2B API's reading of envd's Connect requests (e2b_api/connect_protocol.py, and the
services' field readers in e2b_api/process_service.py and e2b_api/filesystem_service.py): what
an E2B client, or anyone holding a sandbox's access token, posts to the data plane.

The first byte picks how the rest is read: even, a server stream's body (one envelope) holding a
StartRequest; odd, a unary body holding a MakeDir/Move request's fields. Every refusal is an
InvalidRequestError or E2BUnsupportedError (a 400 in Connect's form); any other exception would
be a 500. A StartRequest that passes must name an absolute program.
"""

from __future__ import annotations

from jupyter_sandbox.e2b_api.connect_protocol import Message, request_message
from jupyter_sandbox.e2b_api.errors import E2BUnsupportedError
from jupyter_sandbox.e2b_api.process_service import start_request
from jupyter_sandbox.protocol.errors import InvalidRequestError

MAX_LEN = 16384


def fuzz_one_input(data: bytes) -> None:
    if not data:
        return
    stream, body = data[0] % 2 == 0, data[1:]
    try:
        message = request_message(body, "stream" if stream else "unary")
        if stream:
            command, _ = start_request(Message(message, "StartRequest"), "60000")
            assert command.argv[0].startswith("/"), command.argv
        else:
            fields = Message(message, "MoveRequest")
            fields.string("source", limit=4096)
            fields.string("destination", limit=4096)
            fields.integer("depth", default=1, high=1)
            fields.done()
    except (InvalidRequestError, E2BUnsupportedError):
        pass

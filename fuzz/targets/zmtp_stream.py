"""The server's reading of a sandbox kernel's ZMTP framing (sandbox/kernel_link/zmtp_frames.py,
which message_guard.py runs on every byte a kernel sends the server's clients).

ZmtpError is the expected outcome for anything malformed or past the bound (the guard cuts the
connection). The promises beyond that: the outcome does not depend on how the stream is cut
into chunks (the first byte chooses a chunk size), and no message the reader let through costs
more than its bound.
"""

from __future__ import annotations

from jupyter_sandbox.sandbox.kernel_link.zmtp_frames import ZmtpError, ZmtpReader

BOUND = 4096


def _outcome(data: bytes, chunk: int) -> tuple[int, str | None]:
    reader = ZmtpReader(BOUND)
    try:
        for at in range(0, len(data), chunk):
            reader.feed(data[at : at + chunk])
            assert reader._message_cost <= BOUND
    except ZmtpError as exc:
        return reader.messages, exc.message
    return reader.messages, None


def fuzz_one_input(data: bytes) -> None:
    if not data:
        return
    chunk, stream = data[0] % 16 + 1, data[1:]
    assert _outcome(stream, chunk) == _outcome(stream, len(stream) or 1)

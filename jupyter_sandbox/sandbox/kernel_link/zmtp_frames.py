"""Reading the ZMTP framing of a sandbox kernel's byte stream, to bound each message's size.

ZMQ hands a message to its reader only once every part has arrived, and holds all the parts
until then: libzmq bounds one part (``ZMQ_MAXMSGSIZE``), never a message, so a kernel that
names a small buffer in a million parts makes the receiving process hold all of them. The
server's own clients of sandbox kernels (message_guard.py) therefore read the framing of what
each kernel sends before their ZMQ sockets do, and stop a message whose parts add up to more
than the bound before its next frame is passed on.

Only the framing is read, never a body: the greeting, then frames (RFC 23, ZMTP 3.0, and 3.1,
which only adds commands). Each frame is a flags byte, a size of one byte or of eight (network
order) and that many bytes. Strictly, as libzmq reads them: a greeting of ZMTP 3 with the NULL
mechanism (no other is used between host and sandbox), flag bits ZMTP does not define unset,
no command inside a multipart message and none marked as having more parts.
"""

from __future__ import annotations

from jupyter_sandbox.protocol.errors import SandboxError

GREETING_BYTES = 64  # signature (10), version (2), mechanism (20), as-server (1), filler (31)
NULL_MECHANISM = b"NULL".ljust(20, b"\0")
MORE, LONG, COMMAND = 0x01, 0x02, 0x04
# What one part costs its receiver besides its bytes: libzmq's message (64 bytes), and the
# Python object and list slot pyzmq makes of it. A million empty parts are no cheaper than
# their bytes would be.
PART_COST = 256
# The most parts a message may have: a Jupyter message has seven besides one per buffer, and
# every part is a Python object to make and read in the server's one event loop.
MAX_PARTS = 4096
# The largest command (a handshake's READY with its properties, a heartbeat): libzmq's are
# under 300 bytes. Commands never reach the reader's program, so nothing slows a stream of
# them but this count: at most MAX_COMMANDS_IN_A_ROW between two messages.
MAX_COMMAND_BYTES = 4096
MAX_COMMANDS_IN_A_ROW = 16


class ZmtpError(SandboxError):
    """A sandbox kernel's stream broke ZMTP's framing or a message passed its bound; its
    connection is closed."""

    code = "zmtp_error"


class ZmtpReader:
    """Follows one direction of a ZMTP connection, chunk by chunk, with ``max_message_bytes``
    the most a message may cost (its parts' bytes plus PART_COST each).

    :meth:`feed` takes each chunk as it arrives and raises :class:`ZmtpError` at the first byte
    that breaks the framing or would take a message past its bound; the caller passes a chunk
    on only after it was fed, so the receiver never starts holding what is refused. Only a
    greeting and a frame's header (at most nine bytes) are kept between chunks; bodies are
    counted, not copied.
    """

    def __init__(self, max_message_bytes: int) -> None:
        self.max_message_bytes = max_message_bytes
        self._greeting = bytearray()
        self._header = bytearray()  # a frame header split between two chunks
        self._body_left = 0  # bytes of the current frame's body still to come
        self._message_cost = 0  # of the message whose parts are coming (0 between messages)
        self._message_parts = 0
        self._commands = 0  # since the last whole message
        self.messages = 0  # whole messages read (commands not counted)

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        data = memoryview(chunk)
        at, end = 0, len(data)
        while at < end:
            if len(self._greeting) < GREETING_BYTES:
                take = min(GREETING_BYTES - len(self._greeting), end - at)
                self._greeting += data[at : at + take]
                at += take
                if len(self._greeting) == GREETING_BYTES:
                    _check_greeting(bytes(self._greeting))
            elif self._body_left:
                take = min(self._body_left, end - at)
                self._body_left -= take
                at += take
            elif not self._header and end - at >= 9:  # the usual case: a header in one piece
                size = 9 if data[at] & LONG else 2
                self._frame(data[at : at + size])
                at += size
            else:
                self._header.append(data[at])
                at += 1
                if len(self._header) == (9 if self._header[0] & LONG else 2):
                    self._frame(memoryview(bytes(self._header)))
                    self._header.clear()

    def _frame(self, header: memoryview) -> None:
        """A frame's whole header (flags, size): checked and counted before its body comes."""
        flags, size = header[0], int.from_bytes(header[1:], "big")
        if flags & ~(MORE | LONG | COMMAND):
            raise ZmtpError(f"undefined ZMTP frame flags {flags:#04x}")
        if flags & COMMAND:
            self._commands += 1
            if flags & MORE or self._message_parts:
                raise ZmtpError("a ZMTP command inside a multipart message")
            if size > MAX_COMMAND_BYTES:
                raise ZmtpError(f"a ZMTP command of {size} bytes")
            if self._commands > MAX_COMMANDS_IN_A_ROW:
                raise ZmtpError(f"more than {MAX_COMMANDS_IN_A_ROW} ZMTP commands in a row")
        else:
            self._message_parts += 1
            self._message_cost += size + PART_COST
            if self._message_cost > self.max_message_bytes:
                raise ZmtpError(
                    f"a kernel message of more than {self.max_message_bytes} bytes "
                    f"(parts' bytes, and {PART_COST} for each part)"
                )
            if self._message_parts > MAX_PARTS:
                raise ZmtpError(f"a kernel message of more than {MAX_PARTS} parts")
            if not flags & MORE:
                self._message_cost = self._message_parts = self._commands = 0
                self.messages += 1
        self._body_left = size


def _check_greeting(greeting: bytes) -> None:
    """A ZMTP 3 greeting with the NULL mechanism, or ZmtpError. The signature's padding is not
    read (ZMTP 1 used it for a length); ZMTP 3's minor versions are compatible by design."""
    if greeting[0] != 0xFF or greeting[9] != 0x7F:
        raise ZmtpError("not a ZMTP greeting")
    if greeting[10] != 3:
        raise ZmtpError(f"ZMTP version {greeting[10]} (only 3 is spoken here)")
    if greeting[12:32] != NULL_MECHANISM:
        raise ZmtpError("a ZMTP security mechanism other than NULL")
    if greeting[32] not in (0, 1):
        raise ZmtpError(f"a ZMTP as-server byte of {greeting[32]}")

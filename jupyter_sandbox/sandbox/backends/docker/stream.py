"""Commands inside a Docker sandbox whose input and output are streams, not bytes in memory.

Snapshots move workspaces of a gigabyte in and out of sandboxes: holding them in memory (as
:func:`~.exec.run_exec` does with its ``stdin`` and output) would cost the server that
much memory per snapshot. Here the caller's ``feed`` writes the command's standard input in
pieces and ``sink`` receives its standard output frame by frame, so memory stays bounded.

Output is read on a second thread while the input is written: a command that reports errors
on stderr while it still has input to read (tar on a full disk) would otherwise fill the
socket's buffer and both sides would wait for each other until the time limit.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

from jupyter_sandbox.sandbox.backends.base import Feed, Sink
from jupyter_sandbox.sandbox.backends.docker.attached import AttachedExec
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.docker.exec import ExecWatch, Inspect
from jupyter_sandbox.sandbox.backends.docker.exec_start import exec_result
from jupyter_sandbox.sandbox.backends.records import ExecResult
from jupyter_sandbox.sandbox.programs.exec_marks import new_mark

# stderr is for error messages: the first MiB is kept. So is stdout's when no sink takes it
# (a command whose input is streamed, such as an unpacking tar, says little there): what the
# sandbox writes past it is read and dropped, never held.
MAX_STDERR = 1024**2
MAX_UNSUNK_STDOUT = 1024**2


class _SocketWriter:
    """The exec's stdin as a file a ``feed`` writes to (tarfile writes to it directly)."""

    def __init__(self, raw: socket.socket) -> None:
        self._raw = raw
        self.written = 0

    def write(self, data: bytes) -> int:
        self._raw.sendall(data)
        self.written += len(data)
        return len(data)


async def stream_exec(
    engine: DockerEngine,
    container: str,
    argv: list[str],
    *,
    timeout: float,
    inspect: Inspect,
    user: str = "",
    feed: Feed | None = None,
    sink: Sink | None = None,
    privileged: bool = False,
    environment: dict[str, str] | None = None,
    mark: dict[str, str] | None = None,
) -> ExecResult:
    """Run ``argv`` in ``container``, stopped after ``timeout`` s; ``ExecResult.stdout`` is
    empty when a ``sink`` took the output, its first MAX_UNSUNK_STDOUT bytes otherwise. An
    exception raised by ``feed`` or ``sink`` ends the command and is raised here.
    ``privileged`` and ``environment`` (added to the container's, as is the killer's at the
    time limit) and ``mark`` (the exec's mark, which its argv names) are for the sealed
    archiver only (sealed_archive.py).
    """
    mark = mark or new_mark()  # what kills the command when its time is up (exec_deadline.py)
    # The killer is given the sealed archiver's environment too (see ExecWatch.environment).
    watch = ExecWatch(engine, container, user, mark, timeout, inspect, environment)

    def run() -> ExecResult:
        api = engine.client.api
        exec_id, attached = watch.start(
            argv, environment, stdin=feed is not None, privileged=privileged
        )
        out, err = bytearray(), bytearray()
        failures: list[BaseException] = []
        reader = threading.Thread(
            target=_read_output, args=(attached, sink, out, err, failures), daemon=True
        )
        reader.start()
        try:
            if feed is not None:
                # A command that stops reading: its exit status and stderr say why.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    feed(_SocketWriter(attached.socket))
                attached.shutdown(socket.SHUT_WR)  # end of input
            reader.join(timeout + 10)
        except BaseException:
            attached.shutdown()
            raise
        finally:
            reader.join(5)
            attached.close()
        if failures:
            raise failures[0]
        return exec_result(api.exec_inspect(exec_id), argv, bytes(out), bytes(err))

    return await watch.wait(run, timeout + 20)


def _read_output(
    attached: AttachedExec,
    sink: Callable[[bytes], None] | None,
    out: bytearray,
    err: bytearray,
    failures: list[BaseException],
) -> None:
    try:
        for stream, data in attached.frames():
            if stream == "stdout":
                if sink is not None:
                    sink(data)
                else:
                    out += data[: MAX_UNSUNK_STDOUT - len(out)]
            else:
                err += data[: MAX_STDERR - len(err)]
    except BaseException as exc:  # handed to the caller's thread
        failures.append(exc)
        attached.shutdown()  # the command's writes now fail: it ends

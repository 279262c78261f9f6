"""The pipe between a host process and the watcher it leaves behind to act once it is gone.

The kernel's lifeline (lifeline.py) and the CLI's exec watcher (exec_watcher.py) are both
small host processes that must act when the process that started them ends, however it ends
(SIGKILL included), and do nothing when it ended in order. Both are started the same way: in a
session of their own, so that a signal to the starter's process group does not reach them, with
the read end of a pipe as their standard input, whose write end only the starter holds (both
ends are close-on-exec, so no other child inherits it). The operating system closes that end
when the starter ends; the watcher then reads end of file, unless the starter wrote
:data:`DONE` first.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TypeVar

from jupyter_sandbox.sandbox.host.python_command import module_command

if TYPE_CHECKING:
    import asyncio
    import subprocess

MAX_ANSWER = 64  # bytes of a watcher's first line on its standard output (``answers``)
# Written by a starter that ended in order: nothing is left for the watcher to do. A byte no
# message id holds (run_watcher.py reads one where DONE may come instead: a letter here took
# runs whose id began with it for ended ones, and left them unwatched).
DONE = b"."

_Pipe = TypeVar("_Pipe", bound="WatcherPipe")


class WatcherPipe:
    """The starter's end: the write end of the pipe whose read end the watcher waits on."""

    def __init__(self, write_fd: int, process: subprocess.Popen[bytes]) -> None:
        self._write_fd: int | None = write_fd
        self.process = process

    @classmethod
    def spawn(
        cls: type[_Pipe], module: str, *args: str, first: bytes = b"", answers: bool = False
    ) -> _Pipe:
        """Start ``python -m module args...`` as the watcher; ``first`` goes into the pipe
        before it starts (it reads it whenever it is up), so it is never on a command line.
        With ``answers``, the watcher's standard output is a pipe to the starter
        (:meth:`answer`): for a watcher that must be ready before the starter goes on."""
        import subprocess  # the watcher process itself needs none of it

        read_fd, write_fd = os.pipe()
        try:
            if first:
                os.write(write_fd, first)
            process = subprocess.Popen(
                module_command(module, *args),
                stdin=read_fd,
                stdout=subprocess.PIPE if answers else subprocess.DEVNULL,
                start_new_session=True,  # not ended by a signal to the starter's process group
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(write_fd, process)

    async def answer(self, seconds: float) -> bytes:
        """The watcher's first line (``answers``), or b"" if it wrote none within ``seconds``
        or ended first. Awaited on the event loop, so that a starter interrupted meanwhile
        (Ctrl-C) is not held by a thread blocked on the pipe."""
        import asyncio

        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        os.set_blocking(fd, False)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        line = b""
        while not line.endswith(b"\n") and len(line) < MAX_ANSWER:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, _set_once, readable)
            try:
                await asyncio.wait_for(readable, max(deadline - loop.time(), 0))
            except asyncio.TimeoutError:
                return b""
            finally:
                loop.remove_reader(fd)
            try:
                piece = os.read(fd, MAX_ANSWER - len(line))
            except BlockingIOError:
                continue
            if not piece:
                return b""
            line += piece
        return line

    def release(self) -> None:
        """The starter dealt with what the watcher guards: the watcher exits without acting."""
        if self._write_fd is None:
            return
        try:
            os.write(self._write_fd, DONE)
        except OSError:  # the watcher is gone already
            pass
        finally:
            os.close(self._write_fd)
            self._write_fd = None
            if self.process.stdout is not None:
                self.process.stdout.close()


def log_to_stderr(title: str) -> None:
    """The watcher's log: INFO and up on its standard error, which is its starter's, each line
    headed by ``title``. That stderr may be a pipe nobody reads once the starter is gone: a
    failed write is dropped, not reported (which would write again)."""
    import logging
    import sys

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"[{title} %(asctime)s %(levelname)s] %(message)s",
    )
    logging.raiseExceptions = False


def _set_once(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def ended_in_order(stdin_fd: int) -> bool:
    """The watcher's side: block until the starter closes its end of the pipe (however it
    ended); True if it wrote :data:`DONE` first. os.read retries itself on EINTR (PEP 475)."""
    return os.read(stdin_fd, 1) == DONE

"""The exec watcher: a small host process per ``jupyter sandbox exec`` that kills the command,
with everything it started, once the CLI process is gone without having seen it end (SIGKILL
included).

A CLI that is interrupted or fails while its command runs kills it itself (exec.py's ExecWatch
gives up on the wait and kills what the exec's mark reaches). A process killed with SIGKILL
(an agent's script killed, a terminal closed under ``kill -9``) can do nothing, and the engine
lets an exec run on when its attach connection drops: the command would run to its time limit,
or forever when nothing reads it. So the CLI starts this process before the exec, as the
kernel starts its lifeline (lifeline.py): in a session of its own (a signal to the CLI's process
group does not reach it), with the read end of a pipe as its standard input, whose write end
only the CLI holds. The CLI writes the exec's mark (exec_marks.new_mark) into the pipe
first, so the mark is never on a command line another host user can read. The operating system
closes the pipe when the CLI ends in any way; this process then reads end of file, and unless
the CLI wrote ``DONE`` (watcher_pipe.py) first (its command ended, or it dealt with it), it kills what the
mark reaches in the sandbox (exec_deadline.kill_marked), as the CLI's own kill would have.

The sandbox side noticing instead (the supervisor reading its standard input's end when the
engine drops the exec's connection) was not chosen: the command's input ends by itself too
(``exec -i`` with a finite input, or none), and telling the two apart would take a framing of
the command's input through the supervisor, for every command.

While it waits it holds the pipe and an interpreter with the standard library (a few MiB); the
engine's client is imported only to kill.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from jupyter_sandbox.sandbox.host.watcher_pipe import WatcherPipe, ended_in_order, log_to_stderr

log = logging.getLogger(__name__)

NAME_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ_")
MAX_MARK = 256  # bytes of the mark's line: NAME=TOKEN and a newline, well under this
# An exec the engine was asked to start just before the CLI died may start after the first
# kill looked: a second kill this long after the first reaches it.
SECOND_KILL_SECONDS = 1.0


class ExecWatcher(WatcherPipe):
    """The CLI's end of the pipe whose read end the watcher process waits on."""

    @classmethod
    def start(cls, sandbox_id: str, user: str, mark: dict[str, str]) -> ExecWatcher:
        """Start the watcher of the command marked ``mark`` that this process is about to run
        in ``sandbox_id`` as ``user`` ("" for the sandbox's own user)."""
        ((name, token),) = mark.items()
        return cls.spawn(
            "jupyter_sandbox.sandbox.backends.docker.exec_watcher",
            sandbox_id,
            user,
            first=f"{name}={token}\n".encode(),
        )


def read_mark(stdin_fd: int) -> dict[str, str]:
    """The mark's line, ``NAME=TOKEN``, at the start of the pipe; ValueError if it is not one."""
    line = b""
    while not line.endswith(b"\n") and len(line) <= MAX_MARK:
        piece = os.read(stdin_fd, 1)  # one byte at a time: what follows is the CLI's end
        if not piece:
            break
        line += piece
    name, equals, token = line.removesuffix(b"\n").decode("ascii").partition("=")
    # Checked by its form, not against exec_deadline.EXEC_MARK: importing that module would
    # load the engine's client into every waiting watcher.
    if (
        not line.endswith(b"\n")
        or not name
        or not all(c in NAME_LETTERS for c in name)
        or not equals
    ):
        raise ValueError("expected the exec's mark, NAME=TOKEN, on the first line")
    if not token or not all(c in "0123456789abcdef" for c in token):
        raise ValueError("the exec's token must be lower-case hexadecimal digits")
    return {name: token}


async def kill_abandoned(sandbox_id: str, user: str, mark: dict[str, str]) -> None:
    """Kill what ``mark`` reaches in ``sandbox_id``, twice, SECOND_KILL_SECONDS apart."""
    import asyncio

    from jupyter_sandbox.sandbox import labels
    from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
    from jupyter_sandbox.sandbox.backends.docker.exec_deadline import kill_marked

    engine = DockerEngine()
    try:
        container = labels.container_name(sandbox_id)
        await kill_marked(engine, container, user, mark)
        await asyncio.sleep(SECOND_KILL_SECONDS)
        await kill_marked(engine, container, user, mark)
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_sandbox.sandbox.backends.docker.exec_watcher"
    )
    parser.add_argument("sandbox_id")
    parser.add_argument("user")
    args = parser.parse_args(argv)
    log_to_stderr("jupyter sandbox exec watcher")
    try:
        mark = read_mark(sys.stdin.fileno())
    except ValueError as exc:
        parser.error(str(exc))
    if ended_in_order(sys.stdin.fileno()):
        return 0
    started = time.monotonic()
    import asyncio  # only now: the waiting process stays small

    asyncio.run(kill_abandoned(args.sandbox_id, args.user, mark))  # failures are logged
    log.info(
        "stopped the command of a jupyter sandbox exec that ended before it, in %s (%.1fs)",
        args.sandbox_id,
        time.monotonic() - started,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``jupyter sandbox run [--timeout=SECONDS] SANDBOX_ID [CODE]``: Python run in a sandbox's live
interpreter from the command line, as ``POST /api/sandboxes/{id}/execute`` runs it over REST.

The code runs in the kernel the sandbox already has (sandbox/operations/code_runs.py): a run sees what
earlier runs, cells and a notebook attached to the sandbox left, and leaves its own, so
``run ID 'x = 41'`` then ``run ID 'x + 1'`` prints 42. Its output is printed as it comes, as
``python`` would print it: what it writes to stdout and stderr on this process's own; a
displayed value (an expression's result, ``display(...)``) as its text/plain, and a note
on stderr for one that has none (an image); an exception's traceback on stderr, without the
terminal colours IPython adds. A terminal cannot take back lines already printed, so
``clear_output`` is ignored and an updated display is printed again. The exit status says how
the run ended: 0, 1 when the code raised, 124 when its time ran out (the code was interrupted,
as timeout(1) has it), 130 when Ctrl-C interrupted it here (it is interrupted in the sandbox too).
Code that starts with "-" follows "--", where options end: ``run ID -- '-x'``.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from typing import Any

from traitlets import Float

from jupyter_sandbox.cli.owner import OwnerCommand, reader_left
from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.code_runs import MAX_CODE, CodeRequest, CodeResult, run_code
from jupyter_sandbox.sandbox.operations.commands import DEFAULT_TIMEOUT, MAX_TIMEOUT
from jupyter_sandbox.sandbox.operations.run_watcher import RunWatcher

TIMED_OUT = 124  # the code ran past its time limit, as timeout(1) has it
INTERRUPTED = 130  # Ctrl-C, as a shell has it (SIGINT)
FROM_STDIN = "-"


class RunApp(OwnerCommand):
    description = (
        "Run Python code in a running sandbox's interpreter, where variables and imports stay "
        "from one run to the next; print its output as it comes. Exit status: 0, 1 if the code "
        "raised, 124 if it ran out of time."
    )
    usage = "run [--timeout=SECONDS] SANDBOX_ID [CODE | -]"
    # Lines joined rather than an indented block: the help strips the block's first indent only.
    examples = "\n".join(
        [
            "jupyter sandbox run 0123456789ab 'x = 41'",
            "jupyter sandbox run 0123456789ab 'print(x + 1)'  # 42: the interpreter kept x",
            "jupyter sandbox run --timeout=600 0123456789ab < train.py  # the code from stdin",
        ]
    )
    timeout = Float(
        DEFAULT_TIMEOUT,
        config=True,
        help=f"""Seconds the code may run before it is interrupted (at most {MAX_TIMEOUT:g}),
        counted from its start (not its wait behind a cell or run ahead of it): the run then
        exits with status 124.""",
    )
    aliases = {"timeout": "RunApp.timeout"}
    _code_sent = False  # whether Ctrl-C can have interrupted code in the sandbox

    def start(self) -> None:
        try:
            super().start()
        except KeyboardInterrupt:
            # asyncio.run cancelled the run first, which interrupted the code in the sandbox.
            where = " in the sandbox too" if self._code_sent else ""
            print(f"interrupted: the code was interrupted{where}", file=sys.stderr)
            self.exit(INTERRUPTED)

    async def run(
        self, manager: SandboxManager, owner: str, sandbox_id: str, code: str = FROM_STDIN
    ) -> int:
        # A sandbox that is not running (paused: its kernel frozen) is refused before a watcher
        # starts: the watcher would try to reach the kernel for its whole connect time (20 s),
        # holding this process's stderr open, so that a caller reading it to its end (a shell's
        # $(...), subprocess.run) waited that long for the one-line refusal.
        await manager.running(owner, sandbox_id)
        # Killed with SIGKILL, this process could not interrupt its code, which would hold the
        # interpreter for every later run and cell: its watcher does (run_watcher.py). Started
        # first, it gets ready while this process reaches the kernel; the run waits for it.
        watcher = RunWatcher.start(manager.settings.state_path, sandbox_id)
        try:
            request = _request(_standard_input() if code == FROM_STDIN else code, self.timeout)
            self._code_sent = True
            result = await run_code(
                manager, owner, sandbox_id, request, output=_print_output, observer=watcher
            )
        except BrokenPipeError:
            # What reads this process's output stopped: the failed write ended the run, which
            # interrupts the code; this process ends quietly, as a program killed by SIGPIPE.
            return reader_left()
        finally:
            watcher.release()  # the run ended, or this process interrupted it itself
        return self._report(sandbox_id, result)

    def _report(self, sandbox_id: str, result: CodeResult) -> int:
        """Say on stderr how a run that did not succeed ended; its exit status."""
        if result.still_running:  # its error is the core's TimeoutError, said here for a CLI
            print(
                f"error: the code ran past its {self.timeout:g}s and did not stop when "
                "interrupted: it still runs, and later runs wait for it ('jupyter sandbox "
                f"restart {sandbox_id}' gives the sandbox a fresh interpreter)",
                file=sys.stderr,
            )
            return TIMED_OUT
        if result.error is not None:  # the timeout's KeyboardInterrupt too: it shows where
            _write(sys.stderr, _traceback(result.error))
        if result.timed_out:
            print(
                f"error: the code ran past its {self.timeout:g}s and was interrupted (--timeout "
                "gives it longer)",
                file=sys.stderr,
            )
            return TIMED_OUT
        if result.status == "ok":
            return 0
        if result.error is None:  # "aborted": the kernel dropped the request without running it
            print(f"error: the sandbox's interpreter answered {result.status!r}", file=sys.stderr)
        return 1


def _request(code: str, timeout: float) -> CodeRequest:
    """The run's request, the code checked here so that the messages speak of the CLI."""
    if not code.strip():
        raise InvalidRequestError(
            "no code to run: give it as an argument (jupyter sandbox run SANDBOX_ID 'print(1)') "
            "or pipe it in (jupyter sandbox run SANDBOX_ID < script.py)"
        )
    if len(code) > MAX_CODE:
        raise InvalidRequestError(
            f"the code may hold at most {MAX_CODE // 1024**2} Mi characters: copy a larger "
            "program into the sandbox with 'jupyter sandbox files put SANDBOX_ID script.py "
            "script.py' and run it with jupyter sandbox run SANDBOX_ID '%run script.py'"
        )
    return CodeRequest.from_json({"code": code, "timeout": timeout, "stream": True})


def _standard_input() -> str:
    """The code piped in, to its end (from a terminal, until Ctrl-D): UTF-8, as Python reads
    a source file, whatever this process's locale."""
    if sys.stdin is None:  # closed
        return ""
    # Four bytes a character at most: one byte past that is more code than a run takes.
    data = sys.stdin.buffer.read(4 * MAX_CODE + 1)
    try:
        return data.decode("utf-8-sig")  # a BOM, as an editor may write one, is not code
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(
            f"the code on standard input is not UTF-8 text ({exc.reason} at byte {exc.start}): "
            "save it as UTF-8, as Python source files are"
        ) from None


def _print_output(name: str, data: dict[str, Any]) -> None:
    """One output of the code, written as it comes (run_code's callback, on the event loop)."""
    if name in ("stdout", "stderr"):
        _write(sys.stdout if name == "stdout" else sys.stderr, data["text"])
    elif name == "display":
        bundle: dict[str, Any] = data["data"]
        text = bundle.get("text/plain")
        if isinstance(text, str):
            _write(sys.stdout, text if text.endswith("\n") else text + "\n")
        elif bundle:
            _write(sys.stderr, _not_shown(bundle))
    # "clear": lines already printed stay; the next output simply follows them.


def _not_shown(bundle: dict[str, Any]) -> str:
    """The note for a display with no text form: its types and sizes, e.g. "[image/png
    output not shown: 5120 bytes]", so that a reader knows something was there."""
    (first, *others) = [(mime, _bytes_of(mime, value)) for mime, value in bundle.items()]
    also = "".join(f"; {mime}: {size} bytes" for mime, size in others)
    return f"[{first[0]} output not shown: {first[1]} bytes{also}]\n"


def _bytes_of(mime: str, value: Any) -> int:
    """The size of one representation: JSON types are objects, binary types (images but
    SVG, PDF...) base64 text as the protocol carries them, the rest text."""
    if not isinstance(value, str):
        return len(json.dumps(value).encode())
    textual = mime.startswith("text/") or mime.endswith(("+xml", "+json", "javascript"))
    if not textual:
        try:
            return len(base64.b64decode(value, validate=False))
        except (binascii.Error, ValueError):  # not base64 after all: its text's size
            pass
    return len(value.encode())


def _traceback(error: dict[str, Any]) -> str:
    """An exception as IPython formats it (colours already removed by the core), or its name
    and message when the kernel sent no traceback."""
    lines = error.get("traceback") or [f"{error.get('ename')}: {error.get('evalue')}"]
    return "\n".join(lines).rstrip("\n") + "\n"


def _write(out: Any, text: str) -> None:
    # As bytes, flushed at once: the output appears as the code writes it, in order between
    # stdout and stderr, and text the locale cannot encode is still printed (as UTF-8).
    out.buffer.write(text.encode("utf-8", "replace"))
    out.buffer.flush()

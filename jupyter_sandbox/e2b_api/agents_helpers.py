"""The OpenAI Agents SDK's helper scripts, run through ``/bin/sh`` because /tmp is noexec.

The SDK (``agents.sandbox.session.runtime_helpers``) installs small shell scripts at
``/tmp/openai-agents/bin/NAME-<12 hex digits>`` and runs them by path, through E2B's
``commands.run``: ``/bin/bash -l -c "/tmp/openai-agents/bin/NAME-HASH ARG..."``, each argument
quoted as Python's ``shlex.join`` quotes it. A sandbox's /tmp is mounted noexec (the security
checklist requires it, and it stays so), so the kernel refuses to run the script and every
file operation of the SDK would fail.

This module recognises exactly that command, by a strict pattern over the whole of it, and
has ``/bin/sh`` read the script instead: ``/bin/bash -l -c "/bin/sh /tmp/openai-agents/bin/...
ARG..."``. Nothing else is rewritten: a command with anything more (a ``;``, a pipe, an
expansion, a redirection, another directory, ``..``) does not match and runs as it was sent.
The rewritten command runs as every command does, as the sandbox's own unprivileged user under
its limits; reading a file with ``sh`` is something that user could always do itself, so the
rewrite gives nothing a sandbox's code did not have (docs/how-to/openai-agents.md).
"""

from __future__ import annotations

import re

from jupyter_sandbox.sandbox.programs import image_programs

HELPER_DIR = "/tmp/openai-agents/bin"
# One word as shlex.quote writes it: safe characters bare, else single-quoted pieces, an
# embedded single quote written as "'" between them. Inside single quotes nothing expands.
_WORD = r"""(?:[A-Za-z0-9_@%+=:,./-]|'[^']*'|"'")+"""
_HELPER = rf"{re.escape(HELPER_DIR)}/[a-z0-9][a-z0-9-]{{0,63}}-[0-9a-f]{{12}}"
HELPER_COMMAND = re.compile(rf"{_HELPER}(?: {_WORD})*")
MAX_COMMAND = 64 * 1024  # characters of a command looked at (the SDK's are a few hundred)


def rewritten(argv: list[str]) -> list[str]:
    """``argv`` with the SDK's helper-script command run through ``/bin/sh``; any other
    ``argv`` as it is."""
    if (
        len(argv) == 4
        and argv[:3] == [image_programs.BASH, "-l", "-c"]
        and len(argv[3]) <= MAX_COMMAND
        and HELPER_COMMAND.fullmatch(argv[3])
    ):
        return [*argv[:3], f"{image_programs.SHELL} {argv[3]}"]
    return argv

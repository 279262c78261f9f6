"""The host's reading of what the files program in a sandbox reports (sandbox/operations/files.py): its
JSON report on standard output, and its error report on standard error.

Both are the sandbox's to write (its code can replace the program). A report that is not a
JSON object is SandboxFileError, the expected outcome; an error report always becomes a
SandboxFileError of a bounded message, whatever it holds. Anything else escaping is a bug
(it would be a 500 instead of the files API's answer).
"""

from __future__ import annotations

from jupyter_sandbox.protocol.errors import SandboxFileError
from jupyter_sandbox.sandbox.operations.file_checks import reported_error
from jupyter_sandbox.sandbox.operations.files import _decoded

SANDBOX_ID = "0123456789ab"


def fuzz_one_input(data: bytes) -> None:
    try:
        report = _decoded(data, SANDBOX_ID)
    except SandboxFileError:
        pass
    else:
        assert isinstance(report, dict), report
    error = reported_error(data, SANDBOX_ID)
    assert isinstance(error, SandboxFileError), error
    assert len(error.message) <= 1100, len(error.message)

"""The error hierarchy's contract beyond its classes: every error survives pickling whole (a
worker process, a multiprocessing pool or a test runner's report sends it across), and a
class's fields (UnsafeArchiveError's member and rule) are in its JSON answer, for the REST
client to set them back."""

from __future__ import annotations

import pickle

import pytest

from jupyter_sandbox.protocol import errors as core
from jupyter_sandbox.protocol import snapshot_errors as snapshot_errors

CLASSES = {
    name: value
    for module in (core, snapshot_errors)
    for name, value in vars(module).items()
    if isinstance(value, type) and issubclass(value, core.SandboxError)
}


def made(cls: type[core.SandboxError]) -> core.SandboxError:
    """An error of ``cls`` as the core raises it: through its own constructor."""
    if issubclass(cls, snapshot_errors.UnsafeArchiveError):
        return cls("workspace/../x", "parent-traversal", "contains '..'")
    return cls("what happened, and what to do")


def state(error: BaseException) -> tuple[object, ...]:
    fields = {name: getattr(error, name) for name in getattr(error, "fields", ())}
    return (
        type(error),
        error.args,
        str(error),
        vars(error),
        fields,
        getattr(error, "code", None),
        getattr(error, "http_status", None),
    )


@pytest.mark.parametrize("cls", CLASSES.values(), ids=CLASSES)
def test_every_error_pickles_with_all_its_fields(cls: type[core.SandboxError]) -> None:
    error = made(cls)
    error.http_status = 599  # set on the instance, as the REST client does
    error.add_note("a note added on the way up")
    copy = pickle.loads(pickle.dumps(error))
    assert state(copy) == state(error)
    assert copy.to_dict() == error.to_dict()
    assert copy.__notes__ == ["a note added on the way up"]


def test_a_refused_archive_answers_with_its_member_and_rule() -> None:
    error = snapshot_errors.ArchiveTooLargeError("big.bin", "max-bytes", "exceeds the cap")
    assert error.to_dict() == {
        "code": "archive_too_large",
        "message": "archive refused: member 'big.bin': exceeds the cap (rule: max-bytes)",
        "member": "big.bin",
        "rule": "max-bytes",
    }
    assert core.SandboxNotFoundError("gone").to_dict() == {
        "code": "sandbox_not_found",
        "message": "gone",
    }


def test_from_message_keeps_the_message_whatever_the_constructor_takes() -> None:
    message = "archive refused: the archive: not a readable tar archive (rule: not-a-tar)"
    error = snapshot_errors.UnsafeArchiveError.from_message(message)
    assert type(error) is snapshot_errors.UnsafeArchiveError
    assert (error.message, str(error), error.args) == (message, message, (message,))

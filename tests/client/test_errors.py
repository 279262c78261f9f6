"""The server's error answers as the core's classes: the mapping is built from the classes'
own codes, every class of protocol/errors.py and protocol/snapshot_errors.py is exported by name, an unknown code keeps its
code, and answers that are not the API's (Jupyter's 403, a proxy's page) say what to check."""

from __future__ import annotations

import pickle

import pytest

import jupyter_sandbox.client as client
from jupyter_sandbox.client import errors
from jupyter_sandbox.protocol import errors as core
from jupyter_sandbox.protocol import snapshot_errors as snapshot_errors

CORE_CLASSES = errors.error_classes()


def test_every_core_class_is_exported_under_its_name() -> None:
    assert set(errors.__all__) - {"SandboxConnectionError"} == set(CORE_CLASSES), (
        "errors.py's classes changed: list them in jupyter_sandbox/client/errors.py "
        "(its imports and __all__; the package exports that list)"
    )
    for name, cls in CORE_CLASSES.items():
        # This process imported the core first: the very classes the core raises.
        assert getattr(errors, name) is cls


def test_the_package_exports_every_error_class_of_errors_py() -> None:
    assert set(errors.__all__) <= set(client.__all__)
    for name in errors.__all__:
        assert getattr(client, name) is getattr(errors, name)
    namespace: dict[str, object] = {}
    exec("from jupyter_sandbox.client import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(client.__all__)


@pytest.mark.parametrize("cls", CORE_CLASSES.values(), ids=CORE_CLASSES)
def test_each_code_is_raised_as_its_class_with_the_servers_message(
    cls: type[core.SandboxError],
) -> None:
    answer = {"code": cls.code, "message": "what happened, and what to do"}
    error = errors.error_from_answer(cls.http_status, answer, "GET http://server/api/sandboxes")
    assert type(error) is cls
    assert (error.code, error.message, str(error)) == (
        cls.code,
        answer["message"],
        answer["message"],
    )
    assert error.http_status == cls.http_status


def test_codes_are_unique() -> None:
    codes = [cls.code for cls in CORE_CLASSES.values()]
    assert sorted(codes) == sorted(set(codes))
    assert len(errors.ERRORS_BY_CODE) == len(CORE_CLASSES)


def test_an_unknown_code_is_a_sandbox_error_that_keeps_it() -> None:
    answer = {"code": "not_a_code_yet", "message": "a newer server's error"}
    error = errors.error_from_answer(404, answer, "POST http://server/api/sandboxes")
    assert type(error) is core.SandboxError
    assert (error.code, error.message, error.http_status) == (
        "not_a_code_yet",
        answer["message"],
        404,
    )
    copy = pickle.loads(pickle.dumps(error))  # e.g. from a worker process
    assert (type(copy), copy.code, copy.message) == (core.SandboxError, error.code, error.message)


def test_an_error_event_keeps_its_class_status() -> None:
    answer = {"code": "sandbox_died", "message": "the sandbox stopped during the run"}
    error = errors.error_from_answer(None, answer, "the run in sandbox 0123456789ab")
    assert type(error) is core.SandboxDiedError
    assert error.http_status == core.SandboxDiedError.http_status


def test_answers_not_from_the_api_name_the_request_and_what_to_check() -> None:
    request = "GET http://server/api/sandboxes"
    refused = errors.error_from_answer(403, {"message": "Forbidden", "reason": None}, request)
    assert type(refused) is core.SandboxError
    assert refused.message.startswith(f"{request} was refused (403: Forbidden): check the token")
    missing = errors.error_from_answer(404, "<html><body>Not Found</body></html>", request)
    assert "check the URL" in missing.message
    assert "jupyter_sandbox extension" in missing.message
    bad_gateway = errors.error_from_answer(502, "<html>\n  Bad   gateway\n</html>", request)
    assert bad_gateway.message == f"{request} answered 502: <html> Bad gateway </html>"
    assert bad_gateway.http_status == 502


def test_a_connection_error_is_both_a_sandbox_error_and_a_connection_error() -> None:
    error = errors.SandboxConnectionError("could not talk to http://server/")
    assert isinstance(error, core.SandboxError)
    assert isinstance(error, ConnectionError)
    assert (error.code, str(error)) == ("connection_failed", "could not talk to http://server/")


def test_a_refused_archive_carries_the_member_and_rule_of_the_answer() -> None:
    refused = snapshot_errors.UnsafeArchiveError("a/../../x", "parent-traversal", "has '..'")
    error = errors.error_from_answer(400, refused.to_dict(), "POST http://server/api/snapshots")
    assert type(error) is snapshot_errors.UnsafeArchiveError
    assert (error.member, error.rule, error.message) == (
        "a/../../x",
        "parent-traversal",
        refused.message,
    )
    # A server that sent no fields: the attributes are there, empty.
    answer = {"code": "archive_too_large", "message": "archive refused: too large"}
    older = errors.error_from_answer(413, answer, "POST http://server/api/snapshots")
    assert type(older) is snapshot_errors.ArchiveTooLargeError
    assert (older.member, older.rule) == ("", "")


def exported_error(name: str) -> core.SandboxError:
    """An error of the exported class ``name`` as the client makes it: from a server's answer
    (with a refused archive's fields), or, for the client's own class, by its constructor."""
    cls = getattr(client, name)
    if cls is errors.SandboxConnectionError:
        return cls("could not reach http://server/")
    answer = {"code": cls.code, "message": "what happened", "member": "m.txt", "rule": "fifo"}
    return errors.error_from_answer(418, answer, "GET http://server/api/sandboxes")


@pytest.mark.parametrize("name", errors.__all__)
def test_every_exported_error_pickles_with_all_its_fields(name: str) -> None:
    error = exported_error(name)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.args, vars(copy)) == (type(error), error.args, vars(error))
    assert (copy.code, copy.message, copy.http_status) == (
        error.code,
        error.message,
        error.http_status,
    )
    assert copy.to_dict() == error.to_dict()
    if isinstance(error, snapshot_errors.UnsafeArchiveError):
        assert (copy.member, copy.rule) == ("m.txt", "fifo")

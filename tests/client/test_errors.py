"""The server's error answers as the core's classes: the mapping is built from the classes'
own codes, every class of sandbox/errors.py and sandbox/snapshots/errors.py is exported by name, an unknown code keeps its
code, and answers that are not the API's (Jupyter's 403, a proxy's page) say what to check."""

from __future__ import annotations

import pickle

import pytest

import jupyter_sandbox.client as client
from jupyter_sandbox.client import errors
from jupyter_sandbox.sandbox import errors as core

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

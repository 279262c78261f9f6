"""A tool call's arguments checked against the tool's schema (jupyter_sandbox/mcp_server/
arguments.py): every schema is valid JSON Schema, good arguments pass as they are, and each
kind of bad one is an InvalidRequestError that names it and does not echo it."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from jupyter_sandbox.mcp_server.arguments import check_arguments
from jupyter_sandbox.mcp_server.tools import TOOLS, TOOLS_BY_NAME
from jupyter_sandbox.protocol.errors import InvalidRequestError

ID = "0123456789ab"


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool.name)
def test_every_schema_is_valid_and_closed(tool: Any) -> None:
    Draft202012Validator.check_schema(tool.schema)
    assert tool.schema["additionalProperties"] is False
    for name, schema in tool.schema["properties"].items():
        assert schema.get("description"), (tool.name, name)
        if schema["type"] == "string" and name != "runtime":
            assert "maxLength" in schema or "pattern" in schema, (tool.name, name)


def test_good_arguments_pass_as_they_are() -> None:
    arguments = {"sandbox_id": ID, "code": "x = 1", "timeout": 10}
    assert check_arguments(TOOLS_BY_NAME["run_code"], arguments) is arguments
    assert check_arguments(TOOLS_BY_NAME["sandbox_list"], None) == {}


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        (
            "run_code",
            {"code": "1"},
            "run_code: the argument sandbox_id is missing; it takes code, sandbox_id, timeout",
        ),
        (
            "run_code",
            {"sandbox_id": "xyz", "code": "1"},
            "is not a sandbox id (12 hexadecimal digits",
        ),
        ("run_code", {"sandbox_id": ID, "code": ""}, "the argument code is empty"),
        ("run_code", {"sandbox_id": ID, "code": "1", "timeout": 0}, "is 0; it must be above 0"),
        (
            "file_write",
            {"sandbox_id": ID, "path": "a", "content": 5},
            "must be a string, not a number",
        ),
        ("sandbox_create", {"runtime": "kata"}, "the argument runtime must be one of runsc, runc"),
        (
            "sandbox_create",
            {"metadata": {"bad key": "v"}},
            "the argument metadata has a character or form",
        ),
        (
            "sandbox_list",
            {"metadata": {"k": "v" * 257}},
            "metadata.k holds 257 characters, more than the 256 allowed",
        ),
        ("file_list", {"sandbox_id": ID, "pth": "x" * 10_000}, "it takes no argument pth"),
    ],
)
def test_bad_arguments_are_named_not_echoed(
    tool: str, arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        check_arguments(TOOLS_BY_NAME[tool], arguments)
    assert message in refused.value.message
    assert len(refused.value.message) < 500

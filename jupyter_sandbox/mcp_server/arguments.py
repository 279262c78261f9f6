"""A tool call's arguments checked against the tool's own JSON Schema (the one tools/list gives
the host), before anything reaches the server: the schema a model reads is the one enforced.

server.py calls :func:`check_arguments` for every call. What fails is an InvalidRequestError
whose message names the argument, the bound it broke and what to do, composed here rather
than taken from jsonschema, whose messages quote the value: a 10 MB argument would come back
whole in its own error. The arguments come from a model through its host, so they are
hostile: nothing here echoes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from jupyter_sandbox.mcp_server.tools import SandboxTool
from jupyter_sandbox.protocol.errors import InvalidRequestError

JSON_TYPES = {
    bool: "a boolean",
    int: "a number",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
    type(None): "null",
}
_ODD_CHARACTER = (
    "has a character or form it may not have (no NUL; labels' names: letters, digits, . _ / -)"
)
# What an argument past each bound is, in words, from (where, value, bound): the value's size
# or a number, never the value itself.
_PROBLEMS: dict[str, Callable[[str, Any, Any], str]] = {
    "maxLength": lambda where, value, bound: (
        f"{where} holds {len(value)} characters, more than the {bound} allowed"
    ),
    "minLength": lambda where, value, bound: f"{where} is empty",
    "maxProperties": lambda where, value, bound: (
        f"{where} holds {len(value)} entries, more than the {bound} allowed"
    ),
    "maximum": lambda where, value, bound: f"{where} is {value}, more than the {bound} allowed",
    "exclusiveMinimum": lambda where, value, bound: f"{where} is {value}; it must be above {bound}",
    "enum": lambda where, value, bound: f"{where} must be one of {', '.join(map(str, bound))}",
    "pattern": lambda where, value, bound: f"{where} {_ODD_CHARACTER}",
    "propertyNames": lambda where, value, bound: f"{where} {_ODD_CHARACTER}",
}
# Each tool's validator, made once: the schemas are the module's constants.
_validators: dict[str, Draft202012Validator] = {}


def check_arguments(tool: SandboxTool, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """``arguments`` (none: an empty object) when they are what ``tool``'s schema takes;
    InvalidRequestError saying what is wrong with the first one that is not."""
    given = {} if arguments is None else arguments
    validator = _validators.get(tool.name)
    if validator is None:
        Draft202012Validator.check_schema(tool.schema)
        validator = _validators.setdefault(tool.name, Draft202012Validator(tool.schema))
    errors: Iterable[ValidationError] = validator.iter_errors(given)
    error = best_match(errors)
    if error is None:
        return given
    raise InvalidRequestError(f"{tool.name}: {_explained(tool, error)}")


def _explained(tool: SandboxTool, error: ValidationError) -> str:
    """What is wrong, in words, with the argument ``error`` is about, and the schema's own
    description of that argument (which states its bounds and what to do instead)."""
    where = "the argument " + ".".join(str(part) for part in error.absolute_path)
    value, bound, kind = error.instance, error.validator_value, error.validator
    taken = sorted(tool.schema["properties"])
    if kind == "required":
        missing = [name for name in bound if name not in value]
        return f"the argument {missing[0]} is missing; it takes {', '.join(taken)}"
    if kind == "additionalProperties":
        unknown = sorted(name for name in value if name not in tool.schema["properties"])
        named = ", ".join(name[:64] for name in unknown[:5])
        return f"it takes no argument {named}; it takes {', '.join(taken)}"
    if kind == "type":
        what = JSON_TYPES.get(type(value), "something else")
        return f"{where} must be {_type_words(bound)}, not {what}"
    if kind == "pattern" and error.schema is tool.schema["properties"].get("sandbox_id"):
        return (
            f"{where} is not a sandbox id (12 hexadecimal digits, as sandbox_create and "
            "sandbox_list give them): call sandbox_list to see your sandboxes' ids"
        )
    words = _PROBLEMS.get(kind)
    if words is None:
        problem = f"{where} breaks the schema's {kind!r} rule"
    else:
        problem = words(where, value, bound)
    description = _description(tool, error)
    return f"{problem}. {description}" if description else problem


def _type_words(bound: Any) -> str:
    names = [bound] if isinstance(bound, str) else list(bound)
    return " or ".join(f"a {name}" if name != "object" else "an object" for name in names)


def _description(tool: SandboxTool, error: ValidationError) -> str:
    """The description of the argument the error is about: its own schema's, else that of
    the top-level argument it lies in."""
    own = error.schema.get("description") if isinstance(error.schema, dict) else None
    if isinstance(own, str):
        return own
    path = list(error.absolute_path)
    if path:
        top = tool.schema["properties"].get(str(path[0]), {})
        text = top.get("description")
        if isinstance(text, str):
            return text
    return ""

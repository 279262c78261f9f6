"""Request bodies of the REST API, checked field by field before anything is started.

Every refusal is an InvalidRequestError or InvalidSettingError (HTTP 400) whose message names
the field and says what it takes, so a client can fix its request without reading the code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.protocol.requests import (
    ENVIRONMENT,
    METADATA,
    METADATA_KEY,
    json_object,
    seconds_of,
    string_map,
)
from jupyter_sandbox.sandbox.lifecycle.contexts import check_context
from jupyter_sandbox.sandbox.network import NetworkPolicy
from jupyter_sandbox.sandbox.settings import RUNTIMES
from jupyter_sandbox.sandbox.use_cases import NewSandbox

LIMIT_TYPES: dict[str, tuple[type, ...]] = {
    "memory": (str, int),
    "cpus": (int, float),
    "pids": (int,),
    "nofile": (int,),
    "tmp_size": (str, int),
    "workspace_size": (str, int),
}
# A sandbox's own timeout: beyond a year is "never", which is no timeout at all.
MAX_TIMEOUT = 366 * 86400.0


@dataclass(frozen=True)
class CreateRequest(NewSandbox):
    """``POST /api/sandboxes``: every field optional; the server's settings fill the rest.
    Its fields are the use case's (sandbox/use_cases.py, NewSandbox), parsed from the body."""

    @classmethod
    def parse(cls, body: bytes) -> CreateRequest:
        data = json_object(body, allow_empty=True)
        known = {
            "runtime",
            "image",
            "limits",
            "context",
            "environment",
            "network",
            "snapshot",
            "timeout",
            "metadata",
        }
        _no_unknown(data, known, "a sandbox")
        runtime = _optional_str(data, "runtime")
        if runtime is not None and runtime not in RUNTIMES:
            raise InvalidRequestError(
                f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}"
            )
        context = _optional_str(data, "context")
        if context is not None:
            check_context(context)
        return cls(
            runtime=runtime,
            image=_optional_str(data, "image"),
            limits=_limits(data.get("limits", {})),
            context=context,
            environment=string_map(data.get("environment", {}), "environment", ENVIRONMENT),
            network=None
            if data.get("network") is None
            else NetworkPolicy.from_dict(data["network"]),
            snapshot=_optional_str(data, "snapshot"),
            timeout=None if data.get("timeout") is None else timeout_seconds(data["timeout"]),
            metadata=string_map(data.get("metadata", {}), "metadata", METADATA),
        )


def timeout_request(body: bytes) -> float:
    """``PUT /api/sandboxes/{id}/timeout``: the seconds from now the sandbox may live."""
    data = json_object(body)
    _no_unknown(data, {"timeout"}, "a timeout")
    if "timeout" not in data:
        raise InvalidRequestError('the body needs timeout, in seconds from now: {"timeout": 600}')
    return timeout_seconds(data["timeout"])


def timeout_seconds(value: Any) -> float:
    """A sandbox's ``timeout``: seconds in (0, MAX_TIMEOUT]; else an error saying so."""
    return seconds_of(
        value,
        MAX_TIMEOUT,
        bound=" (366 days)",
        advice="; leave it out for the server's time to live alone",
    )


def metadata_filter(values: list[str]) -> dict[str, str]:
    """``GET /api/sandboxes?metadata=KEY=VALUE`` (repeatable): the entries a sandbox must have."""
    wanted = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not METADATA_KEY.fullmatch(key):
            raise InvalidRequestError(
                f"metadata filter {value!r} must be KEY=VALUE, e.g. ?metadata=agent=planner "
                "(repeat it to ask for several entries at once)"
            )
        wanted[key] = text
    return wanted


def _no_unknown(data: dict[str, Any], known: set[str], what: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise InvalidRequestError(
            f"unknown field(s) {', '.join(map(repr, unknown))} for {what}; "
            f"known fields: {', '.join(sorted(known))}"
        )


def _optional_str(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidRequestError(f"{name} must be a string, not {_json_type(value)}")
    return value


def _limits(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequestError(
            f'limits must be an object such as {{"memory": "1g"}}, not {_json_type(value)}'
        )
    _no_unknown(value, set(LIMIT_TYPES), "limits")
    limits = {}
    for name, limit in value.items():
        # JSON has one number type: 16.0 is the integer 16 (as JSON Schema's integer has it).
        if isinstance(limit, float) and limit.is_integer() and int in LIMIT_TYPES[name]:
            limit = int(limit)
        if isinstance(limit, bool) or not isinstance(limit, LIMIT_TYPES[name]):
            wanted = " or ".join(_type_name(t) for t in LIMIT_TYPES[name])
            raise InvalidRequestError(f"limits.{name} must be {wanted}, not {_json_type(limit)}")
        limits[name] = limit
    return limits


def _type_name(kind: type) -> str:
    return {str: "a string", int: "an integer", float: "a number"}[kind]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {
        str: "a string",
        int: "an integer",
        float: "a number",
        list: "an array",
        dict: "an object",
    }.get(type(value), type(value).__name__)

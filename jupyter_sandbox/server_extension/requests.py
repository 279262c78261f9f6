"""Request bodies of the REST API, checked field by field before anything is started.

Every refusal is an InvalidRequestError or InvalidSettingError (HTTP 400) whose message names
the field and says what it takes, so a client can fix its request without reading the code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..sandbox.contexts import check_context
from ..sandbox.errors import InvalidRequestError
from ..sandbox.network import NetworkPolicy
from ..sandbox.settings import RUNTIMES

LIMIT_TYPES: dict[str, tuple[type, ...]] = {
    "memory": (str, int),
    "cpus": (int, float),
    "pids": (int,),
    "nofile": (int,),
    "tmp_size": (str, int),
    "workspace_size": (str, int),
}


@dataclass(frozen=True)
class CreateRequest:
    """``POST /api/sandboxes``: every field optional; the server's settings fill the rest."""

    runtime: str | None = None
    image: str | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    context: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    network: NetworkPolicy | None = None  # None: NetworkSettings.default_policy
    snapshot: str | None = None  # restore this snapshot into the new sandbox's /workspace

    @classmethod
    def parse(cls, body: bytes) -> CreateRequest:
        data = json_object(body, allow_empty=True)
        known = {"runtime", "image", "limits", "context", "environment", "network", "snapshot"}
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
            environment=_environment(data.get("environment", {})),
            network=None
            if data.get("network") is None
            else NetworkPolicy.from_dict(data["network"]),
            snapshot=_optional_str(data, "snapshot"),
        )


def json_object(body: bytes, *, allow_empty: bool = False) -> dict[str, Any]:
    """The body as a JSON object, or a 400 that says what is wrong with it."""
    if not body.strip() and allow_empty:
        return {}
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequestError(
            f"the request body must be a JSON object, not {type(data).__name__}"
        )
    return data


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
    for name, limit in value.items():
        if isinstance(limit, bool) or not isinstance(limit, LIMIT_TYPES[name]):
            wanted = " or ".join(_type_name(t) for t in LIMIT_TYPES[name])
            raise InvalidRequestError(f"limits.{name} must be {wanted}, not {_json_type(limit)}")
    return dict(value)


def _environment(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidRequestError(
            'environment must be an object of string values, e.g. {"MY_SETTING": "1"}'
        )
    return dict(value)


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

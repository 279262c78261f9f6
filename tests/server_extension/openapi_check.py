"""Check API responses against openapi.yaml: the file is the contract, not a description."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from openapi_schema_validator import OAS30Validator

from jupyter_sandbox.server_extension import handlers

SPEC_FILE = Path(handlers.__file__).with_name("openapi.yaml")


@cache
def spec() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SPEC_FILE.read_text())
    return data


def resolve(node: Any) -> Any:
    """``node`` with every local $ref replaced by what it points at."""
    if isinstance(node, dict):
        if "$ref" in node:
            target: Any = spec()
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            return resolve(target)
        return {key: resolve(value) for key, value in node.items()}
    if isinstance(node, list):
        return [resolve(item) for item in node]
    return node


def operation(path: str, method: str) -> dict[str, Any]:
    """The spec's operation for a concrete API path such as /api/sandboxes/0123456789ab/stats."""
    for template, item in spec()["paths"].items():
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "/?$"
        if re.match(pattern, path) and method.lower() in item:
            return dict(resolve(item[method.lower()]))
    raise AssertionError(f"{method} {path} is not in openapi.yaml")


def check_response(path: str, method: str, status: int, body: Any) -> None:
    """Fail unless openapi.yaml documents ``status`` for this call and ``body`` fits it."""
    responses = operation(path, method)["responses"]
    assert str(status) in responses, f"{method} {path} answered {status}, not in openapi.yaml"
    content = responses[str(status)].get("content")
    if content is None:
        assert body is None, f"{method} {path} {status} has a body openapi.yaml does not describe"
        return
    OAS30Validator(content["application/json"]["schema"]).validate(body)

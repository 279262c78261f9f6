"""Check API responses against openapi.yaml: the file is the contract, not a description.

A text/event-stream response (Server-Sent Events) is checked event by event: its media type
lists the events it may send under ``x-events``, each with the schema of its JSON data, and
``final: true`` on those that end the stream (exactly one, last).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from openapi_schema_validator import OAS31Validator

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


EVENT_STREAM = "text/event-stream"


def check_response(
    path: str, method: str, status: int, body: Any, content_type: str = "application/json"
) -> None:
    """Fail unless openapi.yaml documents ``status`` for this call and ``body`` fits it:
    decoded JSON, or for ``text/event-stream`` the (name, data) pairs of ``parse_events``."""
    responses = operation(path, method)["responses"]
    assert str(status) in responses, f"{method} {path} answered {status}, not in openapi.yaml"
    content = responses[str(status)].get("content")
    if content is None:
        assert body is None, f"{method} {path} {status} has a body openapi.yaml does not describe"
        return
    assert content_type in content, f"{method} {path} {status} answered {content_type}"
    if content_type != EVENT_STREAM:
        OAS31Validator(content[content_type]["schema"]).validate(body)
        return
    documented = content[content_type]["x-events"]
    assert body, f"{method} {path} {status} sent no event"
    for index, (name, data) in enumerate(body):
        assert name in documented, f"{method} {path} sent event {name!r}, not in openapi.yaml"
        final = bool(documented[name].get("final"))
        assert final == (index == len(body) - 1), f"{name!r} at {index} of {len(body)} events"
        OAS31Validator(documented[name]["schema"]).validate(data)


def parse_events(text: str) -> list[tuple[str, Any]]:
    """The events of a Server-Sent Events body: (name, decoded JSON data) each. Every event
    must have a name and exactly one data line (this API's events do; the format allows more)."""
    events = []
    for block in text.split("\n\n"):
        if not block:
            continue
        fields = [line.partition(": ") for line in block.split("\n")]
        assert [(key, sep) for key, sep, _ in fields] == [("event", ": "), ("data", ": ")], block
        events.append((fields[0][2], json.loads(fields[1][2])))
    return events

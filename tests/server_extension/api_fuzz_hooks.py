"""schemathesis hooks of test_api_fuzz.py (loaded by the schemathesis process it runs, through
its config's ``hooks``; schemathesis is not imported by the suite itself).

* An archive body (``application/x-tar``, POST /api/snapshots) is sent as the bytes generated,
  as for ``application/octet-stream``: schemathesis has no serializer of its own for it.
* The sandbox, command and snapshot the run's ids are pinned to (JUPYTER_SANDBOX_FUZZ_PINNED,
  a JSON object of parameter name to id) are never deleted by a generated request, nor is the
  sandbox given a timeout (which may remove it: the timed sandbox gets those): a DELETE
  naming one is sent with an id of the same form that names nothing (a 404), so that every
  other operation keeps reaching real things for the whole run. Deletion itself is still
  fuzzed, on what the run creates (its stateful phase) and on the sandbox pinned for it.
"""

from __future__ import annotations

import json
import os
from typing import Any

import schemathesis
from schemathesis.generation.meta import negated_parameters

schemathesis.serializer.alias("application/x-tar", "application/octet-stream")

PINNED: dict[str, str] = json.loads(os.environ.get("JUPYTER_SANDBOX_FUZZ_PINNED", "{}"))
# What a DELETE of a pinned id becomes: the same length and alphabet, never an id in use.
NOBODY = {name: "f" * len(value) for name, value in PINNED.items()}
TIMEOUT = "/api/sandboxes/{sandbox_id}/timeout"


@schemathesis.hook
def before_call(context: Any, case: Any, **kwargs: Any) -> None:
    if not case.path_parameters:
        return
    # A negative case that mutated a pinned parameter was sent with the pin instead (the
    # config's parameters win): send a value outside its pattern, as the case says it did,
    # else a valid request answered 200 reads as invalid data accepted (seen once in 3,206).
    for name, _ in negated_parameters(getattr(case, "_meta", None)):
        if name in PINNED and case.path_parameters.get(name) == PINNED[name]:
            case.path_parameters[name] = "not-an-id"
    # A short timeout has the culler remove its sandbox: the pinned one's is the timed one's.
    if case.path == TIMEOUT and case.path_parameters.get("sandbox_id") == PINNED["sandbox_id"]:
        case.path_parameters["sandbox_id"] = PINNED["timed_sandbox_id"]
    if case.method.upper() != "DELETE":
        return
    # The last parameter of the path is what a DELETE removes (/commands/{command_id}...).
    name = case.path.rstrip("/").rsplit("/", 1)[-1].strip("{}")
    if name in PINNED and case.path_parameters.get(name) == PINNED[name]:
        case.path_parameters[name] = NOBODY[name]

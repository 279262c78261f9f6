"""The control plane, ``{base_url}api/e2b`` (``E2B_API_URL``): E2B's sandbox routes, both the
current ``/v2`` generation and the older one pinned SDKs call, on the same core calls as our
REST API (handlers.py): create (from the warm pool when it has a sandbox), get, list, kill,
connect (resuming a paused sandbox), pause, resume and timeout, with the same ownership,
quotas, network policy, limits and culling.

A request is authenticated by its ``X-API-KEY`` (``e2b_`` + a token this Jupyter server
accepts, keys.py), handed to the server's identity provider as a token: the owner is that
token's user, as for our REST API, and only a token counts (never a cookie), which is also why
Jupyter's XSRF check does not apply (it exempts token-authenticated requests). What returns a
sandbox's access token (create, connect, resume, get) needs the "execute" permission on
sandboxes, as running code through our REST API does.

E2B's ``autoPause`` (the OpenAI Agents SDK asks for it: ``lifecycle={"on_timeout": "pause"}``)
is honoured by the culler: such a sandbox is paused at its timeout instead of removed
(``timeout_action`` in its state, sandbox/lifecycle/culler.py), kept until the culler's ``ttl``,
and resumed by connect, or, with ``autoResume`` enabled, by its next data-plane request
(data_plane.py), each time with its timeout anew.
"""

from __future__ import annotations

import datetime
import json
from typing import Any
from urllib.parse import parse_qsl

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_sandbox.e2b_api.data_plane import e2b_state
from jupyter_sandbox.e2b_api.errors import (
    E2BAuthenticationError,
    E2BUnsupportedError,
    api_error,
    as_sandbox_error,
)
from jupyter_sandbox.e2b_api.keys import jupyter_token
from jupyter_sandbox.protocol.errors import InvalidRequestError, SandboxError
from jupyter_sandbox.protocol.requests import (
    ENVIRONMENT,
    METADATA,
    StringMapRules,
    json_object,
    string_map,
)
from jupyter_sandbox.sandbox.backends.records import SandboxInfo
from jupyter_sandbox.sandbox.use_cases import NewSandbox, create_sandbox, set_deadline
from jupyter_sandbox.server_extension.base import (
    SandboxAPIHandler,
    authorized_to_execute,
)
from jupyter_sandbox.server_extension.requests import MAX_TIMEOUT, timeout_seconds

ENVD_VERSION = "0.6.1"  # envd features the API answers as (docs/how-to/e2b.md)
DEFAULT_TEMPLATES = ("base", "code-interpreter-v1", "code-interpreter")
DEFAULT_TIMEOUT = 300  # seconds: E2B's, when a create names none
# Characters of a templateID: an image's name (Docker's references are shorter), kept in the
# sandbox's state file.
MAX_TEMPLATE = 256
NEW_SANDBOX_FIELDS = {
    "templateID",
    "timeout",
    "autoPause",
    "secure",
    "allow_internet_access",
    "metadata",
    "envVars",
    "mcp",
    "network",
    "volumeMounts",
    "autoPauseMemory",
    "autoResume",
    "iam",
    "lifecycle",
}
_ID = r"(?P<sandbox_id>[A-Za-z0-9_.-]{1,128})"


class E2BControlHandler(SandboxAPIHandler):
    """What every control-plane route shares: the key, E2B's models and its error form.

    Its bodies are small JSON objects, read whole as tornado reads them and parsed within
    MAX_JSON_BODY: refused in prepare before its body came (as JsonBodyHandler's are read), a
    request's connection would close under an SDK still writing it, which can meet a reset
    before it reads the refusal of its key."""

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        token = jupyter_token(self.request.headers.get("X-API-KEY"))
        self.request.headers["Authorization"] = f"token {token}"
        await super().prepare(*args, **kwargs)
        if self.current_user is None or not self.token_authenticated:
            raise E2BAuthenticationError(
                "the X-API-KEY header is not e2b_ followed by a token this Jupyter server "
                "accepts: set E2B_API_KEY=e2b_$JUPYTER_TOKEN"
            )

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        status, body = api_error(as_sandbox_error(exc, status_code))
        self.clear()
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def body_object(self, known: set[str], what: str) -> dict[str, Any]:
        data = json_object(self.request.body, allow_empty=True, what=what)
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidRequestError(f"unknown field(s) {', '.join(unknown)} for {what}")
        return data

    def sandbox(self, info: SandboxInfo) -> dict[str, Any]:
        """E2B's ``Sandbox``: what create and connect answer."""
        tokens, _ = e2b_state(self.settings)
        state = self.manager.read_state(info.sandbox_id)
        return {
            "templateID": state.get("e2b_template") or DEFAULT_TEMPLATES[0],
            "sandboxID": info.sandbox_id,
            "clientID": "jupyter-sandbox",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": tokens.token(self.owner, info.sandbox_id),
            "domain": None,
        }

    def listed(self, info: SandboxInfo, *, with_token: bool = False) -> dict[str, Any]:
        """E2B's ``ListedSandbox`` (``SandboxDetail`` ``with_token``)."""
        state = self.manager.read_state(info.sandbox_id)
        deadline = self.extension.culler.deadline(state)
        started = state.get("created") or info.created
        end = deadline or datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
            seconds=MAX_TIMEOUT
        )
        model = {
            "templateID": state.get("e2b_template") or DEFAULT_TEMPLATES[0],
            "sandboxID": info.sandbox_id,
            "clientID": "jupyter-sandbox",
            "startedAt": started,
            "endAt": end.isoformat(),
            "cpuCount": int(self.manager.settings.cpus or 1) or 1,
            "memoryMB": 0,
            "diskSizeMB": 0,
            "state": "paused" if info.status == "paused" else "running",
            "envdVersion": ENVD_VERSION,
            "metadata": state.get("metadata") or {},
        }
        if with_token:
            model["envdAccessToken"] = self.sandbox(info)["envdAccessToken"]
        return model

    def deadline_in(self, sandbox_id: str, timeout: Any) -> None:
        if timeout is None:
            return
        set_deadline(self.manager, sandbox_id, _seconds(timeout), self.extension.culler)


class E2BSandboxesHandler(E2BControlHandler):
    """``/sandboxes`` and ``/v2/sandboxes``: list the owner's sandboxes, create one."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        wanted = _metadata_query(self.get_query_argument("metadata", ""))
        models = []
        for info in await self.manager.list_sandboxes(self.owner):
            metadata = self.manager.read_state(info.sandbox_id).get("metadata") or {}
            if info.alive and wanted.items() <= metadata.items():
                models.append(self.listed(info))
        self.write_json(models)

    @web.authenticated
    @authorized_to_execute
    async def post(self) -> None:
        body = self.body_object(NEW_SANDBOX_FIELDS, "a new sandbox")
        _refuse_unsupported(body)
        template = body.get("templateID", DEFAULT_TEMPLATES[0])
        if not isinstance(template, str) or not 0 < len(template) <= MAX_TEMPLATE:
            raise InvalidRequestError(
                f"templateID must be a template's name of at most {MAX_TEMPLATE} characters "
                f"(an image the server allows), e.g. {DEFAULT_TEMPLATES[0]!r}"
            )
        timeout = _seconds(body.get("timeout", DEFAULT_TIMEOUT))
        # Both as our REST API's: the metadata is kept in the sandbox's state file, read on
        # every listing; the environment is in its container's, and every command's.
        metadata = _string_map(body.get("metadata"), "metadata", METADATA)
        auto_pause = _optional_flag(body.get("autoPause"), "autoPause") or False
        auto_resume = _auto_resume(body.get("autoResume"), auto_pause)
        network = {None: None, True: {"mode": "open"}, False: {"mode": "none"}}[
            _optional_flag(body.get("allow_internet_access"), "allow_internet_access")
        ]
        # E2B's own facts, kept with the sandbox from its start as its metadata and deadline are.
        record: dict[str, Any] = {"e2b_template": template, "e2b_timeout": timeout}
        if auto_pause:
            record.update(timeout_action="pause", e2b_auto_resume=auto_resume)
        request = NewSandbox(
            image=None if template in DEFAULT_TEMPLATES else template,
            environment=_string_map(body.get("envVars"), "envVars", ENVIRONMENT),
            network=network,
            timeout=timeout,
            metadata=metadata,
            purpose=self.extension.container_purpose,
            record=record,
        )
        sandbox = await create_sandbox(self.manager, self.owner, request, self.extension.culler)
        self.write_json(self.sandbox(sandbox.info), 201)


class E2BSandboxHandler(E2BControlHandler):
    """``/sandboxes/{id}``: the sandbox's detail; delete kills it."""

    @web.authenticated
    @authorized_to_execute
    async def get(self, sandbox_id: str) -> None:
        info = await self.manager.get(self.owner, sandbox_id)
        self.write_json(self.listed(info, with_token=True))

    @web.authenticated
    @authorized
    async def delete(self, sandbox_id: str) -> None:
        await self.manager.get(self.owner, sandbox_id)  # another owner's: 404
        await self.manager.remove(self.owner, sandbox_id)
        self.set_status(204)
        self.finish()


class E2BSandboxActionHandler(E2BControlHandler):
    """``/sandboxes/{id}/{connect,resume,pause,timeout}`` (and ``/v2/.../connect``)."""

    @web.authenticated
    @authorized_to_execute
    async def post(self, sandbox_id: str, action: str) -> None:
        owner = self.owner
        info = await self.manager.get(owner, sandbox_id)
        if action == "pause":
            self.body_object({"memory", "mode"}, "a pause")
            await self.manager.pause(owner, sandbox_id)
            self._done()
            return
        if action == "timeout":
            body = self.body_object({"timeout"}, "a timeout")
            if "timeout" not in body:
                raise InvalidRequestError('the body needs timeout, in seconds: {"timeout": 600}')
            self.deadline_in(sandbox_id, body["timeout"])
            self._done()
            return
        body = self.body_object({"timeout", "autoPause", "memory"}, f"a {action}")
        resumed = info.status == "paused"
        if resumed:
            await self.manager.resume(owner, sandbox_id)
        elif action == "resume":
            raise _conflict(f"sandbox {sandbox_id} is not paused")
        timeout = body.get("timeout")
        if resumed and timeout is None:  # paused at its timeout: it has none left
            timeout = self.manager.read_state(sandbox_id).get("e2b_timeout")
        self.manager.update_state(sandbox_id, paused_at_timeout=None)
        self.deadline_in(sandbox_id, timeout)
        info = await self.manager.get(owner, sandbox_id)
        self.write_json(self.sandbox(info), 201 if resumed else 200)

    def _done(self) -> None:
        self.set_status(204)
        self.finish()


def _conflict(message: str) -> SandboxError:
    error = SandboxError(message)
    error.http_status = 409
    return error


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name in ("mcp", "network", "volumeMounts", "iam", "lifecycle"):
        if body.get(name) not in (None, {}, []):
            raise E2BUnsupportedError(
                f"{name} is not supported by jupyter-sandbox's E2B API (docs/how-to/e2b.md): "
                "set a sandbox's network policy with our REST API "
                "(PUT /api/sandboxes/{id}/network)"
            )
    if body.get("autoPauseMemory") not in (None, True):
        raise E2BUnsupportedError(
            "autoPauseMemory false (a filesystem-only pause) is not supported: a sandbox "
            "paused at its timeout keeps its memory and processes, frozen"
        )


def _auto_resume(value: Any, auto_pause: bool) -> bool:
    """Whether E2B's ``autoResume`` (``{"enabled": bool}``) is enabled; only with autoPause."""
    if value is None:
        return False
    if not isinstance(value, dict) or set(value) - {"enabled"}:
        raise InvalidRequestError('autoResume must be {"enabled": true} or {"enabled": false}')
    enabled = _optional_flag(value.get("enabled"), "autoResume.enabled") or False
    if enabled and not auto_pause:
        raise InvalidRequestError(
            "autoResume needs autoPause: only a sandbox paused at its "
            "timeout is resumed by its next request"
        )
    return enabled


def _seconds(value: Any) -> float:
    try:
        return timeout_seconds(value)
    except InvalidRequestError:
        raise InvalidRequestError(
            f"timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}"
        ) from None


def _string_map(value: Any, name: str, rules: StringMapRules) -> dict[str, str]:
    """E2B's SDKs send null for a map left out; anything else is checked as our REST API's."""
    return {} if value is None else string_map(value, name, rules)


def _optional_flag(value: Any, name: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InvalidRequestError(f"{name} must be true or false")


def _metadata_query(text: str) -> dict[str, str]:
    """E2B's ``?metadata=`` (``key=value&...``, URL-encoded once more)."""
    if len(text) > 64 * 1024:
        raise InvalidRequestError("the metadata filter is longer than 64 KiB")
    return dict(parse_qsl(text, strict_parsing=False))


control_plane_handlers: list[tuple[str, type[web.RequestHandler]]] = [
    (r"/api/e2b/(?:v2/)?sandboxes/?", E2BSandboxesHandler),
    (rf"/api/e2b/sandboxes/{_ID}/?", E2BSandboxHandler),
    (
        rf"/api/e2b/(?:v2/)?sandboxes/{_ID}/(?P<action>connect|resume|pause|timeout)/?",
        E2BSandboxActionHandler,
    ),
]

"""No route without authentication and authorization; the OpenAPI file matches the routes;
two users on one engine see only their own sandboxes; whose sandboxes a request acts on."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import IdentityProvider, LegacyIdentityProvider, User
from jupyter_server.base.handlers import JupyterHandler
from jupyterhub.singleuser.extension import JupyterHubIdentityProvider
from openapi_spec_validator import validate
from tornado import web

from jupyter_sandbox.sandbox.identity import default_owner
from jupyter_sandbox.server_extension import SandboxExtension, app, base, handlers
from jupyter_sandbox.server_extension.port_handlers import PortProxyHandler
from tests.server_extension.conftest import Fetch, api

SPEC = Path(handlers.__file__).with_name("openapi.yaml")
METHODS = ("get", "post", "put", "patch", "delete")


# The proxy to a sandbox's ports: its link is its credential, not the user's login, which the
# sandbox's pages must never carry (port_links.py); test_ports.py has every wrong link a 404.
LINK_ROUTES = (PortProxyHandler,)


def routes() -> set[tuple[str, str]]:
    """(path template, method) of every API handler, e.g. ('/api/sandboxes/{sandbox_id}', 'get')."""
    found = set()
    for pattern, handler in app.default_handlers:
        if handler in LINK_ROUTES:
            continue
        path = pattern.rstrip("?").rstrip("/").replace("(?P<sandbox_id>[^/]+)", "{sandbox_id}")
        path = path.replace("(?P<port>[^/]+)", "{port}")
        path = path.replace("(?P<snapshot_id>[^/]+)", "{snapshot_id}")
        path = path.replace("(?P<command_id>[^/]+)", "{command_id}")
        path = path.replace("(?P<request_id>[^/]+)", "{request_id}")
        path = path.replace("(?P<name>[^/]+)", "{name}")
        choice = re.search(r"\(\?P<action>([^)]*)\)", path)
        paths = (
            [path.replace(choice.group(0), a) for a in choice.group(1).split("|")]
            if choice
            else [path]
        )
        for method in METHODS:
            # Inherited too: a handler answers what its bases define (DELETE of one port's
            # link was SandboxPortsHandler's, called with a port it does not take: a 500).
            if getattr(handler, method) is not getattr(web.RequestHandler, method):
                found.update((p, method) for p in paths)
    return found


def test_openapi_file_matches_the_handlers() -> None:
    spec = yaml.safe_load(SPEC.read_text())
    validate(spec)  # a valid OpenAPI 3 document
    documented = {
        (path, method)
        for path, item in spec["paths"].items()
        for method in item
        if method in METHODS
    }
    assert documented == routes()


def test_every_handler_is_authenticated_and_authorized() -> None:
    for _, handler in app.default_handlers:
        if handler in LINK_ROUTES:
            assert not issubclass(handler, JupyterHandler)  # no login, cookies or XSRF of ours
            for method in METHODS:  # said so, for jupyter_server's check of every route
                assert hasattr(getattr(handler, method), "__allow_unauthenticated"), method
            continue
        for method in METHODS:
            answered = getattr(handler, method)  # inherited ones too
            if answered is getattr(web.RequestHandler, method):
                continue  # not answered: tornado's 405
            # @web.authenticated wraps @authorized wraps the method: two layers.
            assert answered.__wrapped__.__wrapped__, (handler, method)


async def test_no_route_answers_without_a_valid_token(jp_fetch: Fetch) -> None:
    for path, method in sorted(routes()):
        concrete = path.replace("{sandbox_id}", "0123456789ab")
        concrete = concrete.replace("{command_id}", "0123456789ab").replace("{port}", "8000")
        root, *parts = concrete.replace("{snapshot_id}", "0123456789abcdef").split("/")[2:]
        body = "{}" if method in ("post", "put", "patch") else None
        status, _ = await api(
            jp_fetch,
            method.upper(),
            *parts,
            body=body,
            root=root,
            headers={"Authorization": "token wrong"},
        )
        assert status == 403, (method, path, status)


class NamedUsers(IdentityProvider):
    """Tokens that name their user: 'token alice' is alice. For tests only."""

    def get_user(self, handler: web.RequestHandler) -> User | None:
        header = handler.request.headers.get("Authorization", "")
        name = header.removeprefix("token ").strip()
        return User(name) if name in ("alice", "bob", "mallory", "reader") else None

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        return True  # a token, not a cookie: no XSRF check, as for real API tokens


class NoSandboxesForMallory(Authorizer):
    """mallory may do nothing with sandboxes; reader anything but run something in one."""

    def is_authorized(self, handler: Any, user: User, action: str, resource: str) -> bool:
        if resource != base.AUTH_RESOURCE:
            return True
        return user.username != "mallory" and (user.username != "reader" or action != "execute")


def with_named_users(config: dict[str, Any]) -> dict[str, Any]:
    """A server configuration whose tokens name their users (alice, bob, mallory)."""
    server = {
        **config["ServerApp"],
        "identity_provider_class": NamedUsers,
        "authorizer_class": NoSandboxesForMallory,
    }
    return {**config, "ServerApp": server}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return with_named_users(jp_server_config)


@pytest.mark.integration
async def test_two_users_see_only_their_own(jp_fetch: Fetch) -> None:
    alice = {"headers": {"Authorization": "token alice"}}
    bob = {"headers": {"Authorization": "token bob"}}
    status, made = await api(jp_fetch, "POST", body={}, **alice)
    assert status == 201
    assert made["owner"] == "alice"
    sandbox_id = made["id"]

    assert await api(jp_fetch, "GET", **bob) == (200, [])
    for method, path in [
        ("GET", [sandbox_id]),
        ("GET", [sandbox_id, "stats"]),
        ("GET", [sandbox_id, "attestation"]),
        ("POST", [sandbox_id, "pause"]),
        ("POST", [sandbox_id, "resume"]),
        ("POST", [sandbox_id, "restart"]),
        ("DELETE", [sandbox_id]),
    ]:
        status, error = await api(jp_fetch, method, *path, **bob)
        assert (status, error["code"]) == (404, "sandbox_not_found"), (method, path)

    status, listed = await api(jp_fetch, "GET", **alice)
    assert [s["id"] for s in listed] == [sandbox_id]
    assert listed[0]["status"] == "running"  # bob's pause did nothing


async def test_authorizer_decides(jp_fetch: Fetch) -> None:
    status, _ = await api(jp_fetch, "GET", headers={"Authorization": "token mallory"})
    assert status == 403


@pytest.mark.integration
async def test_running_anything_in_a_sandbox_is_the_action_execute(jp_fetch: Fetch) -> None:
    """A command (run or left running) and code in its interpreter need "execute" on
    "sandboxes", as Jupyter's kernels and terminals do; reading and managing do not."""
    reader = {"headers": {"Authorization": "token reader"}}
    status, made = await api(jp_fetch, "POST", body={"runtime": "runc"}, **reader)
    assert status == 201
    sandbox_id = made["id"]
    try:
        for path, body in [
            ("commands", {"command": "touch /workspace/ran"}),
            ("commands", {"command": "touch /workspace/ran", "background": True}),
            ("execute", {"code": "open('/workspace/ran', 'w')"}),
        ]:
            status, _ = await api(jp_fetch, "POST", sandbox_id, path, body=body, **reader)
            assert status == 403, (path, body)
        status, listing = await api(jp_fetch, "GET", sandbox_id, "files", **reader)
        assert status == 200
        assert "ran" not in [entry["name"] for entry in listing["entries"]]
        assert await api(jp_fetch, "GET", sandbox_id, "commands", **reader) == (
            200,
            {"commands": []},
        )
    finally:
        status, _ = await api(jp_fetch, "DELETE", sandbox_id, **reader)
        assert status == 204


class LegacySingleUserApp:
    """Stands for jupyterhub's legacy single-user app (JUPYTERHUB_SINGLEUSER_EXTENSION=0),
    a ServerApp subclass made in jupyterhub.singleuser.mixins; making the real one patches
    jupyter_server's base handler for the whole process."""

    __module__ = "jupyterhub.singleuser.mixins"

    def __init__(self) -> None:
        self.identity_provider = LegacyIdentityProvider()


@pytest.mark.parametrize(
    ("source", "provider", "hub_user", "acts_as"),
    [
        # jupyter_server's own login: token users are random names per browser.
        ("auto", IdentityProvider, None, "server"),
        # A JupyterHub single-user server: whoever the hub lets in (its owner, an admin, a
        # user it is shared with) acts in the owner's server as its owner, as its kernels do.
        ("auto", JupyterHubIdentityProvider, "alice", "server"),
        ("auto", LegacySingleUserApp, "alice", "server"),
        # A server with named users of its own, even when started inside a hub user's session
        # (which passes JUPYTERHUB_USER on to it).
        ("auto", NamedUsers, None, "identity"),
        ("auto", NamedUsers, "alice", "identity"),
        ("auto", JupyterHubIdentityProvider, None, "identity"),
        ("server", NamedUsers, None, "server"),
        ("identity", JupyterHubIdentityProvider, "alice", "identity"),
    ],
)
def test_the_owner_a_request_acts_as(
    monkeypatch: pytest.MonkeyPatch, source: str, provider: type, hub_user: str | None, acts_as: str
) -> None:
    monkeypatch.delenv("JUPYTER_SANDBOX_OWNER", raising=False)
    if hub_user is None:
        monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    else:
        monkeypatch.setenv("JUPYTERHUB_USER", hub_user)
    extension = SandboxExtension(owner_source=source)
    if provider is LegacySingleUserApp:
        extension.serverapp = LegacySingleUserApp()
    else:
        extension.serverapp = SimpleNamespace(identity_provider=provider())  # type: ignore[assignment]
    owner = extension.owner_of(User("hub-admin"))
    assert owner == (default_owner() if acts_as == "server" else "hub-admin")
    if hub_user is not None and acts_as == "server":
        assert owner == hub_user


def test_extension_is_enabled_on_install() -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "jupyter_server", "extension", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = listing.stdout + listing.stderr
    assert re.search(r"jupyter_sandbox\.server_extension\s+\S*enabled", output), output
    assert re.search(r"jupyter_sandbox\.server_extension\s+\S*OK", output), output

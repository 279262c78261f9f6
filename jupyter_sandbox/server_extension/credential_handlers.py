"""REST handlers of the owner's credentials: ``/api/credentials`` and ``/api/credentials/{name}``.

What the host proxy adds to the requests of the owner's sandboxes, for the hosts each one names
(sandbox/network/credentials.py; issue 37): ``GET /api/credentials`` lists names, hosts and
header names, never a value; ``PUT /api/credentials/{name}`` with ``{"hosts": [...],
"headers": {...}}`` or ``{"hosts": [...], "basic": {"username": ..., "password": ...}}`` sets one
(201 new, 200 replaced; the answer is the listing's entry, never a value); ``DELETE`` removes one
(204; 404 ``credential_not_found``). The owner is the request's, as for every other route, and the
values are written to the host's store only: no answer, log line or error message carries one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_sandbox.sandbox.network.credentials import CredentialStore
from jupyter_sandbox.server_extension.base import JsonBodyHandler, SandboxAPIHandler

# Any segment: a malformed name is the store's own 400 (or 404 to DELETE), which says the rule.
_NAME = r"(?P<name>[^/]+)"


class CredentialsBase(SandboxAPIHandler):
    """The store in the directory the host proxies read (``NetworkSettings.credentials_dir``)."""

    @property
    def store(self) -> CredentialStore:
        return CredentialStore(Path(self.manager.network.credentials_path))


class CredentialsHandler(CredentialsBase):
    """``GET /api/credentials``: the owner's credentials, by name, without their values."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        listed = await asyncio.to_thread(self.store.describe, self.owner)
        self.write_json({"credentials": listed})


class CredentialHandler(JsonBodyHandler, CredentialsBase):
    """``PUT`` / ``DELETE /api/credentials/{name}``: set one (201 new, 200 replaced), remove one."""

    @web.authenticated
    @authorized
    async def put(self, name: str) -> None:
        body = await self.json_body()
        credential, created = await asyncio.to_thread(self.store.put, self.owner, name, body)
        self.write_json(credential.public(), 201 if created else 200)

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        await asyncio.to_thread(self.store.remove, self.owner, name)
        self.set_status(204)
        self.finish()


credential_handlers = [
    (r"/api/credentials/?", CredentialsHandler),
    (rf"/api/credentials/{_NAME}/?", CredentialHandler),
]

"""The entry point of agent code: :class:`SandboxClient`, one user's sandboxes on one Jupyter
Server (a JupyterHub single-user server, ``make lab``), reached over its REST API with the URL
and a token.

Agent code makes one client and calls ``create``, ``list`` and ``get``, which hand out
:class:`~jupyter_sandbox.client.Sandbox` objects sharing the client's transport::

    client = SandboxClient("http://127.0.0.1:8888/")  # token from JUPYTER_TOKEN
    with client.create(timeout=600, metadata={"task": "t-42"}) as sandbox:
        sandbox.run_code("x = 41")
        print(sandbox.run_code("x + 1").text)  # 42
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Any

from jupyter_sandbox.client.network import NetworkSpec, network_policy
from jupyter_sandbox.client.sandbox import Sandbox
from jupyter_sandbox.client.transport import DEFAULT_TIMEOUT, Transport
from jupyter_sandbox.protocol.errors import InvalidRequestError


class SandboxClient:
    """The sandboxes of the user ``token`` belongs to, on the Jupyter Server at ``url`` (its
    base URL included: a JupyterHub user's server is ``https://HUB/user/NAME/``).

    ``token``: a Jupyter Server or JupyterHub API token; None reads ``JUPYTER_TOKEN``.
    ``timeout``: seconds to wait for the server to answer a request (not a sandbox's
    lifetime, which is ``create(timeout=...)``); a code run or command waits its own timeout
    on top of it. The client holds no connection: nothing to close, and it may be shared by
    threads."""

    def __init__(
        self, url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self._transport = Transport(url, token, timeout)

    def __repr__(self) -> str:  # never the token
        return f"SandboxClient({self.url!r})"

    @property
    def url(self) -> str:
        return self._transport.url

    def create(
        self,
        runtime: str | None = None,
        image: str | None = None,
        limits: Mapping[str, Any] | None = None,
        environment: Mapping[str, str] | None = None,
        network: NetworkSpec | None = None,
        timeout: float | None = None,
        metadata: Mapping[str, str] | None = None,
        context: str | None = None,
        snapshot: str | None = None,
    ) -> Sandbox:
        """Start a sandbox and return once its interpreter answers. Every argument is
        optional; the server's settings fill the rest:

        ``runtime`` "runsc" (gVisor) or "runc"; ``image`` one present on the host;
        ``limits`` e.g. ``{"memory": "1g", "cpus": 1, "pids": 256}``; ``environment``
        variables for everything in it; ``network`` a policy ``{"mode", "allow", "deny"}``
        or only its mode ("none", "allowlist", "ask", "open"); ``timeout`` seconds after which the
        server removes it, whatever it does (``Sandbox.set_timeout`` moves it); ``metadata``
        your own string labels, to find it again with :meth:`list`; ``context`` a name a
        kernel can attach to later; ``snapshot`` the id of a snapshot of yours whose files
        fill its /workspace.

        Raises QuotaExceededError past a quota, InvalidRequestError for a bad value (the
        message names it), ImageNotFoundError, RuntimeUnavailableError..."""
        fields: dict[str, Any] = {
            "runtime": runtime,
            "image": image,
            "limits": None if limits is None else dict(limits),
            "environment": None if environment is None else dict(environment),
            "network": None if network is None else network_policy(network),
            "timeout": timeout,
            "metadata": None if metadata is None else dict(metadata),
            "context": context,
            "snapshot": snapshot,
        }
        body = {name: value for name, value in fields.items() if value is not None}
        return Sandbox(self._transport, self._transport.call("POST", "sandboxes", body=body))

    def list(self, metadata: Mapping[str, str] | None = None) -> builtins.list[Sandbox]:
        """The user's sandboxes, in any state; with ``metadata``, only those whose metadata
        has every one of these entries."""
        query = [("metadata", f"{key}={value}") for key, value in (metadata or {}).items()]
        answer = self._transport.call("GET", "sandboxes", query=query)
        return [Sandbox(self._transport, info) for info in answer]

    def get(self, sandbox_id: str) -> Sandbox:
        """The sandbox of that id (SandboxNotFoundError if the user has none: another user's
        sandbox is not found either)."""
        return Sandbox(self._transport, self._transport.call("GET", "sandboxes", sandbox_id))

    def credentials(self) -> builtins.list[dict[str, Any]]:
        """The user's credentials: ``name``, ``hosts`` and ``headers`` (the header names) of
        each; their values are never answered."""
        answer = self._transport.call("GET", "credentials")
        listed: builtins.list[dict[str, Any]] = answer["credentials"]
        return listed

    def set_credential(
        self,
        name: str,
        hosts: Sequence[str],
        headers: Mapping[str, str] | None = None,
        basic: tuple[str, str] | None = None,
    ) -> dict[str, Any]:
        """Give the server a credential its host proxy adds to plain HTTP requests of the
        user's sandboxes to ``hosts`` (patterns: ``api.example.com``, ``*.example.com``,
        optionally ``:port``) that their policy allows: ``headers`` to add (replacing any of
        the same name the sandbox sends), or ``basic`` as (username, password). It replaces a
        credential of the same name. The sandbox never sees the value; the answer is the
        listing's entry (no value)."""
        if (headers is None) == (basic is None):
            raise InvalidRequestError("give exactly one of headers and basic")
        body: dict[str, Any] = {"hosts": list(hosts)}
        if headers is not None:
            body["headers"] = dict(headers)
        else:
            assert basic is not None
            body["basic"] = {"username": basic[0], "password": basic[1]}
        answer: dict[str, Any] = self._transport.call("PUT", "credentials", name, body=body)
        return answer

    def remove_credential(self, name: str) -> None:
        """Remove the user's credential ``name`` (CredentialNotFoundError if there is none)."""
        self._transport.call("DELETE", "credentials", name)

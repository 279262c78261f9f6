"""The host-side HTTP proxy of one sandbox: CONNECT and plain absolute-URI HTTP.

Each request is decided in three steps, and every decision is written to the audit:

1. the sandbox's *current* policy (read from its state file on each request, so a change made
   through the API applies to the very next request) judges the name and port, before any
   lookup: a name the policy refuses is never resolved (no DNS exfiltration through us). Under
   an ``ask`` policy a name it neither allows nor denies is held, still unresolved, until the
   owner decides (asks.py): allowed once or for the sandbox, it goes on to step 2; denied, or
   undecided within ``NetworkSettings.ask_timeout``, it is refused with a line that says so;
2. the proxy resolves the name itself and checks **every** address against the guard
   (addresses.py); one refused address refuses the request, and the server is not contacted;
3. it connects to an address it checked (no second lookup: no DNS rebinding).

Refusals are ``403`` answers from the proxy whose reason phrase names the policy, the target and
the rule (forwarder.refusal_text: urllib, requests and pip show a proxy's reason phrase in the
error they raise, and never its body), with the same line in the body and the bare rule in the
``X-Jupyter-Sandbox-Denied`` header. A plain HTTP request is forwarded with its ``Host`` header
set to the URI's authority (no smuggled Host) and ``Connection: close`` (request_head.py), and
with the owner's credentials for that host and port added (``credentials``, read on each
request; issue 37): only once the policy allowed the request, never for an IP literal (no
credential pattern names an address), each replacing a header of the same name the sandbox sent.
The audit names the credentials used; no answer, log line or audit entry carries a value.
A CONNECT whose host and port a credential names, or every CONNECT when
``NetworkSettings.tls_inspection`` is on, is inspected (inspection.py): the proxy terminates
the sandbox's TLS with a leaf of the sandbox's own CA (tls_ca.py), refuses a TLS server name or
``Host`` other than the CONNECT host, adds the credential's headers and opens its own TLS to
the host, verified with the host's trust store. Any other CONNECT is tunneled, TLS untouched:
one whose client then asks TLS for another server name (SNI) is closed before any byte of it is
passed on (sni.py), but domain fronting through an allowed CDN name (the fronted name is inside
the encryption) is not prevented there: a documented limitation of running without inspection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

from jupyter_sandbox.sandbox.host.state_record import NewerStateError, read_state
from jupyter_sandbox.sandbox.host.timeouts import within
from jupyter_sandbox.sandbox.network.addresses import AddressGuard
from jupyter_sandbox.sandbox.network.asks import TIMEOUT, WITHDRAWN, Decision, HeldRequests
from jupyter_sandbox.sandbox.network.audit import AuditLog
from jupyter_sandbox.sandbox.network.credentials import credential_names
from jupyter_sandbox.sandbox.network.forwarder import refusal_text
from jupyter_sandbox.sandbox.network.inspection import Inspection, inspect, upstream_context
from jupyter_sandbox.sandbox.network.policy import (
    NO_NETWORK,
    NetworkPolicy,
    PolicyDecision,
    policy_of_state,
)
from jupyter_sandbox.sandbox.network.request_head import (
    BadRequest,
    ClientClosed,
    ProxyRequest,
    answer,
    is_address,
    parse_head,
    read_head,
    with_headers,
)
from jupyter_sandbox.sandbox.network.sni import Incomplete, is_tls, server_name
from jupyter_sandbox.sandbox.network.splice import relay
from jupyter_sandbox.sandbox.network.tls_ca import LeafMinter

log = logging.getLogger(__name__)

# What a user can do about an address refusal: no policy reaches such an address.
ADDRESS_REMEDY = (
    "no policy reaches it; a server's admin can open private ranges with "
    "c.NetworkSettings.allow_private_ranges"
)
# Seconds a request allowed for the sandbox waits, at most, for the sandbox's policy to hold
# its host (asks.decide stores the policy right after the decision), checked every
# POLICY_POLL seconds.
POLICY_WAIT = 5.0
POLICY_POLL = 0.01


class EgressProxy:
    """Serves proxy requests arriving on tunnels from one sandbox's forwarder."""

    def __init__(
        self,
        root: Path,
        guard: AddressGuard,
        audit: AuditLog,
        *,
        test_host_addresses: dict[str, str] | None = None,
        connect_timeout: float = 10.0,
        asks: HeldRequests | None = None,
        credentials: Callable[[str, int], list[tuple[str, str]]] | None = None,
        tls_inspection: bool = False,
        upstream_extra_ca_file: str = "",
    ) -> None:
        self.root = root
        self.state_file = root / "state.json"
        # Requests held for the owner under an ask policy (a proxy made without: 1 s, one).
        self.asks = asks or HeldRequests(root, timeout=1.0, max_pending=1)
        self.guard = guard
        self.audit = audit
        self.test_host_addresses = test_host_addresses or {}
        self.connect_timeout = connect_timeout
        # The owner's credentials for a host and port (credentials.py), read on each request.
        self.credentials = credentials
        self._policy: tuple[tuple[int, int], NetworkPolicy] | None = None
        self.tls_inspection = tls_inspection
        self.upstream_extra_ca_file = upstream_extra_ca_file
        self._minter: LeafMinter | None = None
        self._upstream_context: ssl.SSLContext | None = None

    def current_policy(self) -> NetworkPolicy:
        """The policy in the state file now (re-read when the file was replaced)."""
        try:
            stat = os.stat(self.state_file)
        except FileNotFoundError:
            return NO_NETWORK
        key = (stat.st_ino, stat.st_mtime_ns)
        if self._policy is None or self._policy[0] != key:
            try:
                state = read_state(self.state_file)
            except (OSError, ValueError, NewerStateError):  # unreadable, corrupt, newer: closed
                return NO_NETWORK
            self._policy = (key, policy_of_state(state))
        return self._policy[1]

    async def handle(
        self, client: socket.socket, received: bytes, started: Callable[[], None]
    ) -> None:
        """One client on a tunnel (non-blocking socket; ``received``: bytes already read from
        it): waits, idle, for the request, serves it, then moves the bytes both ways."""
        try:
            head, rest = await read_head(client, received, started)
            request = parse_head(head)
        except ClientClosed:
            return
        except (BadRequest, asyncio.TimeoutError) as exc:
            await answer(client, 400, "Bad Request", f"bad proxy request: {exc}")
            return
        opened = await self._open(request, client)
        if opened is None:
            return
        upstream, head = opened
        loop = asyncio.get_running_loop()
        try:
            if request.method == "CONNECT":
                await loop.sock_sendall(client, b"HTTP/1.1 200 Connection established\r\n\r\n")
                if self._inspects(request):
                    await inspect(client, rest, upstream, self._inspection(request))
                    return
            else:
                await loop.sock_sendall(upstream, head)
            # The client's early bytes go out through the relay, after the server name check.
            check = self._tls_name_check(request) if request.method == "CONNECT" else None
            await relay(client, upstream, check, rest)
        finally:
            upstream.close()

    def _inspects(self, request: ProxyRequest) -> bool:
        """Whether a CONNECT is inspected: always when the administrator said so, else when a
        credential names its host and port (the proxy must see the request to add it). A
        store that cannot be read inspects too: the inspection then refuses the request."""
        if self.tls_inspection:
            return True
        try:
            return bool(self._credentials_for(request.host, request.port))
        except Exception:  # whatever broke the store: the inspection refuses the request
            return True

    def _credentials_for(self, host: str, port: int) -> list[tuple[str, str]]:
        """The owner's credential headers for ``host:port``: none for an IP literal
        (credentials name hosts) or without a store."""
        if self.credentials is None or is_address(host):
            return []
        return self.credentials(host, port)

    def _inspection(self, request: ProxyRequest) -> Inspection:
        if self._minter is None:
            self._minter = LeafMinter(self.root)
            self._upstream_context = upstream_context(self.upstream_extra_ca_file)
        assert self._upstream_context is not None

        def record(method: str, allowed: bool, rule: str, credentials: list[str]) -> None:
            self.audit.record(
                host=request.host,
                port=request.port,
                method=method,
                allowed=allowed,
                rule=rule,
                credentials=credentials,
            )
            if not allowed:
                log.info("refused inside %s:%s: %s", request.host, request.port, rule)

        return Inspection(
            request.host,
            request.port,
            self._minter,
            self._upstream_context,
            self._credentials_for,
            record,
        )

    def _tls_name_check(self, request: ProxyRequest) -> Callable[[bytes], bool] | None:
        """For a CONNECT to a name: refuse TLS whose server name (SNI) is another name, or
        cannot be read from the client's first record."""
        if is_address(request.host):
            return None

        def check(first: bytes) -> bool:  # runs on the relay's thread
            if not is_tls(first):
                return True
            try:
                name = server_name(first)
            except (ValueError, Incomplete):
                # TLS whose first record holds no whole ClientHello (split over records, or
                # malformed): its name cannot be checked, and a server that reassembles it
                # would read one. Refused: browsers and TLS libraries send one record.
                rule = (
                    "a TLS ClientHello whose server name cannot be read (split over records, "
                    f"or malformed), to CONNECT host {request.host}"
                )
            else:
                if name is None or name == request.host:
                    return True
                rule = f"TLS server name {name} is not the CONNECT host {request.host}"
            self._record(request, allowed=False, rule=rule)
            log.info("closed a tunnel to %s:%s: %s", request.host, request.port, rule)
            return False

        return check

    async def _open(
        self, request: ProxyRequest, client: socket.socket
    ) -> tuple[socket.socket, bytes] | None:
        """The upstream connection for an allowed ``request`` and the head to send it (with
        the credentials added), or None once the client was answered."""
        host, port = request.host, request.port
        policy = self.current_policy()
        decision = policy.decide(host, port)
        asked: Decision | None = None
        if decision.ask:
            if self.asks.full:
                rule = (
                    f"{self.asks.max_pending} requests of this sandbox already wait for the "
                    "owner's decision (NetworkSettings.max_pending_requests); try again later"
                )
                await self._deny(client, request, policy.mode, rule)
                return None
            policy, decision, asked = await self._ask(request, client)
            if asked.decision == WITHDRAWN:  # nobody is left to answer
                self._record(request, allowed=False, rule=decision.rule, asked=asked)
                return None
        if not decision.allowed:
            await self._deny(client, request, policy.mode, decision.rule, asked=asked)
            return None
        try:
            addresses = await self._resolve(host, port)
        except OSError as exc:
            self._record(request, allowed=False, rule=f"lookup failed: {exc}")
            await answer(client, 502, "Bad Gateway", f"{host} did not resolve: {exc}")
            return None
        for address in addresses:
            why = self.guard.refusal(address)
            if why is not None:
                rule = f"resolved to a denied address {address} ({why})"
                await self._deny(client, request, policy.mode, rule, address)
                return None
        try:
            head, used = self._with_credentials(request)
        except Exception as exc:  # a broken store refuses the request; it never leaks
            # Only the type: a message of a broken store's parser could quote its content.
            log.error("credentials for %s:%s unreadable: %s", host, port, type(exc).__name__)
            rule = "the owner's credentials could not be read (see the server's log)"
            self._record(request, allowed=False, rule=rule)
            await answer(client, 502, "Bad Gateway", f"{host}:{port}: {rule}")
            return None
        error: Exception | None = None
        loop = asyncio.get_running_loop()
        for address in addresses:  # each one checked above; connected to as it is
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            upstream = socket.socket(family, socket.SOCK_STREAM)
            upstream.setblocking(False)
            try:
                await within(loop.sock_connect(upstream, (address, port)), self.connect_timeout)
            except (OSError, asyncio.TimeoutError) as exc:
                upstream.close()
                error = exc
                continue
            self._record(
                request,
                allowed=True,
                rule=decision.rule,
                address=address,
                asked=asked,
                credentials=used,
            )
            return upstream, head
        self._record(
            request,
            allowed=False,
            rule=f"allowed ({decision.rule}) but the connection failed: {error!r}",
            asked=asked,
        )
        await answer(client, 502, "Bad Gateway", f"could not connect to {host}:{port}: {error!r}")
        return None

    def _with_credentials(self, request: ProxyRequest) -> tuple[bytes, list[str]]:
        """The head to send upstream for an allowed plain-HTTP ``request``, with the owner's
        credentials for its host and port, and their names. None for CONNECT (a tunnel's
        bytes are TLS the proxy does not read) nor for an IP literal: credentials name hosts,
        and the policy judged this name."""
        if request.method == "CONNECT" or self.credentials is None or is_address(request.host):
            return request.head, []
        added = self.credentials(request.host, request.port)
        if not added:
            return request.head, []
        return with_headers(request.head, added), credential_names(added) or ["(unnamed)"]

    async def _ask(
        self, request: ProxyRequest, client: socket.socket
    ) -> tuple[NetworkPolicy, PolicyDecision, Decision]:
        """Hold ``request`` for the owner; the policy then, and the decision as the policy's
        (an owner's "once" or "sandbox" allows, "deny", the timeout and a program that left
        refuse)."""
        host, port = request.host, request.port

        def decided_by_policy() -> bool:
            return not self.current_policy().decide(host, port).ask

        def withdrawn() -> bool:
            """Whether the program closed its connection (the forwarder then half-closes the
            tunnel: end of file, seen without taking a byte of what it may still send)."""
            try:
                return client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                return False
            except OSError:
                return True

        asked = await self.asks.hold(host, port, request.method, decided_by_policy, withdrawn)
        policy = self.current_policy()
        now = policy.decide(host, port)
        if not now.allowed and not now.ask:  # refused by the policy meanwhile: that stands
            return policy, now, asked
        if asked.decision == "once":
            return policy, PolicyDecision(True, f"allowed once by {asked.by}"), asked
        if asked.decision == "sandbox":
            # The owner's decision comes just before the policy that holds the host
            # (asks.decide): go on once it does, so that whoever sees this request answered
            # sees the host allowed too (the policy, the next request not asked about).
            policy = await self._holding(host, port)
            return policy, PolicyDecision(True, f"allowed for the sandbox by {asked.by}"), asked
        if asked.decision == TIMEOUT:
            rule = (
                f"the owner did not decide within {self.asks.timeout:g} s "
                "(NetworkSettings.ask_timeout)"
            )
            return policy, PolicyDecision(False, rule), asked
        if asked.decision == "deny":
            return policy, PolicyDecision(False, f"denied by {asked.by}"), asked
        if asked.decision == WITHDRAWN:
            return policy, PolicyDecision(False, "the program left before a decision"), asked
        return policy, policy.decide(host, port), asked  # the policy changed meanwhile

    async def _holding(self, host: str, port: int) -> NetworkPolicy:
        """The sandbox's policy once it allows ``host:port``, or after POLICY_WAIT seconds."""
        deadline = asyncio.get_running_loop().time() + POLICY_WAIT
        policy = self.current_policy()
        while not policy.decide(host, port).allowed:
            if asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(POLICY_POLL)
            policy = self.current_policy()
        return policy

    async def _deny(
        self,
        client: socket.socket,
        request: ProxyRequest,
        mode: str,
        rule: str,
        address: str | None = None,
        asked: Decision | None = None,
    ) -> None:
        """Refuse ``request`` under the policy ``mode`` by ``rule``; ``address``: the refused
        address it resolved to (a rule no policy can change); ``asked``: the owner's decision
        on it, when it was held."""
        self._record(request, allowed=False, rule=rule, address=address, asked=asked)
        log.info("denied %s:%s: %s", request.host, request.port, rule)
        host = f"[{request.host}]" if ":" in request.host else request.host
        # The policy none's own rule would only repeat the mode.
        shown = "" if mode == "none" else rule
        if address is None:
            text = refusal_text(mode, f"{host}:{request.port}", shown)
        else:
            text = refusal_text(mode, f"{host}:{request.port}", shown, ADDRESS_REMEDY)
        await answer(client, 403, text, text, rule)

    def _record(
        self,
        request: ProxyRequest,
        *,
        allowed: bool,
        rule: str,
        address: str | None = None,
        asked: Decision | None = None,
        credentials: list[str] | None = None,
    ) -> None:
        """One audit entry for ``request``'s decision (with the owner's, when it was held,
        and the names of the credentials added to it, never their values)."""
        self.audit.record(
            host=request.host,
            port=request.port,
            method=request.method,
            allowed=allowed,
            rule=rule,
            address=address,
            asked=None if asked is None else asked.audit_fields(),
            credentials=credentials or None,
        )

    async def _resolve(self, host: str, port: int) -> list[str]:
        """Every address of ``host``, resolved here (the sandbox has no resolver)."""
        if host in self.test_host_addresses:
            return [self.test_host_addresses[host]]
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
        found: list[str] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            address = str(sockaddr[0])
            if address not in found:
                found.append(address)
        if not found:
            raise OSError(f"no address for {host}")
        return found

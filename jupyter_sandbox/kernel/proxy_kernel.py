"""The proxy kernel process: one frontend connection, one sandbox, the relay between them.

Lifecycle, as jupyter_client drives it:

* start: bind the frontend sockets at once; take the context (JUPYTER_SANDBOX_CONTEXT, or one
  derived from the connection file for an unnamed kernel); reattach to its sandbox or create
  one (obtaining.py); then relay. A sandbox that cannot start leaves a kernel that answers
  every request with the reason and the fix.
* restart (shutdown_request with restart=true): the sandbox's supervisor starts a fresh
  interpreter in the same sandbox (files in /workspace stay); this process exits and the next
  one, started with the same connection file, reattaches. A restart or shutdown asked while the
  sandbox starts is held and carried out once it is up, even if jupyter_client's SIGTERM comes
  meanwhile. A process killed instead leaves the next one of an unnamed kernel to restart the
  interpreter (obtaining.py).
* shutdown: an unnamed kernel's sandbox is removed; a named context's interpreter lives on for
  the next kernel that names it.
* the sandbox dies: running cells get an error naming the cause, and the process exits non-zero
  so that Jupyter's restarter starts a new kernel (and so a new sandbox).
* the context is lost (its lock file was replaced and another process holds it): running cells
  get an error naming the holder, and the process exits non-zero; the sandbox stays.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from traitlets.config import Config

from jupyter_sandbox.kernel.activity import ActivityRecord
from jupyter_sandbox.kernel.answers import (
    fail_request,
    reply,
    serve_unavailable,
    with_isolation_banner,
)
from jupyter_sandbox.kernel.kernel_request import KernelRequest
from jupyter_sandbox.kernel.memory_bound import bound_memory, part_bound
from jupyter_sandbox.kernel.message_relay import Relay
from jupyter_sandbox.kernel.obtaining import find_or_create, unnamed_context
from jupyter_sandbox.kernel.output_cap import OutputCap
from jupyter_sandbox.kernel.parent_watch import open_kernel_client
from jupyter_sandbox.kernel.wire import HEADER_BYTES, MalformedMessage, WireMessage, as_bytes, loads
from jupyter_sandbox.protocol.errors import ContextBusyError, SandboxError, SandboxNotFoundError
from jupyter_sandbox.sandbox.host.clock import now_iso
from jupyter_sandbox.sandbox.host.log_throttle import ThrottledWarning
from jupyter_sandbox.sandbox.lifecycle.contexts import ContextLock
from jupyter_sandbox.sandbox.lifecycle.lifeline import Lifeline
from jupyter_sandbox.sandbox.lifecycle.pool_keeper import start_keeper
from jupyter_sandbox.sandbox.lifecycle.reaper import sweep_orphans
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager, default_owner

log = logging.getLogger(__name__)

# Set by a running server for its kernels (server_extension/fast_start.py); its absence means a
# kernel started with no server (nbconvert, papermill, a jupyter_client script).
SERVER_ZYGOTE_ENV = "JUPYTER_SANDBOX_ZYGOTE"

WATCH_SECONDS = 1.0  # how often the sandbox's container is checked
HEARTBEAT_SECONDS = 15.0  # how often the state file records that this kernel is attached
UNAVAILABLE_SECONDS = 600.0  # how long a kernel without a sandbox keeps explaining why
# How long an unnamed kernel's next process waits for its context while the process before it,
# or that process's lifeline removing the sandbox, still holds it (lifeline.py).
TAKE_OVER_SECONDS = 30.0


class SandboxKernel:
    """Runs until the frontend shuts the kernel down or the sandbox dies; returns the exit code."""

    def __init__(
        self, connection_file: str, config: Config | None = None, launcher: int | None = None
    ) -> None:
        """``launcher``: the pid of the launcher that stands in for this kernel when a zygote
        forked it (kernel/zygote_child.py); None when this process is the kernel's own."""
        self.launcher = launcher
        self.connection_file = Path(connection_file).resolve()
        self.config = config or Config()
        self.manager = SandboxManager.from_config(self.config)
        self.owner = default_owner()
        self.context = os.environ.get("JUPYTER_SANDBOX_CONTEXT") or None
        self.relay = Relay(json.loads(self.connection_file.read_text()))
        self.sandbox: Sandbox | None = None
        self.lock: ContextLock | None = None
        self.lifeline: Lifeline | None = None  # removes an unnamed kernel's sandbox if killed
        self.client: int | None = None  # readable once the kernel's client ended (parent_watch)
        self.pending: dict[str, WireMessage] = {}  # execute_requests awaiting their reply
        # A dropped iopub connection loses the idle status frontends wait for: the proxy sends
        # one for the cells running then, after their reply, and for the last cell replied to
        # (_sandbox_connection_dropped). A second idle, if the kernel's came, changes nothing.
        self.idle_owed: set[str] = set()
        self.last_replied: WireMessage | None = None  # the execute_request last replied to
        self.done = asyncio.Event()
        self.exit_code = 0
        self.shutdown_held = False  # a shutdown_request came while the sandbox was starting
        self.shutting_down = False  # a shutdown_request was relayed (or answered)
        self.restarting = False
        self.remove_on_exit = False
        self.activity: ActivityRecord | None = None  # busy and last_activity in the state file
        self.output_cap = OutputCap(0)  # set from the settings in _obtain_sandbox
        # The sandbox decides how many messages are dropped and connections cut: the first of
        # each is said, then a count (log_throttle.py).
        self.dropped = ThrottledWarning(log)

    async def run(self) -> int:
        self.relay.bind_frontend()
        self.relay.hold_control(self._held_while_starting)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._terminated)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts arrive as messages
        self.client = open_kernel_client(self.launcher)
        if self.client is not None:
            loop.add_reader(self.client, self._client_gone)
        watcher: asyncio.Task[None] | None = None
        sweep: asyncio.Task[object] | None = None
        began = time.monotonic()
        try:
            self.sandbox = await self._obtain_sandbox()
            log.debug("sandbox obtained in %.0f ms", (time.monotonic() - began) * 1000)
            self.relay.connect_sandbox(
                self.sandbox.connection_info, part_bound(self.manager.settings.proxy_memory_bytes)
            )
        except SandboxError as exc:
            log.error("no sandbox for this kernel: %s", exc.message)
            self._serve_unavailable(exc.message)
        else:
            self.activity = ActivityRecord(
                functools.partial(self.manager.update_state, self.sandbox.sandbox_id)
            )
            self.relay.start(self._to_sandbox, self._to_frontend)
            self.relay.watch_sandbox_connections(self._sandbox_connection_dropped)
            watcher = asyncio.ensure_future(self._watch(self.sandbox))
            # The start of a kernel removes what killed kernels and servers left (reaper.py).
            sweep = asyncio.ensure_future(sweep_orphans(self.manager))
            self._keep_pool_warm()
        try:
            await self.done.wait()
        finally:
            if self.client is not None:
                loop.remove_reader(self.client)
                os.close(self.client)
            # Not waited for: a kernel's end (a restart) must not wait on the engine. A removal
            # cut short leaves its host directory to the next sweep.
            for task in (watcher, sweep):
                if task is not None:
                    task.cancel()
            if self.activity is not None:
                self.activity.close()
            await self._close()
        return self.exit_code

    # -- obtaining the sandbox ----------------------------------------------------------------

    async def _obtain_sandbox(self) -> Sandbox:
        self.output_cap = OutputCap(self.manager.settings.max_cell_output_bytes)
        # Before anything from the sandbox is read (memory_bound.py).
        bound_memory(self.manager.settings.proxy_memory_bytes)
        request = KernelRequest.from_environment()
        key = self.context or unnamed_context(self.connection_file)
        self.lock = await self._take_context(key)
        if self.context is None:
            self.lifeline = Lifeline.start(
                self.manager.settings.state_path, self.owner, key, self.connection_file
            )
        return await find_or_create(
            self.manager,
            self.owner,
            key,
            self.connection_file,
            request,
            named=self.context is not None,
        )

    def _keep_pool_warm(self) -> None:
        """With no server (nbconvert, papermill, a script), start the headless warm pool
        (pool_keeper.py) for the next kernels of this request. A named context's next kernel
        finds its sandbox again instead, and a server keeps its own pool."""
        if SERVER_ZYGOTE_ENV in os.environ or self.context is not None:
            return
        request = KernelRequest.from_environment()
        wanted = {
            "runtime": request.runtime,
            "image": request.image,
            "limits": request.limits,
            "launch_dir": os.getcwd(),  # as find_or_create gave it
        }
        try:
            start_keeper(self.config, str(self.manager.settings.state_path), self.owner, wanted)
        except OSError as exc:  # the kernel works without it: only the next start is slower
            log.warning("no headless warm pool: %s", exc)

    async def _take_context(self, key: str) -> ContextLock:
        """The context's lock. An unnamed context is only ever wanted by this kernel's processes
        and their lifelines: the one before this process may still be ending, or its lifeline
        removing the sandbox, and either lets go within seconds."""
        lock = ContextLock(self.manager.settings.state_path, self.owner, key)
        deadline = time.monotonic() + TAKE_OVER_SECONDS
        while True:
            try:
                lock.acquire()
                return lock
            except ContextBusyError:
                if self.context is not None or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(0.1)

    def _held_while_starting(self, message: WireMessage) -> None:
        if message.msg_type == "shutdown_request":
            self.shutdown_held = True

    # -- hooks on the relay -------------------------------------------------------------------

    def _to_sandbox(self, channel: str, message: WireMessage) -> WireMessage | None:
        if channel == "shell" and message.msg_type == "execute_request":
            self.pending[message.msg_id] = message
            self._note_busy()
        elif channel == "control" and message.msg_type == "shutdown_request":
            return self._on_shutdown_request(message)
        return message

    def _note_busy(self) -> None:
        """The sandbox is busy while any execute_request is pending (see activity.py)."""
        if self.activity is not None:
            self.activity.set_busy(bool(self.pending))

    def _on_shutdown_request(self, message: WireMessage) -> WireMessage | None:
        assert self.sandbox is not None
        self.shutting_down = True
        if message.content_dict().get("restart"):
            # The supervisor in the sandbox starts a fresh interpreter when this one exits.
            self.manager.request_restart(self.sandbox.sandbox_id)
            self.restarting = True
            return message
        if self.context is None:
            self.remove_on_exit = True
            return message
        # A named context: its interpreter outlives this kernel process. Answer for it.
        reply(self.relay, "control", message, {"status": "ok", "restart": False})
        self._stop(0)
        return None

    def _to_frontend(self, channel: str, message: WireMessage) -> WireMessage | None:
        if channel == "iopub":
            # Most messages are output: decoding each header only to find the one welcome
            # would cost more than relaying it, so look for the name's bytes first.
            if message.header_mentions(b"iopub_welcome") and message.msg_type == "iopub_welcome":
                return None  # the sandbox welcomed the proxy; frontends get their own welcome
            # Counted against the execution running now, whatever parent the sandbox names.
            running = next(iter(self.pending), None)  # the kernel runs them in the order sent
            relayed, notice = self.output_cap.admit(message, running)
            if notice is not None:
                self._send_output_notice(message, notice, running)
            return relayed
        if channel == "shell" and message.msg_type == "execute_reply":
            cell = message.parent_msg_id()
            request = self.pending.pop(cell, None)
            # A reply to no request of ours renews no budget: the sandbox names its parent.
            if request is not None:
                message = self.output_cap.admit_reply(message, request)
                self.output_cap.forget(cell)
                self.last_replied = request
                if cell in self.idle_owed:
                    self.idle_owed.discard(cell)
                    loop = asyncio.get_running_loop()  # after this reply, as the kernel's would
                    loop.call_soon(self._publish_idle, request.header_dict)
            self._note_busy()
        elif not self.output_cap.admits_other(message):
            self.dropped.warning(
                "over cap",
                "dropped a %s message of the sandbox's kernel (%r) larger than the output cap",
                channel,
                message.msg_type[:64],  # the sandbox names it, at up to a header's size
            )
            return None
        elif channel == "shell" and message.msg_type == "kernel_info_reply":
            return self._with_banner(message)
        elif channel == "control" and message.msg_type == "shutdown_reply" and self.shutting_down:
            asyncio.get_running_loop().call_soon(self._stop, 0)  # after this reply is sent
        return message

    def _send_output_notice(self, dropped: WireMessage, text: str, running: str | None) -> None:
        """Tell the frontend, in the running cell's own output, that the rest was not shown
        (between cells, under the parent the dropped message named)."""
        if running is not None:
            parent = self.pending[running].header_dict
        else:
            try:  # the sandbox wrote it
                named = loads(as_bytes(dropped.parent) or b"{}", HEADER_BYTES)
            except MalformedMessage:
                named = {}
            parent = named if isinstance(named, dict) else {}
        self._tell_frontend(text, parent)

    def _sandbox_connection_dropped(self, channel: str) -> None:
        """The relay lost one of its connections to the sandbox's kernel and made it again
        (message_relay.py): say so in the output of the cell running (or the last one), whose
        messages may be lost, and send the idle status a lost iopub connection took along."""
        if self.shutting_down or self.done.is_set():
            return  # the kernel in the sandbox ends or restarts, as asked
        self.dropped.warning(
            "connection", "the sandbox kernel's %s connection dropped; connected again", channel
        )
        running = next(iter(self.pending), None)
        cell = self.pending[running] if running is not None else self.last_replied
        if cell is not None:
            bound = self.manager.settings.proxy_memory_bytes
            text = (
                f"\n[jupyter-sandbox] the connection to this sandbox's kernel ({channel}) "
                "dropped and was made again: the sandbox sent a message part larger than this "
                f"kernel takes (a quarter of {bound} bytes, c.SandboxSettings.proxy_memory_limit)"
                ", or a message too large to hold, or its interpreter restarted. What it sent "
                "meanwhile is lost."
            )
            if channel != "iopub":
                text += " A request waiting for its reply may get none: interrupt the kernel."
            self._tell_frontend(text + "\n", cell.header_dict)
        if channel == "iopub":
            self.idle_owed.update(self.pending)
            if self.last_replied is not None:
                self._publish_idle(self.last_replied.header_dict)

    def _tell_frontend(self, text: str, parent: dict[str, Any]) -> None:
        """``text`` on the frontend's stderr, under ``parent``."""
        self._publish("stream", {"name": "stderr", "text": text}, parent)

    def _publish_idle(self, parent: dict[str, Any]) -> None:
        self._publish("status", {"execution_state": "idle"}, parent)

    def _publish(self, msg_type: str, content: dict[str, Any], parent: dict[str, Any]) -> None:
        """A message of the proxy's own on the frontend's iopub, under ``parent``."""
        self.relay.send_to_frontend(
            "iopub",
            self.relay.frontend_signer.new_message(
                msg_type,
                content,
                idents=[f"kernel.sandbox.{msg_type}".encode()],
                parent_header=parent,
            ),
        )

    def _with_banner(self, message: WireMessage) -> WireMessage:
        assert self.sandbox is not None
        state = self.manager.read_state(self.sandbox.sandbox_id)
        return with_isolation_banner(message, self.sandbox, state)

    # -- the sandbox's life -------------------------------------------------------------------

    async def _watch(self, sandbox: Sandbox) -> None:
        beat = 0.0
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            try:
                info = await self.manager.get(self.owner, sandbox.sandbox_id)
                cause = None if info.alive else info.death_cause()
            except SandboxNotFoundError:
                cause = "its container was removed"
            except SandboxError as exc:
                log.warning("cannot check sandbox %s: %s", sandbox.sandbox_id, exc.message)
                continue
            if cause is not None:
                self._report_death(cause)
                return
            if not self._context_still_held():
                return
            beat += WATCH_SECONDS
            if beat >= HEARTBEAT_SECONDS:
                beat = 0.0
                self.manager.update_state(sandbox.sandbox_id, attached=now_iso())

    def _context_still_held(self) -> bool:
        """Keep this kernel's hold on its context visible; False (and the kernel stops) if
        another kernel took the context meanwhile.

        The hold is a lock on a file under the state directory. Once that file is removed (the
        directory cleaned while the kernel runs), the hold is invisible: the culler sees no
        kernel attached and may stop the sandbox under it, and another kernel can take the
        context. Asking the lock again each watch costs two stat calls while its file is in
        place; after a removal it takes a new file (process_lock.py)."""
        if self.lock is None:
            return True
        try:
            self.lock.acquire()
        except ContextBusyError as exc:
            log.error("this kernel lost its context: %s", exc.message)
            self._fail_running_cells("ContextBusy", exc.message)
            self._stop(1)  # the sandbox stays: the other kernel uses it
            return False
        return True

    def _report_death(self, cause: str) -> None:
        assert self.sandbox is not None
        log.error("sandbox %s stopped: %s", self.sandbox.sandbox_id, cause)
        self._fail_running_cells("SandboxDied", f"the sandbox running this kernel stopped: {cause}")
        self.remove_on_exit = True
        self._stop(1)

    def _fail_running_cells(self, ename: str, evalue: str) -> None:
        """Answer every execute_request still waiting for its reply with this error."""
        for request in list(self.pending.values()):
            fail_request(self.relay, request, ename, evalue)

    def _serve_unavailable(self, reason: str) -> None:
        serve_unavailable(self.relay, reason, self._stop)
        asyncio.get_running_loop().call_later(UNAVAILABLE_SECONDS, self._stop, 1)

    def _client_gone(self) -> None:
        """The process that started this kernel ended without shutting it down: end as
        ipykernel does, and as on SIGTERM (an unnamed kernel's sandbox goes with it)."""
        log.warning("the kernel's client (JPY_PARENT_PID) is gone: shutting down")
        if self.client is not None:  # readable from now on: once is enough
            asyncio.get_running_loop().remove_reader(self.client)
        if self.context is None and not self.restarting:
            self.remove_on_exit = True
        self._stop(0)

    def _terminated(self) -> None:
        if self.shutdown_held and not self.shutting_down:
            # jupyter_client's patience with a shutdown or restart this kernel could not relay
            # yet, its sandbox still starting. Do what was asked once it is up (a restart
            # keeps the sandbox); SIGKILL, if it comes first, leaves the sandbox as it is.
            log.info("terminated while starting: the shutdown asked before is carried out first")
            return
        # SIGTERM outside a restart: jupyter_client gave up waiting, or the server stops.
        if self.context is None and not self.restarting:
            self.remove_on_exit = True
        self._stop(0)

    def _stop(self, code: int) -> None:
        if not self.done.is_set():
            self.exit_code = code
            self.done.set()

    async def _close(self) -> None:
        try:
            if self.remove_on_exit and self.sandbox is not None:
                await self.manager.remove(self.owner, self.sandbox.sandbox_id)
                if self.lifeline is not None:
                    self.lifeline.release()  # nothing left for it to remove
        finally:
            await self.relay.close()
            if self.lock is not None:
                self.lock.release()
            await self.manager.close()

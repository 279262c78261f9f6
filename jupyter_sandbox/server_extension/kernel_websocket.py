"""Kernel WebSockets that send each message as it comes (TCP_NODELAY).

An execution answers with several small messages at once: ``status: busy``,
``execute_input``, then ``execute_reply`` and ``status: idle``. Jupyter Server leaves Nagle's
algorithm on for its kernel WebSockets, so each small write after the first waits until the
client acknowledges the one before, and the client, which has nothing to send, delays that
acknowledgement (Linux's delayed ACK timer): every cell's reply waited that long
(docs/explanation/performance.md, "Kernel start and execute through the gateway", has the
figures). Under the sandbox gateway a message crosses two such sockets, the gateway's and the
user server's.

:func:`sending_at_once` wraps the server's connection class (ZMQ channels on a server holding
kernels, or the gateway client's relay on a user server), so that every kernel's WebSocket,
Sandboxed Python's or not, sends without that wait; ``SandboxExtension.kernel_websocket_nodelay``
turns it off.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.services.kernels.connection.base import BaseKernelWebsocketConnection

SETTING = "kernel_websocket_connection_class"  # Jupyter Server's web app setting


def sending_at_once(
    connection_class: type[BaseKernelWebsocketConnection],
) -> type[BaseKernelWebsocketConnection]:
    """A subclass of ``connection_class`` whose WebSocket has TCP_NODELAY set once open."""
    if getattr(connection_class, "sends_at_once", False):
        return connection_class  # wrapped already (the extension loaded twice)

    class SendingAtOnce(connection_class):  # type: ignore[valid-type,misc]
        sends_at_once = True

        def connect(self) -> Any:
            # Called by the handler's open(), once the WebSocket exists.
            self.websocket_handler.set_nodelay(True)
            return super().connect()

    SendingAtOnce.__name__ = SendingAtOnce.__qualname__ = (
        f"{connection_class.__name__}SendingAtOnce"
    )
    return SendingAtOnce


def send_kernel_messages_at_once(web_app_settings: dict[str, Any]) -> None:
    """Make the web app's kernel WebSocket connections send at once (module docstring)."""
    current = web_app_settings.get(SETTING)
    if current is not None:
        web_app_settings[SETTING] = sending_at_once(current)

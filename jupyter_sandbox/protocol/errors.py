"""The one exception hierarchy of jupyter-sandbox.

Every error the core raises derives from :class:`SandboxError` and carries a stable ``code``
that programs (the REST handlers, the CLI, agent code) can switch on, and a message a person can
act on: it says what happened and what to do. Only the server extension's handlers turn these
into HTTP errors; the core never imports tornado.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

_Error = TypeVar("_Error", bound="SandboxError")


class SandboxError(Exception):
    """Root of every jupyter-sandbox error.

    ``code`` is stable across releases; ``http_status`` is the status a REST handler answers with.
    ``fields`` names the attributes a class adds (strings), which its JSON answer carries too, so
    that the REST client's error has them as the core's does (UnsafeArchiveError's member, rule).
    """

    code = "sandbox_error"
    http_status = 500
    fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @classmethod
    def from_message(cls: type[_Error], message: str) -> _Error:
        """An error of this class whose message is ``message`` as it is, whatever the class's
        constructor takes (UnsafeArchiveError's takes parts it composes the message of): for
        an error remade from its JSON answer or its pickle, whose message is already whole.
        The caller sets the class's ``fields``."""
        error = cls.__new__(cls)
        SandboxError.__init__(error, message)
        return error

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own reduce calls the class with its args, which fails for a constructor
        # that takes other arguments than the message; the instance's attributes (fields, a
        # code or http_status set on it, notes) are its state, restored as they are.
        return (type(self).from_message, (self.message,), self.__dict__)

    def to_dict(self) -> dict[str, str]:
        """The JSON body handlers and the CLI show for this error: code, message, fields."""
        answer = {"code": self.code, "message": self.message}
        answer.update({name: str(getattr(self, name)) for name in self.fields})
        return answer


class InvalidSettingError(SandboxError, ValueError):
    """A limit, runtime or other setting is out of range; nothing was started."""

    code = "invalid_setting"
    http_status = 400


class EngineUnavailableError(SandboxError):
    """No container engine answers, or it answered with something we cannot use."""

    code = "engine_unavailable"
    http_status = 503


class EngineTimeoutError(EngineUnavailableError):
    """An engine call did not finish within its time limit."""

    code = "engine_timeout"
    http_status = 504


class RuntimeUnavailableError(SandboxError):
    """The requested OCI runtime (runsc or runc) is not registered with the engine."""

    code = "runtime_unavailable"
    http_status = 503


class ImageNotFoundError(SandboxError):
    """The sandbox image is not present locally (there is no registry to pull from)."""

    code = "image_not_found"
    http_status = 400


class ImageBuildError(SandboxError):
    """Building the sandbox image failed."""

    code = "image_build_failed"


class KernelNotFoundError(SandboxError):
    """No kernel with that id (or kernelspec with that name) is the caller's, at the gateway
    (another user's kernel is 'not found', as an unknown id is)."""

    code = "kernel_not_found"
    http_status = 404


class SandboxNotFoundError(SandboxError):
    """No sandbox with that id belongs to the caller (another owner's sandbox is 'not found')."""

    code = "sandbox_not_found"
    http_status = 404


class SandboxDiedError(SandboxError):
    """The sandbox's container ended while something ran in it (OOM kill, kill, crash)."""

    code = "sandbox_died"
    http_status = 409


class SandboxStartError(SandboxError):
    """The container was created but its kernel never became ready; it has been cleaned up."""

    code = "sandbox_start_failed"
    http_status = 500


class SocketReplacedError(SandboxError):
    """A socket in the sandbox's directory (its kernel's, its egress tunnel's) was replaced by a
    symlink, a file...: the host does not connect where code in the sandbox points it (see
    socket_pin.py)."""

    code = "socket_replaced"
    http_status = 409

    @classmethod
    def at(cls, path: str, kind: str) -> SocketReplacedError:
        return cls(
            f"the sandbox's socket {path} is a {kind}, not a socket: code in the sandbox "
            "replaced it, and the host does not follow it. Remove that sandbox (shut its "
            "context's kernel down, or DELETE /api/sandboxes/<id>) and start a new one"
        )


class HostCapError(SandboxError):
    """A size cap could not be put on (or taken off) a sandbox's host directory (host/size_caps.py)."""

    code = "host_cap_failed"
    http_status = 500


class SandboxStartTimeoutError(SandboxStartError):
    """The container or its kernel did not become ready in time; it has been cleaned up."""

    code = "sandbox_start_timeout"
    http_status = 504


class QuotaExceededError(SandboxError):
    """Starting another sandbox would take the owner over one of their quotas; nothing started."""

    code = "quota_exceeded"
    http_status = 403


class SandboxConflictError(SandboxError):
    """The sandbox cannot do that now (e.g. another process's kernel is attached to it)."""

    code = "sandbox_conflict"
    http_status = 409

    @classmethod
    def of_status(
        cls, sandbox_id: str, status: str, fix: str | None = None
    ) -> SandboxConflictError:
        """The one wording of "the sandbox's status does not allow that", with what to do:
        whoever finds the status wrong (the manager before asking the engine, the engine
        refusing: engine.py) says the same. ``fix`` replaces the usual one."""
        if fix is None:
            # paused: frozen, thawed by a resume; any other status (created, restarting,
            # removing, exited, dead): its processes have ended or are ending.
            fix = "resume it first" if status == "paused" else "start a new one"
        return cls(f"sandbox {sandbox_id} is {status}: {fix}")


class InvalidRequestError(SandboxError):
    """A request body is not what the API takes (not JSON, unknown field, wrong type)."""

    code = "invalid_request"
    http_status = 400


class SandboxFileError(SandboxError):
    """A file operation in a sandbox (files.py) failed: the message says what and where."""

    code = "file_error"
    http_status = 400


class SandboxFileNotFoundError(SandboxFileError):
    """The sandbox has no file or directory at that path."""

    code = "file_not_found"
    http_status = 404


class SandboxFileExistsError(SandboxFileError):
    """Something is already where a directory was to be made or a path moved to (a move may
    overwrite it when asked); nothing was changed."""

    code = "file_exists"
    http_status = 409


class SandboxFileTypeError(SandboxFileError):
    """What is at the path is a directory where a file is needed, or a file where a directory
    is (a cwd, a parent, a move's target): the request is well formed, what the sandbox holds
    is in its way; nothing was changed."""

    code = "file_type"
    http_status = 409


class SandboxFilePermissionError(SandboxFileError):
    """The sandbox's user may not do that to that path (read-only, another user's): the
    sandbox's own permissions refuse it; nothing was changed."""

    code = "file_permission_denied"
    http_status = 403


class FileTooLargeError(SandboxFileError):
    """A file is larger than SandboxFiles.max_bytes; nothing was written or returned."""

    code = "file_too_large"
    http_status = 413


class RequestTooLargeError(InvalidRequestError):
    """A request's body is larger than its route takes; it was refused before it was read."""

    code = "request_too_large"
    http_status = 413


class ContextBusyError(SandboxError):
    """Another kernel process holds this context."""

    code = "context_busy"
    http_status = 409


class NetworkSetupError(SandboxError):
    """The forwarder or the host proxy of a sandbox could not be started."""

    code = "network_setup_failed"
    http_status = 500


class NetworkRequestNotFoundError(SandboxError):
    """The sandbox holds no egress request of that id waiting for a decision (network/asks.py):
    it was decided already, timed out, or never held."""

    code = "network_request_not_found"
    http_status = 404


class CredentialNotFoundError(SandboxError):
    """The owner has no credential of that name (sandbox/network/credentials.py)."""

    code = "credential_not_found"
    http_status = 404


class OutputTooLargeError(SandboxError):
    """A command's output exceeded what the host takes of it; the command was stopped."""

    code = "output_too_large"
    http_status = 413


class TooManyTerminalsError(SandboxError):
    """The sandbox already has as many terminals open as SandboxTerminals.max_per_sandbox
    allows (terminals.py); no shell was started."""

    code = "too_many_terminals"
    http_status = 429


class CommandNotFoundError(SandboxError):
    """The sandbox has no background command of that id (background.py)."""

    code = "command_not_found"
    http_status = 404


class TooManyCommandsError(SandboxError):
    """The sandbox keeps as many background commands as BackgroundCommands.max_per_sandbox
    allows (background.py); none was started."""

    code = "too_many_commands"
    http_status = 429


class TooManyWatchesError(SandboxError):
    """The owner has as many directory watches as SandboxFiles.max_watches_per_owner allows,
    or this server as many as SandboxFiles.max_watches (file_watch.py); none was started."""

    code = "too_many_watches"
    http_status = 429


class TooManyStreamsError(SandboxError):
    """The owner has as many event streams open (streamed commands and code runs, followed
    output, directory watches) as SandboxExtension.max_event_streams_per_owner allows, or this
    server as many as SandboxExtension.max_event_streams; nothing was started."""

    code = "too_many_streams"
    http_status = 429


class TooManyKernelsError(SandboxError):
    """The hub user has as many kernels on the gateway as SandboxGateway.max_kernels_per_user
    allows, or the gateway as many as SandboxGateway.max_kernels; none was started."""

    code = "too_many_kernels"
    http_status = 429


class HostFilesTimeoutError(SandboxError):
    """A look at the host's files (a kernel's working directory on the gateway) did not end in
    time: a mount that does not answer; nothing was started."""

    code = "host_files_timeout"
    http_status = 504


class ProcessNotFoundError(SandboxError):
    """The engine no longer knows a process SandboxBackend.spawn started: it ended a while ago
    (Docker forgets an ended exec within minutes), or the engine restarted since."""

    code = "process_not_found"
    http_status = 404


class PortNotListeningError(SandboxError):
    """Nothing in the sandbox listens on the port asked for (ports.py): start the server first,
    bound to 127.0.0.1 or 0.0.0.0 inside the sandbox."""

    code = "port_not_listening"
    http_status = 502


class PortOpenerError(SandboxError):
    """The program that joins the host to the sandbox's ports could not start or answer."""

    code = "port_opener_failed"
    http_status = 502

"""What the host tells of a background command (background.py): the command, and a piece of its
output. Plain values, as the REST handlers, the CLI and the Python API return them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class BackgroundCommand:
    """One background command: its id, argv, working directory, start (ISO 8601, UTC),
    whether it runs, and its exit status once it has ended."""

    command_id: str
    argv: list[str]
    cwd: str
    started: str
    running: bool
    exit_code: int | None  # None while it runs, or if how it ended is unknown

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.command_id,
            "command": self.argv,
            "cwd": self.cwd,
            "started": self.started,
            "running": self.running,
            "exit_code": self.exit_code,
        }


@dataclass(frozen=True)
class CommandOutput:
    """A piece of a background command's output: ``text`` (UTF-8, undecodable bytes replaced)
    from byte ``offset`` of its log, where the next read starts (``next_offset``), the log's
    size now, and whether the command still runs (more may come)."""

    text: str
    offset: int
    next_offset: int
    size: int
    running: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

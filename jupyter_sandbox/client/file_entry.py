"""An entry of a sandbox's filesystem as the files API describes it: what ``sandbox.files``
(files.py) answers and what a watched directory's changes carry (file_watch.py), in a module of
its own so that both import it and neither the other's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FileEntry:
    """A file, directory, symlink or other entry: ``path`` is absolute in the sandbox,
    ``type`` one of file, directory, symlink, other; ``size`` in bytes; ``mode`` the
    permission bits in octal ("0o644"); ``modified`` an ISO 8601 time in UTC."""

    name: str
    path: str
    type: str
    size: int
    mode: str
    modified: str

    @classmethod
    def from_answer(cls, answer: dict[str, Any]) -> FileEntry:
        return cls(
            name=answer["name"],
            path=answer["path"],
            type=answer["type"],
            size=int(answer["size"]),
            mode=answer["mode"],
            modified=answer["modified"],
        )

    @property
    def is_dir(self) -> bool:
        return self.type == "directory"

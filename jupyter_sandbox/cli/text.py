"""Text a sandbox chose, made safe to print on the user's terminal.

File names, process command lines, a command's argv, error messages naming a path: whatever
the sandbox's code could have written may hold terminal control sequences (ESC [ 2 J clears
the screen, ESC ] 0 ; ... BEL retitles the window, OSC 52 writes the clipboard, a bare CR
overwrites the line already shown). ``jupyter sandbox``'s verbs print such text through
:func:`shown`, which escapes every character that is not printable, so what reaches the
terminal is only ever text. A command's or a cell's own output is the exception: it is the
program's output, passed on byte for byte, as ``docker exec`` and ``python`` pass it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# A table's column: its title, and the format spec of its cells ("12": padded to 12, ">12":
# right-aligned; "" for the last, unpadded).
Column = tuple[str, str]


def shown(text: str) -> str:
    """``text`` on one line with its control characters escaped (``\\x1b``, ``\\n``,
    ``\\u202e``...): C0 and C1 controls, DEL, line and paragraph separators and the other
    characters Python does not count printable (bidirectional overrides among them). A
    backslash is escaped too, so that an escape shown cannot be confused with a name that
    holds those characters literally."""
    return "".join(
        char if char.isprintable() and char != "\\" else char.encode("unicode_escape").decode()
        for char in text
    )


def shown_lines(text: str) -> str:
    """``text`` as :func:`shown` has it, but for its line breaks, which stay: a message of
    several lines (an image build's tail of pip's output) is still printed as lines."""
    return "\n".join(shown(line) for line in text.split("\n"))


def print_table(columns: Sequence[Column], rows: Iterable[Sequence[object]]) -> None:
    """The titles, then each row as it comes, its cells two spaces apart (the verbs that list
    things: sandboxes, snapshots, ports, background commands). Cells that hold what a sandbox
    chose are passed in escaped already (:func:`shown`)."""
    print("  ".join(format(title, spec) for title, spec in columns))
    for row in rows:
        print("  ".join(format(cell, spec) for cell, (_, spec) in zip(row, columns, strict=True)))

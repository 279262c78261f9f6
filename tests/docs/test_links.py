"""Every relative link of the README and the documentation resolves inside the repository.

The site's build (``make docs``, tests/docs/test_site.py) checks the links between its own
pages; this checks the Markdown files as GitHub and an editor show them, the README above all,
whose links are not part of the site: a link to a file that is missing, or to a heading that is
not there, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The Markdown a reader of the repository opens: the README, the project's own pages, the site's.
MARKDOWN = sorted(
    [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "CONTRIBUTING.md"]
    + [path for path in (REPO / "docs").rglob("*.md") if "_build" not in path.parts]
)

# [text](target) and ![alt](target); the target ends at the first space or ")".
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, where a bracket is code, not a link."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def relative_links(path: Path) -> list[str]:
    """The links of ``path`` that point into the repository (not URLs, not mail)."""
    found = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            found.append(target)
    return found


def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings, as GitHub and MyST (myst_heading_anchors) make them:
    lower case, punctuation dropped, spaces as hyphens."""
    made = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            title = re.sub(r"[`*_]", "", match.group(2)).strip().lower()
            made.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return made


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """What is wrong with each relative link of ``path``, whose links must stay in ``root``."""
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif root not in linked.parents and linked != root:
            broken.append(f"{target}: outside the repository")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: {linked.name} has no heading with the anchor #{anchor}")
    return broken


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path: Path) -> None:
    broken = broken_links(path)
    assert not broken, f"{path.relative_to(REPO)} links to what is not there:\n" + "\n".join(broken)


def test_the_check_finds_a_missing_file_a_missing_anchor_and_a_way_out(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A `Heading`, here\n")
    (tmp_path.parent / "outside.md").write_text("# Outside\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [anchor ok](there.md#a-heading-here) [gone](missing.md)\n"
        "![bad anchor](there.md#nowhere) [out](../outside.md)\n"
        "```\n[in code](not-a-link.md)\n```\n[web](https://example.org/x)\n"
    )
    assert relative_links(page) == [
        "there.md",
        "there.md#a-heading-here",
        "missing.md",
        "there.md#nowhere",
        "../outside.md",
    ]
    assert broken_links(page, root=tmp_path) == [
        "missing.md: no such file",
        "there.md#nowhere: there.md has no heading with the anchor #nowhere",
        "../outside.md: outside the repository",
    ]


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200, "the README is a page: move detail into docs/"
    first_block = readme.split("```", 2)[1]
    assert "make lab" in first_block
    assert "make test" in first_block

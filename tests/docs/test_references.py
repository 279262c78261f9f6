"""Every reference the code and the documentation make to the repository resolves inside it.

tests/docs/test_links.py checks Markdown links; this checks the references written as text,
which nothing else would catch when a module moves or is renamed: a path such as
``jupyter_sandbox/sandbox/backends/docker/exec.py`` or ``sandbox/host/size_caps.py`` (read
from the repository's root, from the package, from the core, from ``tests/`` or from the
mentioning file's folder), a bare module file name such as ``exec_start.py``, a dotted name such
as ``jupyter_sandbox.sandbox.network`` or ``jupyter_sandbox.sandbox.manager.SandboxManager``,
and a cited section of the design page (``docs/explanation/design.md, "Layout"``). They are read
in the Markdown of the repository and its site (not the changelog, which names what was) and in
the comments and string literals of every Python file the repository tracks.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from functools import cache
from pathlib import Path

import pytest

from tests.docs.test_links import REPO, anchors
from tests.python_ast import parse

# File names written in the code and the docs that are not the repository's own files, each
# for a reason: the user's configuration files, the examples' and the tests' made-up programs,
# files made at run time in a sandbox, and modules of the standard library a test shadows.
NOT_OURS = {
    "jupyter_sandbox_config.py": "the user's configuration file",
    "jupyter_server_config.py": "jupyter_server's configuration file",
    "train.py": "a user's program in an example",
    "script.py": "a user's program in an example",
    "job.py": "a user's program in an example",
    "json.py": "a module of the standard library that a sandbox's file shadows in a test",
    "socket.py": "a module of the standard library that a sandbox's file could shadow",
    "argv_probe.py": "a program a test writes",
    "planted.py": "a file an attack tries to plant",
    "attestation-probe.py": "the probe's name in a sandbox's io directory, staged at run time",
    "attestation-probe-unknown-to-the-image.py": "a name a test makes up",
}

# This file names missing files on purpose, in its own test of the check.
SELF = "tests/docs/test_references.py"
# A path into the repository: folders, then a file with an extension the repository uses.
PATH = re.compile(
    r"(?<![\w./<>{}$-])((?:[A-Za-z_][\w.-]*/)+[\w*-][\w.*-]*\.(?:py|md|yaml|yml|toml|sh|ts))\b"
)
BARE_MODULE = re.compile(r"(?<![\w./<>{}$*-])([A-Za-z_][\w-]*\.py)\b")
DOTTED = re.compile(r"(?<![\w./-])(jupyter_sandbox(?:\.[A-Za-z_]\w*)+)")
# ``Class.member`` where Class is a class of the package (a ``*`` after the member: a prefix).
CLASS_MEMBER = re.compile(r"(?<![\w.])([A-Z][A-Za-z0-9]+)\.([A-Za-z_]\w*)(\*?)")
# Class names the docs use for another project's class, and placeholders of an example.
OTHER_CLASSES = {"Sandbox": "the E2B SDK's class, in the E2B how-to and its benchmark"}
PLACEHOLDERS = {"SandboxSettings.x": "``--SandboxSettings.x=y``: any setting on a command line"}
DESIGN_SECTION = re.compile(r"explanation/design\.md\)?,\s+\"([^\"]+)\"")
# Where a relative path may be read from, besides the mentioning file's own folder.
ROOTS = ("", "jupyter_sandbox/", "jupyter_sandbox/sandbox/", "tests/")


@cache
def tracked_files() -> frozenset[str]:
    """The repository's files: tracked, or new and not ignored (as ``git add -A`` takes them)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return frozenset(name for name in listed if (REPO / name).is_file())


@cache
def file_names() -> frozenset[str]:
    return frozenset(Path(name).name for name in tracked_files())


@cache
def modules() -> dict[str, Path]:
    """The package's modules by dotted name, a package by its own name."""
    found = {}
    for name in tracked_files():
        if name.startswith("jupyter_sandbox/") and name.endswith(".py"):
            parts = list(Path(name).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = REPO / name
    return found


@cache
def names_defined(path: Path) -> frozenset[str]:
    return frozenset(names_defined_in(parse(path.read_text(encoding="utf-8"))))


def names_defined_in(tree: ast.AST) -> set[str]:
    """Every name ``tree`` binds anywhere: functions, classes, assignments, imports, attributes
    assigned, arguments. Generous on purpose: a reference fails only when the name is nowhere."""
    made: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            made.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            made.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            made.add(node.attr)
        elif isinstance(node, ast.alias):
            made.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            made.add(node.arg)
    return frozenset(made)


@cache
def class_members() -> dict[str, frozenset[str]]:
    """Every class of the package by name, with what its body and methods bind and what its
    bases in the package bind (a name two modules use for a class gets the union)."""
    own: dict[str, set[str]] = {}
    bases: dict[str, set[str]] = {}
    for path in modules().values():
        for node in ast.walk(parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                own.setdefault(node.name, set()).update(names_defined_in(node))
                bases.setdefault(node.name, set()).update(
                    base.id if isinstance(base, ast.Name) else base.attr
                    for base in node.bases
                    if isinstance(base, (ast.Name, ast.Attribute))
                )

    def inherited(name: str, seen: frozenset[str]) -> set[str]:
        found = set(own.get(name, ()))
        for base in bases.get(name, set()) - seen:
            found |= inherited(base, seen | {name})
        return found

    return {name: frozenset(inherited(name, frozenset())) for name in own}


def python_text(source: str) -> str:
    """What a Python file says about the repository, one piece a line: its comments, its
    docstrings (any string standing as a statement) and its ``help=`` texts. Other string
    literals are data (a path inside a sandbox, a file a test writes), not references."""
    kept = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            kept.append(str(node.value.value))
        elif isinstance(node, ast.keyword) and node.arg == "help":
            kept += [
                part.value
                for part in ast.walk(node.value)
                if isinstance(part, ast.Constant) and isinstance(part.value, str)
            ]
    return "\n".join(kept)


def referring_files() -> list[str]:
    return sorted(
        name
        for name in tracked_files()
        if (name.endswith(".md") and name != "CHANGELOG.md")
        or (name.endswith(".py") and name != SELF)
    )


def text_of(name: str) -> str:
    path = REPO / name
    text = path.read_text(encoding="utf-8")
    return python_text(text) if name.endswith(".py") else text


def path_resolves(mention: str, mentioned_in: str) -> bool:
    files = tracked_files()
    folder = str(Path(mentioned_in).parent)
    for root in (*ROOTS, f"{folder}/"):
        candidate = f"{root}{mention}"
        if "*" in candidate:  # a wildcard stays within one folder, as in a shell
            pattern = re.compile(
                ".*".join(map(re.escape, candidate.split("*"))).replace(".*", "[^/]*")
            )
            if any(pattern.fullmatch(name) for name in files):
                return True
        elif str(Path(candidate)) in files:
            return True
    return False


def dotted_resolves(mention: str) -> bool:
    """``jupyter_sandbox.a.b`` names a module, or a name the longest such module binds."""
    parts = mention.split(".")
    for cut in range(len(parts), 0, -1):
        module = modules().get(".".join(parts[:cut]))
        if module is not None:
            return cut == len(parts) or parts[cut] in names_defined(module)
    return False


def broken_references(name: str, text: str) -> list[str]:
    broken = []
    for mention in sorted(set(PATH.findall(text))):
        if not path_resolves(mention, name):
            broken.append(f"{mention}: no such file in the repository")
    for mention in sorted(set(BARE_MODULE.findall(text))):
        if mention not in file_names() and mention not in NOT_OURS:
            broken.append(f"{mention}: no file of the repository has this name")
    for mention in sorted(set(DOTTED.findall(text))):
        if not dotted_resolves(mention):
            broken.append(f"{mention}: no such module or name in the package")
    for cls, member, wildcard in sorted(set(CLASS_MEMBER.findall(text))):
        members = class_members().get(cls)
        if members is None or cls in OTHER_CLASSES or f"{cls}.{member}" in PLACEHOLDERS:
            continue
        if not (any(m.startswith(member) for m in members) if wildcard else member in members):
            broken.append(f"{cls}.{member}{wildcard}: {cls} has no such member")
    design_sections = anchors(REPO / "docs" / "explanation" / "design.md")
    for section in sorted(set(DESIGN_SECTION.findall(text))):
        if anchors_of_title(section) not in design_sections:
            broken.append(f'design.md, "{section}": no such section')
    return broken


def anchors_of_title(title: str) -> str:
    lowered = re.sub(r"[`*_]", "", title).strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", lowered))


@pytest.mark.parametrize("name", referring_files())
def test_every_reference_resolves(name: str) -> None:
    broken = broken_references(name, text_of(name))
    assert not broken, f"{name} refers to what is not there:\n" + "\n".join(broken)


def test_the_check_finds_stale_paths_names_modules_and_sections() -> None:
    text = (
        "see jupyter_sandbox/sandbox/manager.py, sandbox/host/size_caps.py and "
        "jupyter_sandbox/cli*.py; exec_start.py and docker_exec.py; train.py; "
        "jupyter_sandbox.sandbox.manager.SandboxManager, jupyter_sandbox.sandbox.nowhere, "
        "jupyter_sandbox.sandbox.manager.NoSuchName; SandboxManager.from_config, "
        "SandboxManager.no_such_method, SandboxSettings.max_*, SandboxSettings.nothing_*; "
        '(docs/explanation/design.md, "Layout") (docs/explanation/design.md, "Elsewhere")'
    )
    assert broken_references("jupyter_sandbox/example.py", text) == [
        "jupyter_sandbox/cli*.py: no such file in the repository",
        "docker_exec.py: no file of the repository has this name",
        "jupyter_sandbox.sandbox.manager.NoSuchName: no such module or name in the package",
        "jupyter_sandbox.sandbox.nowhere: no such module or name in the package",
        "SandboxManager.no_such_method: SandboxManager has no such member",
        "SandboxSettings.nothing_*: SandboxSettings has no such member",
        'design.md, "Elsewhere": no such section',
    ]


def test_python_text_keeps_comments_docstrings_and_help_not_code_or_data() -> None:
    source = (
        "import old_module  # see new.py\n"
        'x = "a/data.py"\n'
        'def f():\n    """Doc."""\n'
        'T = Int(1, help="see " "the.py").tag(config=True)\n'
    )
    assert python_text(source).splitlines() == ["# see new.py", "Doc.", "see the.py"]

"""Import cycles among the package's modules may only go down (issue 32: the goal is none).

The graph is read from source (ast) and counts every import of a ``jupyter_sandbox`` module,
those under ``if TYPE_CHECKING:`` and inside functions too: a cycle of names is a cycle of
understanding, even when it costs nothing at import. This is the measure the project's checks
use. A cycle is a strongly connected component of more than one module; both counts are
ratchets: lower them when you break a cycle, never raise them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.python_ast import parse

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "jupyter_sandbox"
# None left. Broken: the server extension's app and handlers with the E2B API's routes
# (server_extension/base.py), attestation.probe <-> probe_boundaries, kernel.zygote <->
# zygote_child, client.files <-> client.file_watch, and the core's manager with its operations,
# lifecycle, snapshots and attestation (they name it by sandbox/sandbox_access.py's protocols).
CYCLES = 0
MODULES_IN_CYCLES = 0


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(tree: ast.Module) -> list[str]:
    """Every name an import statement anywhere in the module names (absolute imports only:
    the project forbids relative ones), with ``from M import N`` giving both M and M.N."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend([node.module] + [f"{node.module}.{a.name}" for a in node.names])
    return found


def import_graph() -> dict[str, set[str]]:
    paths = [p for p in PACKAGE.rglob("*.py") if "labextension" not in p.parts]
    modules = {module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in imported_names(parse(path.read_text(encoding="utf-8"))):
            while imported and imported not in modules:  # a class or function: its module
                imported = imported.rpartition(".")[0]
            # A module importing its own package (or a parent) is not a cycle of design.
            if imported and imported != name and not name.startswith(imported + "."):
                targets.add(imported)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycles_finds_a_cycle_and_not_a_chain() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_import_cycles_do_not_grow() -> None:
    found = cycles(import_graph())
    described = "\n".join(f"{len(c)} modules: {', '.join(c)}" for c in found)
    assert len(found) <= CYCLES, f"{len(found)} import cycles (at most {CYCLES}):\n{described}"
    in_cycles = sum(len(c) for c in found)
    assert in_cycles <= MODULES_IN_CYCLES, (
        f"{in_cycles} modules in import cycles (at most {MODULES_IN_CYCLES}):\n{described}"
    )

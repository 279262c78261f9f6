"""The documentation site builds with no warning, and its generated references are complete.

Builds the site as ``make docs`` does (Sphinx with -W and nitpicky references, from the
virtualenv ``make docs`` makes; ``make test`` makes it too), into a temporary directory, then
checks the pages against the sources they are generated from, read here independently of the
generator: every path and method of openapi.yaml in the REST reference, every ``config=True``
trait of the package's code (found by reading the source, not by importing it) in the
configuration references, and every verb of the command line in its reference.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.python_ast import parse

REPO = Path(__file__).resolve().parents[2]
SPHINX_BUILD = REPO / ".venv-docs" / "bin" / "sphinx-build"
OPENAPI = REPO / "jupyter_sandbox" / "server_extension" / "openapi.yaml"
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}
BUILD_TIMEOUT = 300


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SPHINX_BUILD.exists():
        pytest.fail(
            f"{SPHINX_BUILD.relative_to(REPO)} is missing: 'make docs' (or 'make test') makes "
            "the documentation's virtualenv",
            pytrace=False,
        )
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [str(SPHINX_BUILD), "-E", "-W", "--keep-going", "-n", "-q", "-b", "html", "docs", out],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"the site's build failed:\n{done.stderr[-6000:]}"
    return out


def html_ids(page: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))


def config_traits_in_source() -> dict[tuple[str, str], set[str]]:
    """(class, trait) -> the classes it is configured under, for every ``name =
    Trait(..., config=True)`` (or ``.tag(config=True)``) in a class body of the package: the
    class itself and every class of the package that derives from it (a mixin's traits are
    configured under the classes that use it)."""
    bases: dict[str, set[str]] = {}
    defined: list[tuple[str, str]] = []
    for path in sorted((REPO / "jupyter_sandbox").rglob("*.py")):
        tree = parse(path.read_text(encoding="utf-8"))
        for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
            bases.setdefault(cls.name, set()).update(
                base.id if isinstance(base, ast.Name) else base.attr
                for base in cls.bases
                if isinstance(base, (ast.Name, ast.Attribute))
            )
            for statement in cls.body:
                if not isinstance(statement, (ast.Assign, ast.AnnAssign)):
                    continue
                targets = (
                    statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                )
                if statement.value is None or not any(
                    isinstance(call, ast.Call)
                    and any(
                        k.arg == "config" and isinstance(k.value, ast.Constant) and k.value.value
                        for k in call.keywords
                    )
                    for call in ast.walk(statement.value)
                ):
                    continue
                defined.extend((cls.name, t.id) for t in targets if isinstance(t, ast.Name))

    def configured_under(name: str) -> set[str]:
        under = {name}
        for other, its_bases in bases.items():
            if name in its_bases:
                under |= configured_under(other)
        return under

    return {(cls, trait): configured_under(cls) for cls, trait in defined}


def confval_id(cls: str, trait: str) -> str:
    return f"confval-{cls.lower()}-{trait.lower().replace('_', '-')}"


def test_the_rest_reference_has_every_path_and_method(site: Path) -> None:
    spec = yaml.safe_load(OPENAPI.read_text(encoding="utf-8"))
    ids = html_ids(site / "reference" / "rest.html")
    expected = {
        f"{method}-" + re.sub(r"[{}]", "", path).replace("/", "-")
        for path, operations in spec["paths"].items()
        for method in operations
        if method in HTTP_METHODS
    }
    assert len(expected) > 30
    assert sorted(expected - ids) == []


def test_the_configuration_references_have_every_config_trait(site: Path) -> None:
    ids = html_ids(site / "reference" / "config.html") | html_ids(
        site / "reference" / "cli-options.html"
    )
    traits = config_traits_in_source()
    # The ones the issue names, so that the reading of the source cannot come up empty.
    for named in ("SandboxSettings.image", "WarmPool.size", "NetworkSettings.default_policy"):
        cls, trait = named.split(".")
        assert (cls, trait) in traits
    missing = [
        f"{cls}.{trait}"
        for (cls, trait), classes in sorted(traits.items())
        if not any(confval_id(under, trait) in ids for under in classes)
    ]
    assert missing == []


def test_the_cli_reference_has_every_verb(site: Path) -> None:
    text = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    from jupyter_sandbox.cli.main import SandboxApp

    for verb, (app, _description) in SandboxApp.subcommands.items():
        assert f"$ jupyter sandbox {verb} --help" in text
        for sub_verb in getattr(app, "verbs", {}):
            assert f"$ jupyter sandbox {verb} {sub_verb} --help" in text


def test_the_client_reference_documents_everything_the_client_exports(site: Path) -> None:
    ids = html_ids(site / "reference" / "client.html")
    from jupyter_sandbox import client

    assert "SandboxClient" in client.__all__
    assert sorted(n for n in client.__all__ if f"jupyter_sandbox.client.{n}" not in ids) == []
    assert "jupyter_sandbox.client.SandboxClient.create" in ids

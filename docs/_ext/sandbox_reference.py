"""References generated from the code at build time, so that they cannot drift from it.

Three directives, each used once in docs/reference/:

``sandbox-config``
    Every ``config=True`` trait of every configurable class in ``jupyter_sandbox``, with its
    help, type and default, read off the classes (as jupyter_server's docs generate theirs).
    The classes are found as subclasses once the front ends are imported, so a trait or a class
    added anywhere they use appears without an edit here; an import that fails fails the build.
``sandbox-cli``
    ``jupyter sandbox --help`` and every verb's ``--help``, walked from the command's own
    subcommand table and printed by a child process (the real command line, not this one).
``sandbox-environment``
    The kernel's environment variables: every ``JUPYTER_SANDBOX_*`` name the package's code
    mentions, each described in ``ENVIRONMENT`` below. A name in the code without a description
    here (or a description of a name the code no longer has) fails the build, naming it.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "jupyter_sandbox"

# Where the command-line verbs live: their traits are listed apart from the settings, since they
# are the verbs' options (``--ListApp.owner``) rather than settings of a deployment.
CLI_MODULE_PREFIX = f"{PACKAGE}.cli"

# What a user runs: the command line, the server extension and the kernel. Every configurable
# class that any of them uses is imported by one of these.
ENTRY_MODULES = (
    f"{PACKAGE}.cli",
    f"{PACKAGE}.server_extension",
    f"{PACKAGE}.kernel.proxy_kernel",
    f"{PACKAGE}.gateway.app",
)


def _paragraphs(text: str) -> list[nodes.Node]:
    """``text`` as paragraphs (blank lines split them), never parsed as markup: a trait's help
    is plain text, and reading it as reStructuredText would turn a ``*`` or a ``_`` into markup
    (or a warning, which fails the build). Only double backquotes are read, as code."""
    text = textwrap.dedent(text).strip()
    if not text:
        return []
    paragraphs: list[nodes.Node] = []
    for block in re.split(r"\n\s*\n", text):
        if not block.strip():
            continue
        paragraph = nodes.paragraph()
        # ``name``, as docstrings write code, is shown as code; everything else as it is.
        for index, part in enumerate(re.split(r"``(.+?)``", " ".join(block.split()))):
            paragraph += nodes.literal(text=part) if index % 2 else nodes.Text(part)
        paragraphs.append(paragraph)
    return paragraphs


def _section(directive: SphinxDirective, title: str, anchor: str) -> nodes.section:
    section = nodes.section(ids=[nodes.make_id(anchor)])
    section += nodes.title(text=title)
    return section


# --- the configuration reference ------------------------------------------------------------


def configurable_classes() -> list[type]:
    """Every class of the package that has a ``config=True`` trait of its own, by name: those
    the front ends load (the command line, the server extension, the kernel), found as
    subclasses of Configurable once those are imported. Walking every module instead would run
    scripts that the package carries for the sandbox (attestation/probe.py) and that are never
    imported on the host."""
    from traitlets.config import Configurable

    for module in ENTRY_MODULES:
        importlib.import_module(module)
    found: dict[str, type] = {}
    pending = [Configurable]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith(f"{PACKAGE}.") and own_config_traits(cls):
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[name] for name in sorted(found, key=lambda n: (n.rsplit(".", 1)[-1], n))]


def own_config_traits(cls: Any) -> dict[str, Any]:
    """The ``config=True`` traits ``cls`` defines, or takes from a mixin that is not itself
    configurable (cli/sandboxes.py's CommandOptions gives ExecApp ``--ExecApp.env``): those are
    configured under this class's name, so they are listed here."""
    from traitlets.config import Configurable

    traits: dict[str, Any] = cls.class_traits(config=True)
    own = {}
    for name, trait in traits.items():
        definer = next(c for c in cls.__mro__ if name in vars(c))
        if definer is cls or not issubclass(definer, Configurable):
            own[name] = trait
    return own


def trait_type(trait: Any) -> str:
    """The trait's type as traitlets names it, with an Enum's choices."""
    name = type(trait).__name__
    values = getattr(trait, "values", None)
    if values is not None:
        return f"{name}: any of {', '.join(repr(v) for v in values)}"
    return name


class ConfigReference(SphinxDirective):
    """A section per configurable class, a ``confval`` entry per trait (linkable as
    ``{confval}`SandboxSettings.image```)."""

    has_content = False
    option_spec = {"commands": directives.flag}

    def run(self) -> list[nodes.Node]:
        want_commands = "commands" in self.options
        result: list[nodes.Node] = []
        for cls in configurable_classes():
            if cls.__module__.startswith(CLI_MODULE_PREFIX) != want_commands:
                continue
            result.append(self.class_section(cls))
        return result

    def class_section(self, cls: type) -> nodes.section:
        name = cls.__name__
        section = _section(self, name, f"config-{cls.__module__}-{name}")
        intro = nodes.paragraph()
        intro += nodes.Text("Defined in ")
        intro += nodes.literal(text=f"{cls.__module__}.{cls.__qualname__}")
        intro += nodes.Text(".")
        section += intro
        section.extend(_paragraphs((cls.__doc__ or "").split("\n\n")[0]))
        traits = own_config_traits(cls)
        for trait_name in sorted(traits):
            section += self.trait_entry(name, trait_name, traits[trait_name])
        return section

    def trait_entry(self, class_name: str, trait_name: str, trait: Any) -> nodes.Node:
        # A std-domain confval, as Sphinx's own directive makes it (so that
        # {confval}`SandboxSettings.image` links here), built from nodes so that no help text
        # is parsed as markup.
        full_name = f"{class_name}.{trait_name}"
        node_id = nodes.make_id(f"confval-{full_name}")
        self.env.domains.standard_domain.note_object(
            "confval", full_name, node_id, location=self.get_location()
        )
        entry = addnodes.desc(domain="std", objtype="confval", desctype="confval", no_index=False)
        signature = addnodes.desc_signature(ids=[node_id])
        signature += addnodes.desc_name(text=full_name)
        entry += signature
        body = addnodes.desc_content()
        facts = nodes.field_list()
        for label, value in (
            ("Type", trait_type(trait)),
            ("Default", trait.default_value_repr()),
        ):
            field = nodes.field()
            field += nodes.field_name(text=label)
            field_body = nodes.field_body()
            paragraph = nodes.paragraph()
            paragraph += nodes.literal(text=value)
            field_body += paragraph
            field += field_body
            facts += field
        body += facts
        body.extend(_paragraphs(trait.help or "(no help text)"))
        entry += body
        return entry


# --- the command line -----------------------------------------------------------------------

# Run in a child process: prints {"verb path": "its --help"} as JSON for the whole tree.
# traitlets' --help is print_help() then print_examples() (Application.parse_command_line).
_HELP_WALKER = """
import contextlib, io, json, sys
from traitlets.utils.importstring import import_item
from jupyter_sandbox.cli.main import SandboxApp

def walk(path, app_class, out):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        app = app_class()
        app.print_help()
        app.print_examples()
    out[" ".join(path)] = buffer.getvalue()
    for verb, (sub, _description) in app.subcommands.items():
        walk([*path, verb], import_item(sub) if isinstance(sub, str) else sub, out)

out = {}
walk([], SandboxApp, out)
json.dump(out, sys.stdout)
"""


def cli_help() -> dict[str, str]:
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _HELP_WALKER],
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"printing the command line's help failed:\n{done.stderr}")
    helps: dict[str, str] = json.loads(done.stdout)
    return helps


class CliReference(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        result: list[nodes.Node] = []
        for path, text in cli_help().items():
            command = " ".join(["jupyter sandbox", path]).strip()
            section = _section(self, command, f"cli-{path or 'jupyter-sandbox'}")
            block = nodes.literal_block(text=f"$ {command} --help\n{text.rstrip()}")
            block["language"] = "text"
            section += block
            result.append(section)
        return result


# --- the kernel's environment ---------------------------------------------------------------

# name -> (who sets it, what it means). "user": read by the kernel from its environment (a
# kernelspec's env, agent code, the shell); "internal": set by jupyter-sandbox itself.
ENVIRONMENT: dict[str, tuple[str, str]] = {
    "JUPYTER_SANDBOX_CONTEXT": (
        "user",
        "Names a live interpreter: the same owner and context id get the same sandbox and "
        "variables back, across kernel processes. Without it the sandbox is removed when the "
        "kernel shuts down. One kernel holds a context at a time; a second one is told which "
        "context is busy.",
    ),
    "JUPYTER_SANDBOX_RUNTIME": (
        "user",
        "runsc (gVisor, the default: SandboxSettings.runtime) or runc; anything else is "
        "refused with a message.",
    ),
    "JUPYTER_SANDBOX_OWNER": (
        "user",
        "The owner of the kernel's sandboxes. Default: JUPYTERHUB_USER in a JupyterHub "
        "single-user server, else the OS user. Owners never share contexts.",
    ),
    "JUPYTER_SANDBOX_IMAGE": (
        "user",
        "The sandbox image (default SandboxSettings.image); it must match "
        "SandboxSettings.allowed_images. A named context keeps the image it was made with.",
    ),
    "JUPYTER_SANDBOX_LIMITS": (
        "user",
        "Limits of the sandbox, e.g. memory=8g,cpus=2 (names: memory, cpus, pids, nofile, "
        "tmp_size, workspace_size), checked against the owner's quotas (SandboxQuotas). A named "
        "context keeps the limits it was made with.",
    ),
    "JUPYTER_SANDBOX_NETWORK": (
        "user",
        "The sandbox's network policy: none, open, or a comma-separated allowlist of domain "
        "patterns (e.g. pypi.org,files.pythonhosted.org); the item ask among them (ask, "
        "ask,pypi.org) holds a request to any other host until the owner decides it. Default: "
        "NetworkSettings.default_policy.",
    ),
    "JUPYTER_SANDBOX_LOG_LEVEL": (
        "user",
        "How much the proxy kernel logs to its stderr: INFO (default), DEBUG, WARNING, ERROR, "
        "or TRACE (a line per message relayed: channel, direction, type and ids, never "
        "content).",
    ),
    "JUPYTER_SANDBOX_PURPOSE": (
        "user",
        "A free-form label stored with the sandbox (shown in listings; the tests name "
        "themselves with it).",
    ),
    "JUPYTER_SANDBOX_WORKSPACE_ROOT": (
        "internal",
        "Set by the sandbox gateway for each kernel: the user's root (a real path). The "
        "kernel's directory must lie in it; it is opened from there without following links "
        "and the engine mounts what was opened (sandbox/host/workspace_pin.py).",
    ),
    "JUPYTER_SANDBOX_EXEC": (
        "internal",
        "Set in the environment of every command run in a sandbox through the engine, as a "
        "mark by which a time limit or a closed terminal kills all that command started.",
    ),
    "JUPYTER_SANDBOX_EGRESS": (
        "internal",
        "Inside the sandbox: the egress forwarder's configuration, when the network policy "
        "allows any.",
    ),
    "JUPYTER_SANDBOX_ZYGOTE": (
        "internal",
        "Set by the server extension in the server's environment, which kernels inherit: the "
        "socket of its zygote, from which the kernel's launcher asks for a forked, "
        "pre-imported proxy kernel. Unset (no server), the launcher asks the headless warm "
        "pool's zygote in the default state directory, if one listens.",
    ),
}

_VARIABLE = re.compile(r"\bJUPYTER_SANDBOX_[A-Z][A-Z_]*[A-Z]\b")


def variables_in_code() -> dict[str, list[str]]:
    """Every JUPYTER_SANDBOX_* name in the package's and the launcher's code -> its files."""
    found: dict[str, list[str]] = {}
    roots = [REPO / PACKAGE, REPO / "kernelspec"]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for name in set(_VARIABLE.findall(path.read_text(encoding="utf-8"))):
                found.setdefault(name, []).append(str(path.relative_to(REPO)))
    return found


class EnvironmentReference(SphinxDirective):
    has_content = False
    option_spec = {"internal": directives.flag}

    def run(self) -> list[nodes.Node]:
        in_code = variables_in_code()
        for name in sorted(set(in_code) - set(ENVIRONMENT)):
            logger.warning(
                "%s is used in %s but not described: add it to ENVIRONMENT in %s",
                name,
                ", ".join(in_code[name]),
                Path(__file__).relative_to(REPO),
                location=self.get_location(),
            )
        for name in sorted(set(ENVIRONMENT) - set(in_code)):
            logger.warning(
                "%s is described in %s but no code uses it any more: remove it there",
                name,
                Path(__file__).relative_to(REPO),
                location=self.get_location(),
            )
        kind = "internal" if "internal" in self.options else "user"
        items = nodes.definition_list()
        for name in sorted(ENVIRONMENT):
            who, meaning = ENVIRONMENT[name]
            if who != kind:
                continue
            item = nodes.definition_list_item(ids=[nodes.make_id(name)])
            term = nodes.term()
            term += nodes.literal(text=name)
            item += term
            definition = nodes.definition()
            definition.extend(_paragraphs(meaning))
            where = nodes.paragraph()
            where += nodes.Text("Read or set in: ")
            where += nodes.literal(text=", ".join(in_code.get(name, [])))
            definition += where
            item += definition
            items += item
        return [items]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("sandbox-config", ConfigReference)
    app.add_directive("sandbox-cli", CliReference)
    app.add_directive("sandbox-environment", EnvironmentReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""``jupyter sandbox credentials set|list|rm``: what the host proxy adds to an owner's requests.

Each verb is an OwnerCommand (cli/owner.py) acting on the store in
``c.NetworkSettings.credentials_dir`` for the owner ``--owner`` names, as REST's
``/api/credentials`` does for its user (sandbox/network/credentials.py); with ``--everyone``, on
the administrator's credentials for every owner (which only who may write that directory, the
host's administrator, can change). A value (a header's,
basic auth's password) is never taken from the command line, which every user of the host can
read in /proc: it is asked for at a prompt that does not echo it or, when standard input is not
a terminal, read from it, one line per value (``printf '%s\\n' "$TOKEN" | jupyter sandbox
credentials set gh --host api.github.com --header Authorization``).
"""

from __future__ import annotations

import getpass
import sys

from traitlets import Bool, List, Unicode

from jupyter_sandbox.cli.owner import OwnerCommand
from jupyter_sandbox.cli.text import print_table
from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.network.credentials import CredentialStore
from jupyter_sandbox.sandbox.network.settings import NetworkSettings
from jupyter_sandbox.sandbox.settings import SandboxSettings

# Characters read for one value from standard input: the store's cap (8192) and a line end.
_MAX_LINE = 8194


class CredentialCommand(OwnerCommand):
    classes = [SandboxSettings, NetworkSettings]
    group = "credentials"
    everyone = Bool(
        False,
        config=True,
        help="Act on the administrator's credentials for every owner instead of --owner's.",
    )
    flags = {
        "everyone": (
            {"CredentialCommand": {"everyone": True}},
            "Act on the administrator's credentials for every owner instead of --owner's.",
        )
    }

    def scope(self, owner: str) -> str | None:
        """Whose credentials the verb acts on: ``owner``'s, or everyone's (None)."""
        return None if self.everyone else owner


def _store(manager: SandboxManager) -> CredentialStore:
    return CredentialStore(manager.network.credentials_path)


def read_value(prompt: str) -> str:
    """One secret: at a prompt that does not echo it, or a line of standard input."""
    if sys.stdin.isatty():
        return getpass.getpass(prompt)
    line = sys.stdin.readline(_MAX_LINE)
    if not line:
        raise InvalidRequestError(f"standard input ended before the {prompt.rstrip(': ')}")
    return line.removesuffix("\n").removesuffix("\r")


class SetApp(CredentialCommand):
    description = (
        "Set a credential the host proxy adds to plain HTTP requests to --host (a header given "
        "by --header, or HTTP basic auth for --basic USER); the value is asked for, never "
        "taken from the command line."
    )
    usage = "set NAME --host=HOST [--host=HOST2] (--header=NAME ... | --basic=USER)"
    host = List(
        Unicode(),
        config=True,
        help="A host pattern the credential is for: api.example.com, *.example.com, :port.",
    )
    header = List(
        Unicode(),
        config=True,
        help="The name of a header to add (its value is asked for): Authorization, X-API-Key.",
    )
    basic = Unicode("", config=True, help="HTTP basic auth's user name (the password is asked).")
    aliases = {"host": "SetApp.host", "header": "SetApp.header", "basic": "SetApp.basic"}

    async def run(self, manager: SandboxManager, owner: str, name: str) -> int:
        if bool(self.header) == bool(self.basic):
            raise InvalidRequestError("give --header (one or more) or --basic, not both")
        if any(":" in header for header in self.header):
            raise InvalidRequestError(
                "--header takes a header's name only: its value is asked for (the command "
                "line is readable by every user of this host)"
            )
        body: dict[str, object] = {"hosts": list(self.host)}
        if self.basic:
            password = read_value(f"password of {self.basic}: ")
            body["basic"] = {"username": self.basic, "password": password}
        else:
            body["headers"] = {key: read_value(f"value of {key}: ") for key in self.header}
        credential, created = _store(manager).put(self.scope(owner), name, body)
        public = credential.public()
        hosts = ", ".join(public["hosts"])
        print(
            f"{'set' if created else 'replaced'} {name}: {', '.join(public['headers'])} for {hosts}"
        )
        return 0


COLUMNS = [("NAME", "24"), ("SCOPE", "9"), ("HOSTS", "40"), ("HEADERS", "")]


class ListApp(CredentialCommand):
    description = (
        "List the credentials your sandboxes' requests get, yours and those for everyone: "
        "names, hosts and header names (never a value)."
    )
    usage = "list"

    async def run(self, manager: SandboxManager, owner: str) -> int:
        rows = [
            (item["name"], item["scope"], ", ".join(item["hosts"]), ", ".join(item["headers"]))
            for item in _store(manager).describe(self.scope(owner))
        ]
        print_table(COLUMNS, rows)
        return 0


class RmApp(CredentialCommand):
    description = "Remove a credential: the next request of your sandboxes goes without it."
    usage = "rm NAME"

    async def run(self, manager: SandboxManager, owner: str, name: str) -> int:
        _store(manager).remove(self.scope(owner), name)
        return 0

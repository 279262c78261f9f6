"""Rows 2, 3 and 4: privilege escalation, special files, writes outside the workspace."""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.manager import Sandbox
from tests.security.conftest import errno_name, run

pytestmark = pytest.mark.integration

ESCALATIONS = """
import ctypes, glob, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def call(fn, *args):
    return 'ok' if fn(*args) == 0 else ctypes.get_errno()
def attempt(fn):
    try:
        fn()
        return 'ok'
    except OSError as e:
        return e.errno
setuid_files = [p for d in ('/usr', '/bin', '/sbin') for p in glob.glob(d + '/**', recursive=True)
                if os.path.isfile(p) and not os.path.islink(p) and os.stat(p).st_mode & 0o6000]
mount_cmd = subprocess.run(['mount', '-t', 'tmpfs', 'none', '/tmp'], capture_output=True)
status = dict(l.split(':\\t', 1) for l in open('/proc/self/status') if ':\\t' in l)
print({
    'setuid(0)': attempt(lambda: os.setuid(0)),
    'setgid(0)': attempt(lambda: os.setgid(0)),
    'unshare(user)': call(libc.unshare, 0x10000000),
    'mount(2)': call(libc.mount, b'none', b'/tmp', b'tmpfs', 0, None),
    'mount(8)': mount_cmd.returncode,
    'setuid programs': len(setuid_files),
    'su root': subprocess.run(['su', '-c', 'id -u', 'root'], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=30).returncode,
    'sudo': os.path.exists('/usr/bin/sudo'),
    'uid': os.getuid(), 'euid': os.geteuid(),
    'CapEff': int(status['CapEff'], 16),
})
"""


@pytest.mark.checklist(
    row=2,
    attack="setuid(0), setuid programs, su/sudo, unshare -r, mount",
    expected="uid stays non-root; EPERM; no capabilities (CapEff=0); no setuid programs",
)
async def test_row02_privilege_escalation(sandbox: Sandbox, observe: Callable[[str], None]) -> None:
    seen = ast.literal_eval(await run(sandbox, ESCALATIONS))
    assert seen["uid"] != 0
    assert seen["euid"] != 0
    assert seen["CapEff"] == 0
    assert errno_name(seen["setuid(0)"]) == "EPERM"
    assert errno_name(seen["setgid(0)"]) == "EPERM"
    assert errno_name(seen["mount(2)"]) == "EPERM"
    assert seen["mount(8)"] != 0
    # runc refuses a user namespace (EPERM); gVisor's own kernel does not offer one (EINVAL).
    assert errno_name(seen["unshare(user)"]) in ("EPERM", "EINVAL")
    assert seen["setuid programs"] == 0
    assert seen["su root"] != 0
    assert not seen["sudo"]
    observe(
        f"uid {seen['uid']}, CapEff 0; setuid(0) EPERM, mount EPERM, "
        f"unshare(CLONE_NEWUSER) {errno_name(seen['unshare(user)'])}; no setuid programs; su fails, no sudo"
    )


SPECIAL_FILES = """
import os
def attempt(fn):
    try:
        fn()
    except OSError as e:
        return e.errno
    return 'ok'
def write(path):
    with open(path, 'w') as f:
        f.write('1')
def open_device(path):
    with open(path, 'rb', buffering=0) as f:
        f.read(1)
seen = {}
for name, kind, dev in (('mem', 0o020000, (1, 1)), ('disk', 0o060000, (8, 0))):
    path = '/workspace/' + name
    seen['mknod ' + name] = attempt(lambda: os.mknod(path, 0o666 | kind, os.makedev(*dev)))
    if seen['mknod ' + name] == 'ok':
        seen['open ' + name] = attempt(lambda: open_device(path))
seen['link /etc/passwd'] = attempt(lambda: os.link('/etc/passwd', '/workspace/passwd'))
seen['write /proc/sys'] = attempt(lambda: write('/proc/sys/kernel/hostname'))
seen['write /sys'] = attempt(lambda: write('/sys/kernel/profiling'))
seen['write /proc/sysrq-trigger'] = attempt(lambda: write('/proc/sysrq-trigger'))
print(seen)
"""


@pytest.mark.checklist(
    row=3,
    attack="mknod of host devices, a hardlink to /etc/passwd, writes to /proc/sys and /sys",
    expected="EPERM / EROFS / EXDEV; no host device can be opened",
)
async def test_row03_special_files(sandbox: Sandbox, observe: Callable[[str], None]) -> None:
    seen = ast.literal_eval(await run(sandbox, SPECIAL_FILES))
    for name in ("mem", "disk"):
        if seen[f"mknod {name}"] == "ok":
            # gVisor lets a node be made in its own memory-backed tmpfs, but it leads nowhere:
            # the sentry has no such device to open.
            assert sandbox.info.runtime == "runsc"
            assert errno_name(seen[f"open {name}"]) == "ENXIO"
        else:
            assert errno_name(seen[f"mknod {name}"]) == "EPERM"
    assert errno_name(seen["link /etc/passwd"]) in ("EXDEV", "EPERM")
    for write in ("write /proc/sys", "write /sys", "write /proc/sysrq-trigger"):
        assert errno_name(seen[write]) in ("EROFS", "EACCES", "EPERM", "ENOENT"), (write, seen)
    observe("; ".join(f"{what}: {errno_name(result)}" for what, result in seen.items()))


def digest_of(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


WRITES_OUTSIDE = """
import os
def attempt(path):
    try:
        with open(path, 'a') as f:
            f.write('owned')
    except OSError as e:
        return e.errno
    return 'ok'
os.symlink('/etc/passwd', '/workspace/to-passwd')
os.symlink('/usr/lib', '/workspace/to-lib')
print({path: attempt(path) for path in (
    '/etc/passwd', '/usr/bin/python3', '/new-file', '/opt/sandbox/sandbox-init.py',
    '/workspace/to-passwd', '/workspace/to-lib/planted.py',
)})
"""


@pytest.mark.checklist(
    row=4,
    attack="writes to /etc, /usr, the root filesystem and the supervisor, directly and through "
    "symlinks in the workspace",
    expected="EROFS or EACCES; the host's files are untouched",
)
async def test_row04_writes_outside_the_workspace(
    sandbox: Sandbox, observe: Callable[[str], None]
) -> None:
    host_passwd = digest_of("/etc/passwd")
    seen = ast.literal_eval(await run(sandbox, WRITES_OUTSIDE))
    for path, result in seen.items():
        assert errno_name(result) in ("EROFS", "EACCES"), (path, seen)
    assert digest_of("/etc/passwd") == host_passwd
    observe("; ".join(f"{path}: {errno_name(result)}" for path, result in seen.items()))

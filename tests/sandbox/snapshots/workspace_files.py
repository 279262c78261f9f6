"""Helpers that make and read files inside a real sandbox's /workspace, as its user."""

from __future__ import annotations

import json

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.manager import SandboxManager

OWNER = "alice"

# Every entry under a directory: type, permission bits, and content hash or link target.
MANIFEST = r"""
import hashlib, json, os, stat, sys
root = sys.argv[1]
found = {}
for top, dirs, files in os.walk(root):
    for name in dirs + files:
        path = os.path.join(top, name)
        st = os.lstat(path)
        rel = os.path.relpath(path, root)
        if stat.S_ISLNK(st.st_mode):
            found[rel] = ["link", os.readlink(path)]
        elif stat.S_ISDIR(st.st_mode):
            found[rel] = ["dir", oct(stat.S_IMODE(st.st_mode))]
        else:
            with open(path, "rb") as f:
                digest = hashlib.file_digest(f, "sha256").hexdigest() if hasattr(hashlib, "file_digest") else hashlib.sha256(f.read()).hexdigest()
            found[rel] = ["file", oct(stat.S_IMODE(st.st_mode)), st.st_size, digest]
print(json.dumps(found, sort_keys=True))
"""

# Text, binary, unicode names, empty directories, internal symlinks and permissions.
VARIED = r"""
set -e
cd /workspace
mkdir -p docs/empty 'données/日本' deep/er/est private
printf 'hello\nworld\n' > docs/a.txt
head -c 300000 /dev/urandom > blob.bin
printf 'ünïcödé\n' > 'données/日本/é ü.txt'
ln -s a.txt docs/link
ln -s ../../docs deep/er/up
printf '#!/bin/sh\necho hi\n' > run.sh
chmod 755 run.sh
chmod 600 docs/a.txt
chmod 700 private
chmod 750 deep
printf 'x' > private/secret
cp run.sh suid.sh
chmod 4755 suid.sh
"""


async def sh(manager: SandboxManager, sandbox_id: str, script: str, timeout: float = 120) -> str:
    result = await manager.exec(
        OWNER, sandbox_id, ["sh", "-c", script], ExecOptions(timeout=timeout)
    )
    assert result.exit_code == 0, result.stderr.decode()
    return result.stdout.decode()


async def manifest(manager: SandboxManager, sandbox_id: str, root: str = "/workspace") -> dict:
    result = await manager.exec(
        OWNER, sandbox_id, ["python3", "-I", "-c", MANIFEST, root], ExecOptions(timeout=120)
    )
    assert result.exit_code == 0, result.stderr.decode()
    return dict(json.loads(result.stdout))

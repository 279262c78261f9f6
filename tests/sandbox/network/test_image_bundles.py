"""The image's CA bundle in each sandbox's trust bundle: read from the engine once per image,
then kept in the state directory, so that the next process (a kernel started without a server
is a process of its own) starts a sandbox without reading it again (network/tls_ca.py)."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.network import tls_ca

pytestmark = [pytest.mark.integration, pytest.mark.runc]

MARK = b"-----BEGIN CERTIFICATE-----\nkept-by-an-earlier-process\n-----END CERTIFICATE-----\n"


def kept_bundle(manager: SandboxManager) -> Path:
    """Where the image's bundle is kept: named by the engine's id of the image."""
    image_id = str(docker.from_env().images.get(manager.settings.image).id)
    return (
        manager.settings.state_path
        / tls_ca.BUNDLE_CACHE
        / f"{image_id.removeprefix('sha256:')}.pem"
    )


def trust_bundle(manager: SandboxManager, sandbox_id: str) -> bytes:
    root = SandboxDirectory(manager.settings.state_path, sandbox_id).root
    return (root / tls_ca.TRUST_DIR / tls_ca.BUNDLE).read_bytes()


def as_a_new_process() -> None:
    """Forget what this process read (a kernel's process starts with nothing)."""
    tls_ca._IMAGE_BUNDLES.clear()


async def started_bundle(manager: SandboxManager, purpose: str) -> bytes:
    as_a_new_process()
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    return trust_bundle(manager, sandbox.sandbox_id)


async def test_an_images_bundle_is_read_once_then_kept_for_the_next_process(
    manager: SandboxManager, purpose: str
) -> None:
    first = await started_bundle(manager, purpose)
    kept = kept_bundle(manager)
    image_bundle = kept.read_bytes()
    assert b"-----BEGIN CERTIFICATE-----" in image_bundle
    assert first.startswith(image_bundle)  # the image's CAs, then the sandbox's own
    assert [path.name for path in kept.parent.iterdir()] == [kept.name]  # nothing half-written
    # What the next process starts with is the kept file, not a read from the engine.
    kept.write_bytes(image_bundle + MARK)
    assert (await started_bundle(manager, purpose)).startswith(image_bundle + MARK)


async def test_a_kept_file_that_is_no_bundle_or_a_link_is_read_again_from_the_image(
    manager: SandboxManager, purpose: str, tmp_path: Path
) -> None:
    await started_bundle(manager, purpose)
    kept = kept_bundle(manager)
    image_bundle = kept.read_bytes()
    kept.write_bytes(b"not a bundle")
    assert (await started_bundle(manager, purpose)).startswith(image_bundle)
    assert kept.read_bytes() == image_bundle  # kept again, as read
    elsewhere = tmp_path / "elsewhere.pem"
    elsewhere.write_bytes(MARK)
    kept.unlink()
    kept.symlink_to(elsewhere)
    bundle = await started_bundle(manager, purpose)
    assert bundle.startswith(image_bundle)
    assert MARK not in bundle
    assert not kept.is_symlink()  # replaced by the bundle read from the image

"""Image references in their full form, so that every spelling of one image finds it."""

from __future__ import annotations

import pytest
from traitlets import TraitError

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.images.reference import image_reference, same_image
from jupyter_sandbox.sandbox.settings import DEFAULT_IMAGE, SandboxSettings

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("given", "full"),
    [
        ("jupyter-sandbox/python-ml", "jupyter-sandbox/python-ml:latest"),
        ("jupyter-sandbox/python-ml:1", "jupyter-sandbox/python-ml:1"),
        ("python:3.11-slim-bookworm", "python:3.11-slim-bookworm"),
        ("localhost:5000/team/py", "localhost:5000/team/py:latest"),
        ("registry.example.org/team/py:2.0", "registry.example.org/team/py:2.0"),
        (f"team/py@{DIGEST}", f"team/py@{DIGEST}"),
        (f"team/py:1@{DIGEST}", f"team/py:1@{DIGEST}"),
    ],
)
def test_a_reference_is_put_in_its_full_form(given: str, full: str) -> None:
    assert image_reference(given) == full


@pytest.mark.parametrize(
    "given",
    ["", "Jupyter-Sandbox/python", "team/py:", "team/py:1 2", "team//py", "-team/py", "team/py@1"],
)
def test_what_the_engine_would_not_take_is_refused_with_an_example(given: str) -> None:
    with pytest.raises(InvalidSettingError, match=r"not an image reference.*e.g. 'jupyter-sandbox"):
        image_reference(given)


def test_both_spellings_of_one_image_are_the_same_image() -> None:
    assert same_image("team/py", "team/py:latest")
    assert not same_image("team/py", "team/py:1")
    assert not same_image("team/PY", "team/py")  # not references: compared as they are


def test_a_request_gets_the_full_form_of_an_allowed_image() -> None:
    settings = SandboxSettings(allowed_images=["jupyter-sandbox/*", "team/py"])
    assert settings.check_image("jupyter-sandbox/python-ml") == "jupyter-sandbox/python-ml:latest"
    assert settings.check_image("team/py:latest") == "team/py:latest"  # the pattern's spelling
    assert settings.check_image(DEFAULT_IMAGE) == DEFAULT_IMAGE
    with pytest.raises(InvalidSettingError, match="is not allowed here"):
        settings.check_image("team/py:2")
    with pytest.raises(InvalidSettingError, match="not an image reference"):
        settings.check_image("jupyter-sandbox/Python")


def test_the_configured_image_is_kept_in_its_full_form() -> None:
    assert SandboxSettings(image="team/py").image == "team/py:latest"
    with pytest.raises(TraitError, match=r"SandboxSettings.image: 'team/Py' is not an image"):
        SandboxSettings(image="team/Py")

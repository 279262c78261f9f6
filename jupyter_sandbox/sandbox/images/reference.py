"""Image references as the engine reads them, checked before anything is asked of it.

The engine takes ``jupyter-sandbox/python-ml`` to mean ``jupyter-sandbox/python-ml:latest``, so
both spellings name one image; but a container records the reference it was created with. A
context made with one spelling and asked for again with the other must still be found, and a
warm pool member made for one must serve the other: every reference a request carries is put in
its full form (``repo:tag``, or ``repo@digest``) once, here.
"""

from __future__ import annotations

import re

from jupyter_sandbox.protocol.errors import InvalidSettingError

# The grammar of distribution's reference package (what `docker run` accepts), without its
# rarely used IPv6 registry hosts: [registry/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
# A first component is a registry only when it has a dot or a port, or is localhost.
_REGISTRY = rf"(?:localhost(?::[0-9]+)?|{_HOST}(?:\.{_HOST})+(?::[0-9]+)?|{_HOST}:[0-9]+)/"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(
    rf"(?P<name>(?:{_REGISTRY})?{_COMPONENT}(?:/{_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?"
)
MAX_NAME = 255  # the engine's limit on the name part


def image_reference(image: str) -> str:
    """``image`` in its full form: ``repo`` becomes ``repo:latest``, as the engine reads it.

    Raises InvalidSettingError, with an example, for text the engine would not take as an
    image reference (upper case in a repository, spaces, an empty tag...).
    """
    found = REFERENCE.fullmatch(image)
    if found is None or len(found["name"]) > MAX_NAME:
        raise InvalidSettingError(
            f"{image!r} is not an image reference: use lower-case repository names, e.g. "
            "'jupyter-sandbox/python-ml:1' (see 'docker images' for the images this machine has)"
        )
    if found["tag"] is None and found["digest"] is None:
        return f"{image}:latest"
    return image


def same_image(one: str, other: str) -> bool:
    """Whether two references name the same image (``repo`` and ``repo:latest`` do)."""
    try:
        return image_reference(one) == image_reference(other)
    except InvalidSettingError:
        return one == other

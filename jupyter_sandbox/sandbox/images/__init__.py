"""Sandbox images: built with no container registry (debootstrap, ``docker import``, wheels
downloaded on the host), with extra packages on request, and image references checked before the
engine is asked for them.
"""

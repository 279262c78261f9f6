"""How the host holds itself against what sandboxes and users send: each sandbox's private host
directory and its size caps, private paths and locks, strict readers of what a sandbox wrote (JSON,
HTTP heads), bounded waits, fair shares between owners, and how the host starts its own Python.
"""

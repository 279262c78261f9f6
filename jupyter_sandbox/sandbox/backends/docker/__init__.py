"""The Docker backend: sandboxes as Docker containers under runsc (gVisor) or runc.

Every module that talks to the Docker engine is here, and nowhere else: the engine client
(``engine.py``), the backend (``backend.py``) and what it is made of: container configuration,
exec with bounded output and deadlines, streams, terminals, checkpoints, removal, and the
gVisor processes a failed start can leave behind.
"""

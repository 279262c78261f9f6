"""Programs the host runs inside a sandbox, sent as source and started by absolute path.

Each module here is either such a program (it runs INSIDE the sandbox, with the standard library
only, and what it prints is hostile input on the host) or says where the image keeps the
interpreter and tools those programs are started with (``image_programs.py``), so that a sandbox
cannot swap them through its PATH.
"""

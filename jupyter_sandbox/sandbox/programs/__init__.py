"""Programs the host runs inside a sandbox, sent as source and started by absolute path.

Each module here is either such a program (it runs INSIDE the sandbox, with the standard library
only, and what it prints is hostile input on the host) or says how they are started: where the
image keeps the interpreter and tools (``image_programs.py``), so that a sandbox cannot swap
them through its PATH, and the mark and supervisor every command runs with (``exec_marks.py``).
"""

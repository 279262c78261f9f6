"""What a caller does in a running sandbox besides its kernel: files and watches, commands (run,
streamed, in the background), code runs in the live interpreter, ports, terminals and live stats.

Every front end (REST, CLI, the Python client through REST) reaches these through the sandbox
manager, which checks ownership first.
"""

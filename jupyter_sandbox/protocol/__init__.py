"""What the server, the CLI, the kernel and the REST client agree on, with the standard library only:
the one error hierarchy (with the stable ``code`` each error is known by on the wire), the errors
of snapshots, the checks every request body goes through (requests.py), and a code run's output
gathered as a notebook cell shows it.

The client for agent code (``jupyter_sandbox.client``) imports this package and nothing else of
the core, so that its machine needs neither the container engine's libraries nor traitlets.
"""

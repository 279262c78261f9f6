"""What a sandbox's /workspace shows of the host, and keeping that view current.

- plan.py: which launch directory /workspace may show, and how (copy-on-write, read-only,
  read-write, none), refusing the directories no sandbox should see;
- refresh.py: the host process that keeps a copy-on-write /workspace's listings current when
  the host changes the folder beneath it (one per sandbox: it imports little, and this package
  imports nothing).

The directory is opened and mounted without following links by host/workspace_pin.py.
"""

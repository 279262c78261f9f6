"""The sandbox gateway: a headless Jupyter Server that alone holds the container engine and
serves hub users their Sandboxed Python kernels (the kernel gateway API Jupyter Server's
GatewayClient speaks) and their sandboxes (the REST API), each owned by the JupyterHub user
whose token the request carries (docs/how-to/jupyterhub-gateway.md)."""

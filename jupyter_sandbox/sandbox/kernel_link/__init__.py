"""The host's link to the ipykernel inside a sandbox: waiting until it answers, connecting to its
sockets without letting the sandbox redirect the host, and running one execute request from the
host (for REST code runs) with clients kept between runs.
"""

"""The listening socket of a server, made before anything slow (a model load) so that a taken port fails at once,
and the connections the process's open-file limit leaves room for."""

from __future__ import annotations

import os
import resource
import socket

__all__ = ["SPARE_DESCRIPTORS", "connection_room", "listen"]

#: Descriptors kept free of connections for what serving itself opens (checkpoint files, downloads, pipes).
SPARE_DESCRIPTORS = 32


def listen(host: str, port: int, backlog: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` (0: a free port the system picks), IPv4 where ``host`` has an IPv4
    address, else IPv6 (``::1``); OSError when it cannot be had (a negative errno, getaddrinfo's: ``host`` does not
    resolve)."""
    try:
        return socket.create_server((host, port), backlog=backlog)
    except OSError as exc:
        if exc.errno is None or exc.errno >= 0 or not socket.has_ipv6:  # the address resolved: taken, or not ours
            raise
    return socket.create_server((host, port), family=socket.AF_INET6, backlog=backlog)


def connection_room(wanted: int) -> int:
    """How many connections, up to ``wanted``, fit in the descriptors this process has left (at least 1): past the
    open-file limit accept() fails, and the clients waiting to connect would wait on the ones already held."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc: count the lowest descriptors as taken
        used = 64
    return max(1, min(wanted, soft - used - SPARE_DESCRIPTORS))

"""Ports for the ranks of multi-process tests."""

import socket

_held = []


def free_port():
    """A port on 127.0.0.1 held for the rest of this process: bound with SO_REUSEADDR,
    not listening. Connections are refused as at a free port and the ranks' store can
    open there, but no other socket (another test's Gloo pair, say) takes it meanwhile."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    _held.append(s)
    return s.getsockname()[1]

"""What the HTTP servers toolexec runs on hypercorn share: the lifespan, a bound socket.

``_remote_worker`` (``toolexec serve --remote``) and ``_ui`` (``toolexec ui``)
are small ASGI applications served by hypercorn under trio, each on a socket
it binds first, so that a port in use is an error before any server starts.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

__all__ = ["Receive", "Send", "lifespan", "listening_socket"]

# Each server types its messages its own way (a dict, a mapping): any will do here.
Receive: TypeAlias = Callable[[], Awaitable[Any]]
Send: TypeAlias = Callable[[Any], Awaitable[None]]


async def lifespan(receive: Receive, send: Send) -> None:
    """Answer an ASGI lifespan scope: nothing to start or stop."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (the first address ``host`` resolves to; port 0:
    a free one), for hypercorn's ``fd://`` bind; ``OSError`` if it cannot be bound."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock

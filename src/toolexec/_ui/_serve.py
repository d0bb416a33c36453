"""Serve the page with hypercorn's trio worker on this trio loop (``toolexec ui``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from .._backends._asgi import listening_socket as listen
from ._app import LOOPBACK, UIApp

if TYPE_CHECKING:
    import socket

    from .._core._journal import JournalStore

__all__ = ["listen", "serve_ui"]


async def serve_ui(
    store: JournalStore,
    token: str,
    sock: socket.socket,
    *,
    user: str = "",
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the page for ``store`` on ``sock`` (``listen``) until cancelled.

    ``task_status`` gets the page's base URL once it is served.

    Raises:
        ImportError: hypercorn (the ``ui`` extra) is not installed.
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    host, bound_port = sock.getsockname()[:2]
    app = UIApp(store, token, user, LOOPBACK | {host})
    settings = Config()
    settings.bind = [f"fd://{sock.detach()}"]
    settings.errorlog = logging.getLogger("toolexec.ui.http")
    settings.keep_alive_timeout = 30.0
    settings.graceful_timeout = 1.0
    shown = f"[{host}]" if ":" in host else host
    async with trio.open_nursery() as nursery:
        await nursery.start(serve, app, settings)
        task_status.started(f"http://{shown}:{bound_port}")

"""``toolexec ui --journal PATH|URL``: a live page over a journal (docs/ui.md).

It prints the page's address with its token (after ``#``, so the browser
never sends it to any server) and serves until interrupted. Startup: the
parser is built from argparse alone; the server is imported when it runs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TextIO

from ._sources import UsageError

if TYPE_CHECKING:
    import argparse

__all__ = ["add_parser", "ui_command"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``toolexec ui`` to the ``toolexec`` parser."""
    ui = commands.add_parser(
        "ui",
        help="serve a live page of a journal's agent trees, where questions are answered",
        description=(
            "Serve a local page that shows a journal's sessions, agent trees, batches and "
            "calls as they run, and answers the open questions (as 'toolexec approve' does). "
            "It prints the page's address with a token; only the page with that token may "
            "read or answer."
        ),
    )
    ui.add_argument(
        "--journal",
        required=True,
        metavar="PATH|URL",
        help="the journal: its SQLite file, or a PostgreSQL database's URL",
    )
    ui.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1)")
    ui.add_argument("--port", type=int, default=8765, help="the port (0 picks a free one)")
    ui.add_argument("--by", default=os.environ.get("USER", ""), help="who the page answers as")


def ui_command(args: argparse.Namespace, stdout: TextIO) -> int:
    """Serve the page until interrupted."""
    import secrets
    from functools import partial

    import trio

    from .._durable._questions import open_store
    from .._durable._sqlite import SQLiteStore
    from .._ui._serve import listen, serve_ui

    store = open_store(args.journal)
    if isinstance(store, SQLiteStore) and not os.path.exists(args.journal):
        raise UsageError(f"no journal at {args.journal!r}")
    token = secrets.token_urlsafe(24)
    try:
        sock = listen(args.host, args.port)
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None

    async def run() -> None:
        try:
            async with trio.open_nursery() as nursery:
                url = await nursery.start(partial(serve_ui, store, token, sock, user=args.by))
                stdout.write(f"toolexec ui: open {url}/#token={token}\n")
                stdout.flush()
        finally:
            sock.close()  # no-op once the server took it over
            await store.aclose()

    trio.run(run)
    return 0

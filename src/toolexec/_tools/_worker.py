"""Blocking work in a worker thread that cancellation abandons, and then stops.

A blocking call in ``trio.to_thread.run_sync`` holds its task until it
returns: a deadline cannot end it. With ``abandon_on_cancel=True`` the
task is released at once, but the thread runs on, holding one of trio's
worker threads (which every file tool shares) until the work is done.
``run_abandonable`` does both halves: it abandons the thread when the
caller is cancelled, and sets the cancel token the work was given, which
the work checks between its steps (each component of a path, each entry
of a listing) so that it ends soon after, freeing its thread.

Abandoned work's result is dropped: only work whose result needs no
cleanup (bytes, a listing, a flag; not an open descriptor) may run here.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, TypeVar

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["run_abandonable"]

T = TypeVar("T")


async def run_abandonable(work: Callable[[threading.Event], T]) -> T:
    """Run ``work(cancel)`` in a worker thread; on cancellation abandon it and set ``cancel``.

    Example::

        data = await run_abandonable(lambda cancel: ws.read_bytes_sync(path, cancel=cancel))

    Args:
        work: the blocking work; it should stop (raising) soon after
            ``cancel`` is set, and return nothing that needs closing.

    Returns:
        What ``work`` returned.

    Raises:
        trio.Cancelled: the caller was cancelled; the work's thread was
            abandoned and told to stop.
    """
    cancel = threading.Event()
    try:
        return await trio.to_thread.run_sync(work, cancel, abandon_on_cancel=True)
    finally:
        cancel.set()  # after the work ended this changes nothing; before, it stops the work

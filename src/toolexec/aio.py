"""Run toolexec from asyncio: one trio run beside the host's loop.

``open_executor`` starts one long-lived trio run, builds a ``ToolExecutor``
inside it, and hands back an ``AsyncioExecutor`` whose ``execute_batch`` is
awaited from asyncio tasks; the batches of every asyncio task share the
executor's pools.

Example::

    async with toolexec.aio.open_executor(registry) as executor:
        outcome = await executor.execute_batch(calls)

Two modes, chosen explicitly:

- ``mode="guest"`` (the default): the trio run is a guest of the running
  asyncio loop (``trio.lowlevel.start_guest_run``). No thread, no new loop:
  trio code runs on the asyncio thread, between the loop's own callbacks.
- ``mode="thread"``: ``trio.run`` in a dedicated thread, for hosts where a
  guest run cannot be used (a loop that is not the stock asyncio one, code
  that must not share the loop's thread). Same API, same guarantees; each
  batch crosses threads twice.

Theory of operation. The run's main task holds two nurseries: an outer one
for the long-lived contexts (``AsyncioExecutor.enter``), and an inner one,
the batches' nursery. A batch is a ``_Job``: the trio side completes its
``asyncio.Future`` (directly in guest mode, through ``call_soon_threadsafe``
in thread mode). In thread mode each batch gets a trio task of its own. In
guest mode the inner nursery also holds a dispatcher task: a batch
submitted while it waits runs in it, in a copy of the awaiting asyncio
task's context variables, so back-to-back batches spawn no task; a batch
submitted while it is busy gets a task of its own, so batches from several
asyncio tasks still run together and share the pools. Cancelling the
awaiting asyncio task cancels the trio batch (its unfinished calls get
``cancelled`` results, every task and child process ends), waits for it to
finish, and then raises ``asyncio.CancelledError`` as asyncio expects.
Leaving the ``async with`` cancels the batches still running (the
dispatcher with them), leaves the entered contexts in reverse order, ends
the trio run and re-raises its error; a run that dies early fails every
waiting batch instead of hanging, and a batch submitted once the batches'
nursery has closed fails at once.

Guest mode and its cost. Each trio scheduler pass of a guest run is a guest
step, run from the asyncio loop, so a batch costs one step per pass it
needs in ``trio.run``, plus one to start it: a batch that would need no
pass at all (N = 0 or 1 no-op calls) takes one step. The batch is handed to
the dispatcher straight from the awaiting asyncio task: on the loop's
thread between two guest steps the run is at rest, as it is when
``TrioToken.run_sync_soon`` callbacks run, and trio schedules a step itself
if none is. The run's steps go through ``_Steps``: one loop callback runs
the step trio asks for, unless the submitting task has run it already, at
once, after handing the batch over (when the run is awake, a step is
waiting). So a batch needing one step is done before ``execute_batch``
would first suspend, with no loop turn at all; a longer one completes its
future from a later step, and the task resumes in the next loop turn. A guest run
whose tasks are all blocked waits for I/O in a helper thread and is woken
through it: two thread hand-offs. So after a batch the dispatcher stays
awake a short while (``LINGER``; yielding, one step per loop turn; not
while batches run in tasks of their own), and a batch that follows soon
after costs no hand-off at all. ``benchmarks/bench_aio.py --profile``
counts steps and hand-offs per batch.

The asyncio side's context variables (an OpenTelemetry span, a request id)
are copied into the batch (its own task, or the dispatcher while it runs
it; what the batch sets stays in that copy), so sinks see them. Sinks and
approvers run inside the trio run; ``AsyncioSink`` and ``AsyncioApprover``
hand their work to the host loop instead, and ``asyncio_tool`` marks a tool
body written for asyncio.
"""

from __future__ import annotations

from ._adapters._aio import (
    AsyncioApprover,
    AsyncioExecutor,
    AsyncioSink,
    asyncio_tool,
    open_executor,
)
from ._adapters._aio_guest import LINGER as LINGER
from ._adapters._aio_guest import MODES as MODES
from ._adapters._aio_guest import Mode as Mode
from ._core._public import fixup_module_metadata as _fixup_module_metadata

__all__ = [
    "AsyncioApprover",
    "AsyncioExecutor",
    "AsyncioSink",
    "asyncio_tool",
    "open_executor",
]

_fixup_module_metadata(__name__, __all__)

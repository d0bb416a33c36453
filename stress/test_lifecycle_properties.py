"""Every scheduling mode drives the same lifecycle: same results, events, audit and hooks.

Theory of operation. Hypothesis draws a batch over a few tools that share a
recorded store: reads (some blocking on the mock clock, some past their
deadline), serial writes that ask a human (who refuses some), a promoted
commutative counter, a read under a per-tool cap of one, a tool that fails,
and a tool that reads a context variable and then sets it. The same batch
runs once per scheduling mode: as the executor chooses (which includes the
inline driver for a batch of one call), then with every run forced onto the
worker pool, onto a task per call (a serial run excepted: its calls ask their
humans at once, so only one call after another keeps it in emitted order),
and onto one call after another (``_batch.choose_driver``). Every mode must give:

- the same results, in call order (ids, error classes, texts);
- per call, the same events in the same order, and the same run events in
  the same order (events of different calls may complete in any order);
- the same audit records per call, in the same order;
- the same ``after_call`` hook calls;
- the same final store;
- a context variable set by one call seen by no other call: each sees the
  value the host set around the batch, as a task of its own would.

``STRESS=long`` runs 5,000 examples. ``test_a_mode_that_skips_a_step_is_caught``
plants a driver that skips one step (telling the sinks and hooks of a result)
and checks the comparison catches it.
"""

from __future__ import annotations

import contextvars
import json
from collections import defaultdict
from typing import TYPE_CHECKING, Any
from unittest import mock

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import toolexec._core._batch as batch_module
from stress.conftest import stress_profile
from toolexec import (
    ConcurrencyConfig,
    RoutingClass,
    SideEffects,
    ToolCall,
    ToolError,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec.approval import ApprovalAnswer, ApprovalRequest
from toolexec.events import CallbackSink, Event, JsonlAuditSink
from toolexec.policy import CallHook

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from toolexec import ToolResult

MODES = ("auto", batch_module.WORKERS_AND_TASKS, batch_module.TASKS, batch_module.IN_ORDER)
SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("SEEN", default="unset")


@attrs.define
class World:
    """The store the tools act on, rebuilt for every run of a batch."""

    store: dict[str, int] = attrs.field(factory=dict)
    counter: int = 0
    seen: list[tuple[str, str]] = attrs.field(factory=list)  # (tag, value seen)


WORLD = World()


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @function_tool(side_effects=SideEffects.READ, timeout=2.5)
    async def read(key: str, delay: int = 0) -> int:
        """Read a key, after ``delay`` mock seconds."""
        if delay:
            await trio.sleep(delay)
        return WORLD.store.get(key, 0)

    @function_tool(side_effects=SideEffects.WRITE)
    async def write(key: str, value: int) -> str:
        """Set a key (asks a human first)."""
        await trio.sleep(0)
        WORLD.store[key] = value
        return f"{key}={value}"

    @function_tool(side_effects=SideEffects.WRITE)
    async def bump() -> str:
        """Add one to the counter (promoted: runs concurrently); never blocks.

        (Async: a sync tool runs in a thread, which the mock clock cannot wait for.)"""
        WORLD.counter += 1
        return "bumped"

    @function_tool(side_effects=SideEffects.READ)
    async def capped(key: str) -> int:
        """Read a key under a per-tool cap of one."""
        await trio.sleep(0)
        return WORLD.store.get(key, 0)

    @function_tool(side_effects=SideEffects.READ)
    async def fail(own: bool) -> str:
        """Fail: with a ``ToolError`` of its own words, or by crashing."""
        await trio.sleep(0)
        if own:
            raise ToolError("no such thing")
        raise ValueError("boom")

    @function_tool(side_effects=SideEffects.READ)
    async def tag(name: str) -> str:
        """Report the context variable, yield, then set it to ``name``."""
        before = SEEN.get()
        await trio.sleep(0)
        SEEN.set(name)
        WORLD.seen.append((name, before))
        return before

    for tool in (read, write, bump, capped, fail, tag):
        registry.register(tool)
    return registry


class Refuser:
    """Approves every write except those of negative values, after a checkpoint."""

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        await trio.sleep(0)
        approved = json.loads(request.arguments).get("value", 0) >= 0
        return ApprovalAnswer(approved, "test", "" if approved else "negative")


class Hooks(CallHook):
    def __init__(self) -> None:
        self.after: list[tuple[str, str, str | None]] = []

    def after_call(self, call: ToolCall, result: ToolResult, agent_path: str) -> None:
        self.after.append((call.id, result.text, _class(result)))


def _class(result: ToolResult) -> str | None:
    return None if result.error_class is None else result.error_class.value


_KEYS = st.sampled_from(["a", "b"])
_CALLS = st.one_of(
    st.builds(lambda k, d: ("read", {"key": k, "delay": d}), _KEYS, st.sampled_from([0, 0, 1, 3])),
    st.builds(lambda k, v: ("write", {"key": k, "value": v}), _KEYS, st.integers(-2, 9)),
    st.just(("bump", {})),
    st.builds(lambda k: ("capped", {"key": k}), _KEYS),
    st.builds(lambda own: ("fail", {"own": own}), st.booleans()),
    st.builds(lambda n: ("tag", {"name": n}), st.sampled_from(["x", "y", "z"])),
    st.just(("missing", {})),
    st.just(("read", {"key": 3})),
)


@attrs.frozen
class Observed:
    """What one mode produced, without times."""

    results: tuple[tuple[str, bool, str | None, str], ...]
    call_events: dict[str, list[str]]
    run_events: list[tuple[str, Any]]
    audit: dict[str, list[dict[str, Any]]]
    after: list[tuple[str, str, str | None]]
    store: dict[str, int]
    counter: int
    seen: list[tuple[str, str]]


def run_mode(mode: str, calls: Sequence[ToolCall], audit_path: Path) -> Observed:
    """Run ``calls`` once with every run driven as ``mode`` says."""
    WORLD.store.clear()
    WORLD.counter = 0
    WORLD.seen.clear()
    events: list[Event] = []
    hooks = Hooks()
    audit_path.unlink(missing_ok=True)
    audit = JsonlAuditSink.open(audit_path)
    executor = ToolExecutor(
        _registry(),
        config=ConcurrencyConfig(promoted=["bump"], per_tool={"capped": 1}),
        approver=Refuser(),
        sinks=[CallbackSink(events.append), audit],
        hooks=[hooks],
    )
    original = batch_module.choose_driver

    def forced(pools: Any, run: Any, slots: Any, *, alone: bool = False) -> str:
        if mode == "auto":
            return original(pools, run, slots, alone=alone)
        if mode == batch_module.TASKS and run.routing is RoutingClass.SERIAL_MUT:
            # Tasks ask their humans at once, and answers come in any order: a
            # serial run is always driven one call after another.
            return batch_module.IN_ORDER
        return mode

    async def main() -> tuple[ToolResult, ...]:
        SEEN.set("host")
        outcome = await executor.execute_batch(calls)
        return outcome.results

    with mock.patch.object(batch_module, "choose_driver", forced):
        results = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    audit.close()
    return Observed(
        tuple((r.call_id, r.is_error, _class(r), r.text) for r in results),
        _per_call(events),
        [_run_event(e) for e in events if not hasattr(e, "call_id")],
        _audit(audit_path),
        sorted(hooks.after),
        dict(WORLD.store),
        WORLD.counter,
        sorted(WORLD.seen),
    )


def _per_call(events: Sequence[Event]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for event in events:
        call_id = getattr(event, "call_id", None)
        if call_id is not None:
            out[call_id].append(type(event).__name__)
    return dict(out)


def _run_event(event: Event) -> tuple[str, Any]:
    return type(event).__name__, getattr(event, "index", None)


_TIMES = {"ts", "time", "duration", "elapsed", "started_at", "finished_at"}


def _audit(path: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        record = {k: v for k, v in json.loads(line).items() if k not in _TIMES}
        out[str(record.get("call_id"))].append(record)
    return dict(out)


def check_modes_agree(
    calls: Sequence[ToolCall], tmp: Path, run: Callable[..., Observed] = run_mode
) -> None:
    """Run every mode on ``calls`` and assert they observed the same lifecycle."""
    reference = run("auto", calls, tmp / "auto.jsonl")
    assert [r[0] for r in reference.results] == [c.id for c in calls]
    assert all(before == "host" for _, before in reference.seen), reference.seen
    for mode in MODES[1:]:
        other = run(mode, calls, tmp / f"{mode}.jsonl")
        for field in attrs.fields(Observed):
            mine, theirs = getattr(reference, field.name), getattr(other, field.name)
            assert mine == theirs, f"mode {mode!r} differs in {field.name}"


@settings(settings.get_profile(stress_profile()))
@given(drawn=st.lists(_CALLS, min_size=1, max_size=8))
def test_every_scheduling_mode_drives_the_same_lifecycle(
    drawn: list[tuple[str, dict[str, Any]]], tmp_path_factory: Any
) -> None:
    calls = [ToolCall(f"c{i}", name, json.dumps(args)) for i, (name, args) in enumerate(drawn)]
    check_modes_agree(calls, tmp_path_factory.mktemp("modes"))


def test_a_mode_that_skips_a_step_is_caught(tmp_path: Path) -> None:
    """The comparison has teeth: a worker pool that never tells the hooks and
    sinks of a result (a skipped step of ``conclude``) fails it."""
    import toolexec._core._workers as workers_module
    from toolexec._core._call import conclude

    def conclude_without_report(slot: Any, report: Any, *args: Any) -> None:
        conclude(slot, attrs.evolve(report, sinks=(), hooks=()), *args)

    calls = [ToolCall("c0", "read", '{"key": "a"}'), ToolCall("c1", "read", '{"key": "b"}')]
    check_modes_agree(calls, tmp_path)  # as built: every mode agrees
    with (
        mock.patch.object(workers_module, "conclude", conclude_without_report),
        pytest.raises(AssertionError, match="mode 'tasks' differs in call_events"),
    ):
        check_modes_agree(calls, tmp_path)

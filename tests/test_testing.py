"""``toolexec.testing``'s ordering checks: they pass on correct executors and catch planted bugs.

Each planted bug is a mistake a user could make (a tool declared ``READ``
that writes; a strategy that hoists reads; limiters wider than the
configuration) and the check must fail on it with a counter-example naming
the calls; the same check passes on correct configurations.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Literal

import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis.stateful import run_state_machine_as_test

import toolexec.testing as testing
from toolexec import (
    Batched,
    ConcurrencyConfig,
    ErrorClass,
    ExecutionStrategy,
    Parallel,
    PoolStatistics,
    RoutingClass,
    Sequential,
    SideEffects,
    TextContent,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    function_tool,
)
from toolexec._core._limits import Pools
from toolexec._gate._schema import compile_schema
from toolexec.testing import (
    OrderingError,
    OrderingMachine,
    check_batch,
    check_ordering,
    tool_arguments,
    tool_call,
    tool_calls,
)
from toolexec.testing._checks import problems
from toolexec.testing._recording import Recording, Span, _Recorded, record_batch
from toolexec.testing._schemas import BAD_JSON, invalid_arguments

if TYPE_CHECKING:
    from collections.abc import Sequence

    from toolexec.testing import Expected

# Slow (tests/README.md): hypothesis runs of the ordering checks, planted bugs shrunk.
pytestmark = pytest.mark.slow

Key = Literal["a", "b"]


class Store(dict[str, int]):
    """The state every tool below acts on, handed to the executor as a service."""


def snapshot(executor: ToolExecutor) -> dict[str, int]:
    store = executor.service(Store)
    assert store is not None
    return dict(store)


def registry_over(store: Store, *, sneaky_get: bool = False) -> ToolRegistry:
    """get (read), put (serial mutator), incr (promoted), count (a sync read)."""

    @function_tool(side_effects=SideEffects.READ)
    async def get(key: Key, delay: Literal[0, 1, 2] = 1) -> str:
        """Read a key."""
        await trio.sleep(delay)
        if sneaky_get:  # the planted bug: a "read" that writes
            store[key] = store.get(key, 0) + 1
        return f"{key}={store.get(key, 0)}"

    @function_tool(side_effects=SideEffects.WRITE)
    async def put(key: Key, value: int, delay: Literal[0, 1, 2] = 1) -> str:
        """Overwrite a key."""
        await trio.sleep(delay)
        store[key] = value
        return "ok"

    @function_tool(side_effects=SideEffects.WRITE)
    async def incr(key: Key, delay: Literal[0, 1, 2] = 1) -> str:
        """Add one to a key (commutes with itself, so the host promotes it)."""
        await trio.sleep(delay)
        store[key] = store.get(key, 0) + 1
        return "ok"

    @function_tool(side_effects=SideEffects.NONE)
    def count() -> str:
        """Count the keys, in a worker thread."""
        return str(len(store))

    registry = ToolRegistry()
    for tool in (get, put, incr, count):
        registry.register(tool)
    return registry


CONFIG = ConcurrencyConfig(
    read_width=3, concurrent_mut_width=2, per_tool={"get": 2}, promoted={"incr"}
)


def executor_for(
    strategy: ExecutionStrategy | None = None, *, sneaky_get: bool = False, **kw: Any
) -> ToolExecutor:
    store = Store()
    strategy = strategy if strategy is not None else Parallel()
    return ToolExecutor(
        registry_over(store, sneaky_get=sneaky_get), CONFIG, strategy, services=[store], **kw
    )


# -- correct configurations pass --------------------------------------------


@pytest.mark.parametrize("strategy", [Parallel(), Sequential(), Batched(2)])
def test_a_correct_configuration_passes(strategy: ExecutionStrategy) -> None:
    check_ordering(
        lambda: executor_for(strategy),
        examples=40,
        snapshot=snapshot,
        reference="sequential",
        seed=1,
    )


def test_the_recording_sees_the_concurrency_it_allows() -> None:
    """Not vacuous: a correct executor's reads and promoted mutators do overlap."""
    executor = executor_for()
    calls = [tool_call("get", {"key": "a"}, id=f"c{i}") for i in range(4)]
    calls += [tool_call("incr", {"key": "a"}, id=f"c{i}") for i in range(4, 7)]
    recording = record_batch(executor, calls)
    assert problems(recording, executor) == []
    assert recording.peak_tool == {"get": 2, "incr": 2}
    assert recording.peak_class == {RoutingClass.READ_ONLY: 2, RoutingClass.CONCURRENT_MUT: 2}


def test_it_passes_with_only_valid_calls_and_a_user_reference() -> None:
    def in_order(calls: Sequence[ToolCall]) -> list[Expected]:
        store: dict[str, int] = {}
        expected: list[Expected] = []
        for call in calls:
            raw = call.arguments
            args = json.loads(raw) if isinstance(raw, str) else dict(raw)
            key = args.get("key", "a")
            if call.name == "put":
                store[key] = args["value"]
            elif call.name == "incr":
                store[key] = store.get(key, 0) + 1
            expected.append(f"{key}={store.get(key, 0)}" if call.name == "get" else None)
        return expected

    check_ordering(executor_for, examples=30, invalid=False, reference=in_order, seed=2)


# -- planted bugs are found -------------------------------------------------


def sneaky() -> ToolExecutor:
    return executor_for(sneaky_get=True)


def test_a_read_that_writes_is_caught_by_the_snapshot_and_shrunk_to_one_call() -> None:
    with pytest.raises(OrderingError) as caught:
        check_ordering(sneaky, examples=100, snapshot=snapshot, seed=0)
    error = caught.value
    assert len(error.calls) == 1
    assert error.calls[0].name == "get"
    message = str(error)
    assert "c0 get" in message
    assert "declared SideEffects.READ" in message
    assert "the state changed while only read-only calls ran" in message


def test_a_read_that_writes_is_caught_by_the_in_order_reference() -> None:
    with pytest.raises(OrderingError) as caught:
        check_ordering(sneaky, examples=100, reference="sequential", seed=0)
    error = caught.value
    assert [c.name for c in error.calls] == ["get", "get"]
    assert "running the calls one at a time in call order gives" in str(error)
    assert any(p.startswith("c1 get: got") for p in error.problems)


class ReadsFirst(ExecutionStrategy):
    """A planted bug: a strategy that hoists every read before the mutators."""

    def cut(self, routes: Sequence[RoutingClass]) -> list[tuple[RoutingClass, list[int]]]:
        runs = Parallel().cut(routes)
        return sorted(runs, key=lambda run: run[0] is not RoutingClass.READ_ONLY)


def test_a_strategy_that_reorders_calls_is_caught() -> None:
    with pytest.raises(OrderingError) as caught:
        check_ordering(lambda: executor_for(ReadsFirst()), examples=100, seed=0)
    error = caught.value
    assert len(error.calls) == 2
    (line,) = error.problems
    # c1 is a read (get or count: both shrink to the same smallest batch) run first
    assert "(read_only) ran before earlier c0" in line
    assert line.startswith("c1 ")


def test_promoting_a_mutator_that_does_not_commute_is_caught() -> None:
    """A planted bug: the host promotes ``put``, whose order matters."""

    def promoted_put() -> ToolExecutor:
        executor = executor_for()
        config = attrs.evolve(CONFIG, promoted={"incr", "put"})
        return attrs.evolve(executor, config=config, registry=executor.registry.subset(["put"]))

    with pytest.raises(OrderingError) as caught:
        check_ordering(
            promoted_put,
            examples=200,
            snapshot=snapshot,
            reference="sequential",
            invalid=False,
            seed=0,
        )
    error = caught.value
    assert [c.name for c in error.calls] == ["put", "put"]
    (line,) = error.problems
    assert line.startswith("the state after the batch is {'a': ")
    assert "in call order, {'a': " in line


def test_limiters_wider_than_the_configuration_are_caught() -> None:
    wide = Pools.create(ConcurrencyConfig(read_width=9, per_tool={"get": 9}))
    executor = executor_for(pools=wide)
    calls = [tool_call("get", {"key": "a"}, id=f"c{i}") for i in range(4)]
    with pytest.raises(OrderingError) as caught:
        check_batch(executor, calls)
    assert caught.value.problems == (
        "4 calls of get ran at once; its cap is 2",
        "4 read_only calls ran at once; the class width is 3",
    )
    assert '  c3 get {"key": "a"} -> read_only' in str(caught.value)


def test_check_batch_compares_with_expectations() -> None:
    executor = executor_for()
    calls = [
        tool_call("put", {"key": "a", "value": 5}, id="c0"),
        tool_call("get", {"key": "a"}, id="c1"),
        tool_call("nope", {}, id="c2"),
    ]
    outcome = check_batch(executor, calls, expected=["ok", "a=5", ErrorClass.NOT_FOUND])
    assert [r.text for r in outcome.results][:2] == ["ok", "a=5"]
    with pytest.raises(OrderingError) as caught:
        check_batch(executor, calls, expected=["ok", "a=4", None])
    assert caught.value.problems == ("c1 get: got 'a=5', but the reference gives 'a=4'",)
    with pytest.raises(OrderingError, match="2 expectation"):
        check_batch(executor, calls, expected=["ok", None])
    with pytest.raises(ValueError, match="its own id"):
        check_batch(executor, [calls[0], calls[0]])


def test_every_other_promise_is_checked_on_a_recording() -> None:
    executor = executor_for()
    calls = [
        tool_call("get", {"key": "a"}, id="c0"),
        tool_call("put", {"key": "a", "value": 1}, id="c1"),
    ]
    recording = record_batch(executor, calls)
    assert problems(recording, executor) == []
    # Pretend the executor misbehaved in every way the recording can show.
    outcome, stats = recording.outcome, recording.statistics
    assert outcome is not None
    assert stats is not None
    first, second = outcome.results
    recording.outcome = attrs.evolve(outcome, results=(second, first))
    recording.spans = [
        Span(0, "c0", "get", RoutingClass.READ_ONLY, 0, 3),
        Span(1, "c1", "put", RoutingClass.SERIAL_MUT, 1, None),
    ]
    recording.active = {"c1": recording.spans[1]}
    recording.leftover_tasks = 1
    recording.statistics = attrs.evolve(
        stats, read=PoolStatistics(3, 1, 1), per_tool={}, calls_in_flight=1
    )
    assert problems(recording, executor) == [
        "results ['c1', 'c0'] do not match calls ['c0', 'c1']",
        "c1 put (serial_mut) overlapped earlier c0 get (read_only)",
        "after the batch, the read limiter has 1 permit(s) out, 1 waiting",
        "after the batch, 1 call(s) are still in flight",
        "after the batch, these tools still run: c1",
        "after the batch, 1 trio task(s) are still alive",
    ]
    wrong = attrs.evolve(first, tool_name="put", is_error=True)
    recording.outcome = attrs.evolve(outcome, results=(wrong, second))
    assert problems(recording, executor)[:2] == [
        "c0: result names tool 'put', the call 'get'",
        "c0: is_error=True with error_class=None",
    ]


def test_unfinished_spans_overlap_everything_after_them() -> None:
    open_span = Span(0, "c0", "put", RoutingClass.SERIAL_MUT, 0)
    assert open_span.overlaps(Span(1, "c1", "get", RoutingClass.READ_ONLY, 5, 6))
    assert not Span(1, "c1", "get", RoutingClass.READ_ONLY, 5, 6).overlaps(
        Span(2, "c2", "get", RoutingClass.READ_ONLY, 6, 7)
    )


def test_a_recording_knows_call_positions() -> None:
    recording = Recording((ToolCall("x", "get", {}), ToolCall("y", "get", {})))
    assert recording.index_of("y") == 1


# -- the stateful machine ---------------------------------------------------


class KVMachine(OrderingMachine):
    sequential_reference = True
    max_calls = 5

    def make_executor(self) -> ToolExecutor:
        return executor_for()

    def snapshot(self, executor: ToolExecutor) -> object:
        return snapshot(executor)


class SneakyMachine(KVMachine):
    sequential_reference = False

    def make_executor(self) -> ToolExecutor:
        return sneaky()


MACHINE_SETTINGS = settings(max_examples=15, stateful_step_count=4, deadline=None)


def test_the_machine_passes_batches_one_after_another() -> None:
    run_state_machine_as_test(KVMachine, settings=MACHINE_SETTINGS)


def test_the_machine_catches_a_read_that_writes() -> None:
    with pytest.raises(OrderingError, match=r"declared SideEffects\.READ"):
        run_state_machine_as_test(
            SneakyMachine, settings=settings(MACHINE_SETTINGS, max_examples=50)
        )


def test_the_machine_without_make_executor_says_so() -> None:
    with pytest.raises(NotImplementedError, match="must define make_executor"):
        OrderingMachine()


def test_the_default_snapshot_sees_nothing() -> None:
    assert OrderingMachine.snapshot(KVMachine(), executor_for()) is None


# -- the strategies ----------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "minLength": 2, "maxLength": 4},
        "p": {"type": "string", "pattern": "^[a-c]{2}$"},
        "i": {"type": "integer", "exclusiveMinimum": 1, "maximum": 4},
        "j": {"type": "integer", "minimum": 0.5, "exclusiveMaximum": 3},
        "n": {"type": "number", "minimum": -1, "exclusiveMaximum": 1},
        "b": {"type": "boolean"},
        "z": {"type": "null"},
        "e": {"enum": ["x", "y"]},
        "c": {"const": 7},
        "t": {"type": ["integer", "string"], "minimum": 0, "maxLength": 1},
        "l": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
        "o": {"properties": {"k": {"type": "boolean"}}, "required": ["k"]},
        "any": {},
        "never": False,
        "untyped": {"items": True},
        "odd": {"type": "string", "format": "date"},
        "described": {"description": "no type, no properties: any scalar"},
        "u": {"anyOf": [{"type": "boolean"}, {"type": "string", "maxLength": 1}]},
    },
    "required": ["s", "i", "o"],
}
COMPILED = compile_schema(SCHEMA, tool="t")


@given(arguments=tool_arguments(SCHEMA))
def test_drawn_arguments_satisfy_their_schema(arguments: dict[str, Any]) -> None:
    assert COMPILED.is_valid(arguments), arguments
    assert "never" not in arguments


@given(arguments=invalid_arguments(COMPILED))
def test_invalid_arguments_are_refused(arguments: dict[str, Any] | str) -> None:
    if isinstance(arguments, str):
        assert arguments == BAD_JSON
    else:
        assert not COMPILED.is_valid(arguments), arguments


@given(arguments=invalid_arguments(compile_schema({"type": "object"}, tool="t")))
def test_a_schema_with_no_properties_breaks_into_bad_json(arguments: dict[str, Any] | str) -> None:
    assert arguments == BAD_JSON


@given(calls=tool_calls(registry_over(Store()), max_size=12))
def test_drawn_batches_have_ordered_unique_ids(calls: list[ToolCall]) -> None:
    assert [c.id for c in calls] == [f"c{i}" for i in range(len(calls))]
    assert all(c.name in ("get", "put", "incr", "count", "no_such_tool") for c in calls)


def test_unknown_names_avoid_registered_ones() -> None:
    registry = registry_over(Store())

    @function_tool(name="no_such_tool")
    def taken() -> str:
        """Squat the default unknown name."""
        return ""

    registry.register(taken)

    @given(calls=tool_calls(registry, invalid=False))
    @settings(max_examples=30)
    def check(calls: list[ToolCall]) -> None:
        assert all(c.name in registry or c.name == "no_such_tool_" for c in calls)

    check()


def test_an_empty_registry_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one tool"):
        tool_calls(ToolRegistry())


async def test_a_sub_agent_call_passes_through_unrecorded() -> None:
    store = Store(a=3)
    registry = registry_over(store)
    entry = registry.lookup("get")
    assert entry is not None
    recording = Recording((tool_call("get", {"key": "a"}, id="c0"),))
    wrapped = _Recorded(entry.factory(), recording, "root")
    ctx = ToolContext("c0", "get", agent_path="root/child")
    output = await wrapped.execute({"key": "a", "delay": 0}, ctx)
    assert output.content[0] == TextContent("a=3")
    assert recording.spans == []
    assert wrapped.definition is entry.definition


# -- hypothesis stays optional -----------------------------------------------


def test_importing_toolexec_testing_does_not_import_hypothesis() -> None:
    code = (
        "import sys; import toolexec.testing as t; "
        "assert 'hypothesis' not in sys.modules, 'imported'; "
        "t.ScriptedModel; t.check_batch; print('ok')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "ok"


def test_without_hypothesis_the_checks_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(vars(testing), "check_ordering", raising=False)
    monkeypatch.delitem(sys.modules, "toolexec.testing._checker", raising=False)
    monkeypatch.setitem(sys.modules, "hypothesis", None)
    with pytest.raises(ImportError, match="needs hypothesis"):
        testing.check_ordering  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        testing.nothing  # noqa: B018


def test_lazy_names_load_once_under_their_public_module() -> None:
    assert testing.check_ordering is check_ordering
    assert check_ordering.__module__ == "toolexec.testing"

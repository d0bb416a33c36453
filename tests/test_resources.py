"""Resource-keyed conflicts (``ToolExecutor(resource_conflicts=True)``), on real files.

Every test runs the real file tools over a temp workspace; a thin wrapper
records when each call's tool started and ended (a tick count), and holds
every started call until all the others are blocked, so calls that may
overlap do, and the recorded spans show which did.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

from toolexec import (
    ConcurrencyConfig,
    ErrorClass,
    Resource,
    RoutingClass,
    Sequential,
    SideEffects,
    ToolCall,
    ToolDefinition,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    Workspace,
    function_tool,
)
from toolexec.tools import EditFileTool, ListDirTool, ReadFileTool, ShellTool, WriteFileTool

if TYPE_CHECKING:
    from pathlib import Path


@attrs.define
class Spans:
    ticks: int = 0
    spans: dict[str, list[int]] = attrs.field(factory=dict)

    def tick(self) -> int:
        self.ticks += 1
        return self.ticks

    def overlap(self, a: str, b: str) -> bool:
        (s1, e1), (s2, e2) = self.spans[a], self.spans[b]
        return s1 < e2 and s2 < e1

    def before(self, a: str, b: str) -> bool:
        return self.spans[a][1] < self.spans[b][0]

    def peak(self, ids: list[str] | None = None) -> int:
        points = sorted(
            (t, d)
            for i, (s, e) in self.spans.items()
            if ids is None or i in ids
            for t, d in ((s, 1), (e, -1))
        )
        now = best = 0
        for _t, d in points:
            now += d
            best = max(best, now)
        return best


@attrs.define(eq=False)
class Recorded:
    inner: Any
    spans: Spans
    definition: ToolDefinition = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.definition = self.inner.definition

    def __call__(self) -> Recorded:
        return self

    async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
        span = self.spans.spans[ctx.call_id] = [self.spans.tick(), 0]
        try:
            await trio.testing.wait_all_tasks_blocked()
            return await self.inner.execute(arguments, ctx)  # type: ignore[no-any-return]
        finally:
            span[1] = self.spans.tick()


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    (tmp_path / "d").mkdir()
    (tmp_path / "a").write_text("A\n")
    (tmp_path / "d" / "c").write_text("C\n")
    (tmp_path / "la").symlink_to("a")
    (tmp_path / "ld").symlink_to("d")
    return Workspace(tmp_path)


def setup(ws: Workspace, *extra: Any, shell: bool = False, **kw: Any) -> tuple[ToolExecutor, Spans]:
    spans = Spans()
    registry = ToolRegistry()
    tools = [ReadFileTool(ws), WriteFileTool(ws), EditFileTool(ws), ListDirTool(ws), *extra]
    if shell:
        tools.append(ShellTool(ws))
    for tool in tools:
        registry.register(Recorded(tool, spans))
    kw.setdefault("resource_conflicts", True)
    return ToolExecutor(registry, **kw), spans


def run(executor: ToolExecutor, calls: list[ToolCall]) -> list[Any]:
    async def main() -> list[Any]:
        return list((await executor.execute_batch(calls)).results)

    return trio.run(main)


def write(cid: str, path: str, content: str = "x") -> ToolCall:
    return ToolCall(cid, "write_file", {"path": path, "content": content})


def read(cid: str, path: str) -> ToolCall:
    return ToolCall(cid, "read_file", {"path": path})


def test_writes_to_different_files_run_together_only_under_the_mode(ws: Workspace) -> None:
    calls = [write(str(i), f"f{i}.txt", str(i)) for i in range(10)]
    executor, spans = setup(ws)
    results = run(executor, calls)
    assert [r.call_id for r in results] == [str(i) for i in range(10)]  # call order
    assert not any(r.is_error for r in results)
    assert spans.peak() == 10
    assert {r.routing for r in results} == {RoutingClass.CONCURRENT_MUT}
    assert executor.prepare(calls).plan.describe().startswith("run 0 keyed: 0 write_file")

    plain, spans = setup(ws, resource_conflicts=False)
    run(plain, calls)
    assert spans.peak() == 1


def test_one_file_by_any_name_is_one_resource(ws: Workspace) -> None:
    executor, spans = setup(ws)
    names = ["a", "./a", "d/../a", "la", "ld/../a"]
    calls = [write(str(i), name, f"{i}\n") for i, name in enumerate(names)]
    calls.append(write("other", "d/other"))
    run(executor, calls)
    for i in range(len(names) - 1):
        assert spans.before(str(i), str(i + 1))
    assert spans.overlap("0", "other")
    assert (ws.root / "a").read_text() == f"{len(names) - 1}\n"


def test_reads_wait_only_for_earlier_writes_to_what_they_read(ws: Workspace) -> None:
    executor, spans = setup(ws)
    results = run(
        executor,
        [
            read("r1", "a"),
            read("r2", "la"),
            write("w", "a", "new\n"),
            read("r3", "a"),
            read("c", "ld/c"),
            write("wc", "d/c", "C2\n"),
        ],
    )
    text = {r.call_id: r.text for r in results}
    assert text["r1"] == text["r2"] == "A\n"
    assert text["r3"] == "new\n"
    assert text["c"] == "C\n"
    assert spans.overlap("r1", "r2")  # reads of one file together
    assert spans.before("r1", "w")
    assert spans.before("r2", "w")
    assert spans.before("w", "r3")
    assert spans.overlap("r1", "c")  # other files: not ordered at all
    assert spans.before("c", "wc")


def test_a_directory_covers_what_is_below_it(ws: Workspace) -> None:
    executor, spans = setup(ws)
    results = run(
        executor,
        [
            ToolCall("ls", "list_dir", {"path": "ld"}),
            write("w", "d/new"),
            write("elsewhere", "a"),
            ToolCall("ls2", "list_dir", {"path": ".", "depth": 2}),
        ],
    )
    assert "new" not in results[0].text
    assert "d/new" in results[3].text
    assert spans.before("ls", "w")
    assert spans.overlap("ls", "elsewhere")  # 'a' is not below 'd'
    assert spans.before("w", "ls2")  # '.' covers both writes
    assert spans.before("elsewhere", "ls2")


def test_a_write_that_creates_directories_covers_the_first_one_it_creates(
    ws: Workspace,
) -> None:
    executor, spans = setup(ws)
    results = run(
        executor,
        [
            read("r", "new/y/f"),
            write("w1", "new/x/f"),
            write("w2", "new/y/f", "yes"),
            read("r2", "new/y/f"),
            write("w3", "d/f"),
        ],
    )
    assert results[0].error_class is ErrorClass.EXECUTION_ERROR
    assert "'new' is missing" in results[0].text  # before anything made 'new'
    assert results[3].text == "yes"
    assert spans.before("r", "w1")
    assert spans.before("w1", "w2")
    assert spans.before("w2", "r2")
    assert spans.overlap("r", "w3")  # not below .new.: not ordered


def test_the_shell_touches_everything(ws: Workspace) -> None:
    executor, spans = setup(ws, shell=True)
    results = run(
        executor,
        [
            write("w1", "f1"),
            ToolCall("sh", "shell", {"command": "cat f1 a > both"}),
            write("w2", "f2"),
            read("r", "both"),
        ],
    )
    assert results[1].error_class is None, results[1].text
    assert results[3].text == "x" + "A\n"
    assert spans.before("w1", "sh")
    assert spans.before("sh", "w2")
    assert spans.before("sh", "r")
    assert results[1].routing is RoutingClass.SERIAL_MUT  # the tree-wide serial pool


def test_the_shell_changing_links_is_seen_by_the_calls_after_it(ws: Workspace) -> None:
    executor, spans = setup(ws, shell=True)
    results = run(
        executor,
        [
            ToolCall("sh", "shell", {"command": "ln -sfn a lnew"}),
            write("w", "lnew", "via"),
            read("r", "a"),
        ],
    )
    assert results[0].error_class is None, results[0].text
    assert results[2].text == "via"  # 'lnew' was keyed as 'a' once the link existed
    assert spans.before("w", "r")


def test_tools_that_declare_nothing_keep_their_class_runs(ws: Workspace) -> None:
    @function_tool(side_effects=SideEffects.WRITE)
    async def bump() -> str:
        """Declares no resources."""
        return "bumped"

    executor, spans = setup(ws, bump)
    calls = [write("w1", "f1"), write("w2", "f2"), ToolCall("b", "bump", {}), write("w3", "f3")]
    plan = executor.prepare(calls).plan
    assert [(r.keyed, r.routing) for r in plan.runs] == [
        (True, RoutingClass.SERIAL_MUT),
        (False, RoutingClass.SERIAL_MUT),
        (True, RoutingClass.SERIAL_MUT),
    ]
    run(executor, calls)
    assert spans.overlap("w1", "w2")
    assert spans.before("w2", "b")
    assert spans.before("b", "w3")


@attrs.define(eq=False)
class Held(Recorded):
    """``Recorded``, and each call holds until ``release``: what overlaps shows."""

    started: dict[str, trio.Event] = attrs.field(factory=dict)
    release: trio.Event = attrs.field(factory=trio.Event)

    async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
        span = self.spans.spans[ctx.call_id] = [self.spans.tick(), 0]
        self.started.setdefault(ctx.call_id, trio.Event()).set()
        try:
            await self.release.wait()
            return await self.inner.execute(arguments, ctx)  # type: ignore[no-any-return]
        finally:
            span[1] = self.spans.tick()


def test_a_streamed_batch_overlaps_writes_to_different_files_as_a_whole_one_does(
    ws: Workspace,
) -> None:
    spans = Spans()
    held = Held(WriteFileTool(ws), spans)
    registry = ToolRegistry()
    registry.register(held)
    executor = ToolExecutor(registry, resource_conflicts=True)
    calls = [write(str(i), f"f{i}.txt", str(i)) for i in range(6)]

    async def main() -> list[Any]:
        batch = executor.open_batch()

        async def feed() -> None:
            # Each call is added once the one before it runs: it can only start
            # alongside it. Were the calls run one after another, none would
            # start before the release, and the guard would end the wait.
            with trio.move_on_after(60):
                for call in calls:
                    batch.add(call)
                    await held.started.setdefault(call.id, trio.Event()).wait()
            batch.close()
            held.release.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(feed)
            outcome = await batch.run()
        assert outcome.plan == executor.prepare(calls).plan
        return list(outcome.results)

    results = trio.run(main)
    assert not any(r.is_error for r in results), [r.text for r in results]
    assert spans.peak() == len(calls)
    assert {r.routing for r in results} == {RoutingClass.CONCURRENT_MUT}


def test_a_streamed_batch_keeps_conflicting_calls_in_order(ws: Workspace) -> None:
    executor, spans = setup(ws)
    calls = [
        read("r1", "a"),
        write("w1", "a", "one\n"),
        write("other", "f"),
        write("w2", "a", "two\n"),
        read("r2", "a"),
        ToolCall("ls", "list_dir", {"path": "."}),
    ]

    async def main() -> list[Any]:
        batch = executor.open_batch()

        async def feed() -> None:
            for call in calls:
                batch.add(call)
                await trio.testing.wait_all_tasks_blocked()
            batch.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(feed)
            outcome = await batch.run()
        assert outcome.plan == executor.prepare(calls).plan
        return list(outcome.results)

    results = trio.run(main)
    assert [r.call_id for r in results] == [c.id for c in calls]
    assert results[0].text == "A\n"
    assert results[4].text == "two\n"
    for first, then in (("r1", "w1"), ("w1", "w2"), ("w2", "r2"), ("other", "ls"), ("w2", "ls")):
        assert spans.before(first, then), (first, then)


def test_caps_still_hold(ws: Workspace) -> None:
    config = ConcurrencyConfig(concurrent_mut_width=3, read_width=2, per_tool={"edit_file": 1})
    executor, spans = setup(ws, config=config)
    for i in range(6):
        (ws.root / f"e{i}").write_text("x")
    writes = [write(f"w{i}", f"f{i}") for i in range(8)]
    reads = [read(f"r{i}", "a") for i in range(5)]
    edits = [
        ToolCall(f"e{i}", "edit_file", {"path": f"e{i}", "old_string": "x", "new_string": "y"})
        for i in range(6)
    ]
    results = run(executor, writes + reads + edits)
    assert not any(r.is_error for r in results), [r.text for r in results if r.is_error]
    assert spans.peak([c.id for c in writes + edits]) == 3
    assert spans.peak([c.id for c in reads]) == 2
    assert spans.peak([c.id for c in edits]) == 1
    assert executor.statistics().concurrent_mut.borrowed == 0


def test_sequential_still_runs_one_call_at_a_time(ws: Workspace) -> None:
    executor, spans = setup(ws, strategy=Sequential())
    run(executor, [write(str(i), f"f{i}") for i in range(4)])
    assert spans.peak() == 1


def test_a_declaration_that_fails_touches_everything(
    ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(arguments: Any) -> list[Resource]:
        raise KeyError("oops")

    odd = ToolDefinition("odd", "Odd.", side_effects=SideEffects.WRITE, resources=broken)

    @attrs.define(eq=False)
    class Odd:
        definition: ToolDefinition = odd

        def __call__(self) -> Odd:
            return self

        async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
            return ToolOutput.text("odd")

    executor, spans = setup(ws, Odd())
    with caplog.at_level(logging.ERROR, logger="toolexec"):
        run(executor, [write("w1", "f1"), ToolCall("o", "odd", {}), write("w2", "f2")])
    assert "ordering it as touching everything" in caplog.text
    assert spans.before("w1", "o")
    assert spans.before("o", "w2")


def test_named_resources(ws: Workspace) -> None:
    db = ToolDefinition(
        "db",
        "Table access.",
        {
            "type": "object",
            "properties": {"table": {"type": "string"}, "w": {"type": "boolean"}},
        },
        SideEffects.WRITE,
        resources=lambda a: [Resource(("db", a["table"]), a.get("w", False))],
    )

    @attrs.define(eq=False)
    class Db:
        definition: ToolDefinition = db

        def __call__(self) -> Db:
            return self

        async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
            return ToolOutput.text("ok")

    executor, spans = setup(ws, Db())
    run(
        executor,
        [
            ToolCall("u1", "db", {"table": "users", "w": True}),
            ToolCall("o", "db", {"table": "orders", "w": True}),
            ToolCall("u2", "db", {"table": "users"}),
            ToolCall("f", "write_file", {"path": "f", "content": ""}),
        ],
    )
    assert spans.before("u1", "u2")
    assert spans.overlap("u1", "o")
    assert spans.overlap("u1", "f")


def test_a_cancelled_keyed_run_answers_every_call(ws: Workspace) -> None:
    executor, _spans = setup(ws)
    calls = [write(str(i), "same") for i in range(5)]

    async def main() -> list[Any]:
        batch = executor.prepare(calls)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: trio.testing.wait_all_tasks_blocked())
            nursery.cancel_scope.deadline = trio.current_time() + 30

            async def cancel_soon() -> None:
                await trio.testing.wait_all_tasks_blocked()
                batch.cancel()

            nursery.start_soon(cancel_soon)
            outcome = await batch.run()
        assert outcome.cancelled
        return list(outcome.results)

    results = trio.run(main)
    assert [r.call_id for r in results] == [str(i) for i in range(5)]
    assert ErrorClass.CANCELLED in {r.error_class for r in results}
    assert executor.statistics().calls_in_flight == 0


def test_a_fork_keeps_the_mode(ws: Workspace) -> None:
    executor, _ = setup(ws)
    assert executor.fork_for_subagent("c").resource_conflicts


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("db", "got the string 'db'"),
        (("db", ""), "part 1 of ('db', '') is ''"),
        (("db", 3), "part 1 of ('db', 3) is 3"),
        (5, "got 5"),
    ],
)
def test_bad_resource_keys_are_refused_clearly(value: object, message: str) -> None:
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Resource(value)


def test_resource_conflicts_must_be_a_bool(ws: Workspace) -> None:
    with pytest.raises(TypeError, match="resource_conflicts"):
        ToolExecutor(ToolRegistry(), resource_conflicts="yes")  # type: ignore[arg-type]


def test_conflicts() -> None:
    everything = Resource.everything(write=False)
    assert Resource.writes("db").conflicts_with(Resource.reads("db", "users"))
    assert not Resource.reads("db").conflicts_with(Resource.reads("db", "users"))
    assert not Resource.writes("db", "a").conflicts_with(Resource.writes("db", "b"))
    assert everything.conflicts_with(Resource.writes("x"))
    assert not everything.conflicts_with(Resource.reads("x"))


def test_odd_declarations_and_paths_touch_everything_or_the_whole_workspace(
    ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    from toolexec._tools._path_keys import everything_for, path_key

    root = path_key(ws, ".")
    assert path_key(ws, 42) == root  # not a path at all
    assert path_key(ws, "x/../gone/f") == root  # '..' through a missing directory
    (ws.root / "dl").symlink_to("nowhere/deeper")
    assert path_key(ws, "dl/f") == root  # a dangling link on the way
    assert path_key(ws, "new/f") == (*root, "new")

    def boom(_arguments: object) -> SideEffects:
        raise ValueError("no")

    assert everything_for(boom)({}) == [Resource.everything(write=True)]
    assert everything_for(lambda _a: SideEffects.READ)({}) == [Resource.everything(write=False)]

    with pytest.raises(TypeError, match=r"Resource\.write must be a bool, got 1"):
        Resource(("x",), 1)  # type: ignore[arg-type]

    bad = ToolDefinition(
        "bad",
        "Bad.",
        side_effects=SideEffects.WRITE,
        resources=lambda _a: ["not a resource"],  # type: ignore[list-item]
    )

    @attrs.define(eq=False)
    class Bad:
        definition: ToolDefinition = bad

        def __call__(self) -> Bad:
            return self

        async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
            return ToolOutput.text("bad")

    executor, spans = setup(ws, Bad())
    with caplog.at_level(logging.ERROR, logger="toolexec"):
        run(executor, [write("w1", "f1"), ToolCall("b", "bad", {}), write("w2", "f2")])
    assert "not Resource values" in caplog.text
    assert spans.before("w1", "b")
    assert spans.before("b", "w2")

"""Resource-keyed conflicts against the sequential reference, on real files.

Theory of operation. Hypothesis draws a *case*: a starting tree of files,
directories and symbolic links (links to files, to directories, dangling,
looping, and leading out of the root); a batch of calls to the real file
tools (``read_file``, ``write_file``, ``edit_file``, ``list_dir``) whose
paths name the same files in different ways (``a``, ``./a``, ``d/../a``, a
link to ``a``), reach through links, and create missing directories; plus
three in-process tools: ``relink``, which swaps symbolic links and declares
that it touches everything (as the shell does), ``note``, which keeps a
store keyed by name and declares named resources, and ``peek`` and
``stamp``, which declare nothing (class behaviour: a read-only barrier and
a serial one). Each call passes a *gate* before and after its tool: a
number of trio checkpoints, or a hold released by a controller task in a
drawn order whenever every other task is blocked. Class widths and the
strategy are drawn too, and whether the batch is given whole or streamed
(``open_batch``: each call added after a drawn number of checkpoints).

The batch runs twice, in two fresh temp dirs built identically: once on an
executor with ``resource_conflicts=True`` and once on a plain executor with
``Sequential()`` (one call after another in call order: the reference).
The checks: the same results (error class and text) call by call, the same
final tree (every entry's kind, content or link target) and the same notes;
and no class ran more calls at once than its width.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import event, given, settings
from hypothesis import strategies as st

from stress.conftest import stress_profile
from toolexec import (
    Batched,
    BatchOutcome,
    ConcurrencyConfig,
    Parallel,
    Resource,
    RoutingClass,
    Sequential,
    SideEffects,
    ToolCall,
    ToolDefinition,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    ToolResult,
    Workspace,
)
from toolexec.tools import EditFileTool, ListDirTool, ReadFileTool, WriteFileTool

FILES = ["a", "b", "d/c", "d/e/f"]
LINKS = {
    "la": "a",
    "ld": "d",
    "lde": "d/e",
    "dangle": "gone/x",
    "loop": "loop",
    "out": "../outside",
}
PATHS = [
    "a",
    "./a",
    "d/../a",
    "la",
    "b",
    "d/c",
    "ld/c",
    "ld/../b",
    "d/e/f",
    "lde/f",
    "ld/e/f",
    "d/e",
    "new/x",
    "new/y/z",
    "ld/new2/w",
    "dangle",
    "gone/x",
    "out",
    "loop",
    "a/x",
    "lnew/x",
]
DIRS = [".", "d", "ld", "d/e", "new", "new/y", "lnew", "a"]
TEXT = ["x", "y", "xy", "1", ""]
RELINK_NAMES = ["la", "ld", "lnew", "new"]
RELINK_TARGETS = ["a", "b", "d", "new"]
NOTE_KEYS = ["n1", "n2"]


# -- the tools ------------------------------------------------------------------


@attrs.define
class Gates:
    """How each call waits before and after its tool, and what overlapped."""

    plan: dict[str, tuple[int | str, int | str]] = attrs.field(factory=dict)
    holds: dict[str, trio.Event] = attrs.field(factory=dict)
    spans: dict[str, tuple[int, int]] = attrs.field(factory=dict)
    clock: int = 0

    async def wait(self, call_id: str, which: int) -> None:
        gate = self.plan.get(call_id, (0, 0))[which]
        if gate == "hold":
            await self.holds[f"{call_id}:{which}"].wait()
        else:
            for _ in range(int(gate)):
                await trio.lowlevel.checkpoint()

    def tick(self) -> int:
        self.clock += 1
        return self.clock


@attrs.define(eq=False)
class Gated:
    """A tool that passes its call's gates around the real tool."""

    inner: Any
    gates: Gates
    definition: ToolDefinition = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.definition = self.inner.definition

    def __call__(self) -> Gated:
        return self

    async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
        await self.gates.wait(ctx.call_id, 0)
        start = self.gates.tick()
        try:
            return await self.inner.execute(arguments, ctx)  # type: ignore[no-any-return]
        finally:
            self.gates.spans[ctx.call_id] = (start, self.gates.tick())
            await self.gates.wait(ctx.call_id, 1)


def _schema(**props: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": "string"} for k in props},
        "required": list(props),
        "additionalProperties": False,
    }


@attrs.define(eq=False)
class Relink:
    """Point the link ``name`` at ``target`` (it touches everything)."""

    root: Path
    definition: ToolDefinition = attrs.field(
        init=False,
        default=ToolDefinition(
            "relink",
            "Swap a link.",
            _schema(name=1, target=1),
            SideEffects.WRITE,
            resources=lambda _a: [Resource.everything()],
        ),
    )

    def __call__(self) -> Relink:
        return self

    async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
        where = self.root / arguments["name"]
        if where.exists() and not where.is_symlink():
            return ToolOutput.text(f"{arguments['name']} is not a link", is_error=True)
        if where.is_symlink():
            where.unlink()
        where.symlink_to(arguments["target"])
        await trio.lowlevel.checkpoint()
        return ToolOutput.text("relinked")


@attrs.define(eq=False)
class Note:
    """Append to a named note; return what it held (named resources)."""

    notes: dict[str, str]
    definition: ToolDefinition = attrs.field(
        init=False,
        default=ToolDefinition(
            "note",
            "Append to a note.",
            _schema(key=1, text=1),
            SideEffects.WRITE,
            resources=lambda a: [Resource.writes("notes", a["key"])],
        ),
    )

    def __call__(self) -> Note:
        return self

    async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
        before = self.notes.get(arguments["key"], "")
        await trio.lowlevel.checkpoint()
        self.notes[arguments["key"]] = before + arguments["text"]
        return ToolOutput.text(f"was {before!r}")


@attrs.define(eq=False)
class Peek:
    """List every entry of the tree (declares nothing: a read-only barrier)."""

    root: Path
    definition: ToolDefinition = attrs.field(
        init=False, default=ToolDefinition("peek", "List all.", _schema(), SideEffects.READ)
    )

    def __call__(self) -> Peek:
        return self

    async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
        return ToolOutput.text(repr(sorted(tree_of(self.root).items())))


@attrs.define(eq=False)
class Stamp:
    """Append to the file ``stamp`` directly (declares nothing: a serial barrier)."""

    root: Path
    definition: ToolDefinition = attrs.field(
        init=False, default=ToolDefinition("stamp", "Stamp.", _schema(), SideEffects.WRITE)
    )

    def __call__(self) -> Stamp:
        return self

    async def execute(self, arguments: Any, ctx: Any) -> ToolOutput:
        where = self.root / "stamp"
        before = where.read_text() if where.exists() else ""
        await trio.lowlevel.checkpoint()
        where.write_text(before + "s")
        return ToolOutput.text(f"stamped {len(before) + 1}")


def tree_of(root: Path) -> dict[str, str]:
    """Every entry below ``root``: a file's content, a dir, a link's target."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = str(full.relative_to(root))
            if full.is_symlink():
                found[rel] = "-> " + os.readlink(full)
            elif full.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = "file " + full.read_text()
    return found


def build(root: Path, files: dict[str, str], links: list[str]) -> None:
    (root / "d" / "e").mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text)
    for name in links:
        (root / name).symlink_to(LINKS[name])


# -- the cases ------------------------------------------------------------------

# Mostly a few names that alias each other (directly, through links, and
# through links a ``relink`` call swaps), so conflicts are common.
ALIASES = ["a", "b", "la", "ld/c", "d/c", "lnew/x", "new/x"]
path = st.one_of(st.sampled_from(ALIASES), st.sampled_from(PATHS))
text = st.sampled_from(TEXT)
CALLS = st.one_of(
    st.builds(lambda p: ("read_file", {"path": p}), path),
    st.builds(lambda p, t: ("write_file", {"path": p, "content": t}), path, text),
    st.builds(
        lambda p, o, n: ("edit_file", {"path": p, "old_string": o, "new_string": n}),
        path,
        st.sampled_from(["x", "y", "1"]),
        st.sampled_from(["x", "y", "z"]),
    ),
    st.builds(
        lambda p, depth: ("list_dir", {"path": p, "depth": depth}),
        st.sampled_from(DIRS),
        st.integers(1, 3),
    ),
    st.builds(lambda: ("list_dir", {})),
    st.builds(
        lambda n, t: ("relink", {"name": n, "target": t}),
        st.sampled_from(RELINK_NAMES),
        st.sampled_from(RELINK_TARGETS),
    ),
    st.builds(lambda k, t: ("note", {"key": k, "text": t}), st.sampled_from(NOTE_KEYS), text),
    st.just(("peek", {})),
    st.just(("stamp", {})),
)
GATE = st.one_of(st.just(0), st.integers(1, 12), st.just("hold"))


@attrs.frozen
class Case:
    files: dict[str, str]
    links: list[str]
    calls: list[tuple[str, dict[str, Any]]]
    gates: list[tuple[int | str, int | str]]
    release: list[int]
    read_width: int
    mut_width: int
    chunk: int | None
    feed: list[int] | None  # streamed: checkpoints before each add; None: whole


@st.composite
def cases(draw: st.DrawFn) -> Case:
    files = draw(st.dictionaries(st.sampled_from(FILES), text, max_size=4))
    links = draw(st.lists(st.sampled_from(sorted(LINKS)), unique=True, max_size=6))
    calls = draw(st.lists(CALLS, min_size=1, max_size=14))
    gates = draw(st.lists(st.tuples(GATE, GATE), min_size=len(calls), max_size=len(calls)))
    release = draw(st.permutations(range(2 * len(calls))))
    return Case(
        files,
        links,
        calls,
        gates,
        list(release),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 4)),
        draw(st.one_of(st.none(), st.integers(1, 5))),
        draw(
            st.one_of(
                st.none(), st.lists(st.integers(0, 3), min_size=len(calls), max_size=len(calls))
            )
        ),
    )


# -- running --------------------------------------------------------------------


def registry_for(root: Path, gates: Gates, notes: dict[str, str]) -> ToolRegistry:
    ws = Workspace(root)
    registry = ToolRegistry()
    for tool in (
        ReadFileTool(ws),
        WriteFileTool(ws),
        EditFileTool(ws),
        ListDirTool(ws),
        Relink(root),
        Note(notes),
        Peek(root),
        Stamp(root),
    ):
        registry.register(Gated(tool, gates))
    return registry


def observed(result: ToolResult) -> tuple[object, ...]:
    return (result.call_id, result.tool_name, result.error_class, result.text)


async def release_holds(gates: Gates, order: list[int]) -> None:
    """Release held gates one at a time, in the drawn order, whenever all else is blocked."""
    for n in order:
        key = f"{n // 2}:{n % 2}"
        if key in gates.holds:
            await trio.testing.wait_all_tasks_blocked()
            gates.holds[key].set()


def run_case(
    case: Case, root: Path, *, keyed: bool
) -> tuple[list[ToolResult], Gates, dict[str, str]]:
    build(root, case.files, case.links)
    gates = Gates()
    for i, (before, after) in enumerate(case.gates):
        gates.plan[str(i)] = (before, after)
        for which, gate in enumerate((before, after)):
            if gate == "hold":
                gates.holds[f"{i}:{which}"] = trio.Event()
    notes: dict[str, str] = {}
    registry = registry_for(root, gates, notes)
    if keyed:
        strategy = Parallel() if case.chunk is None else Batched(case.chunk)
        config = ConcurrencyConfig(read_width=case.read_width, concurrent_mut_width=case.mut_width)
        executor = ToolExecutor(registry, config=config, strategy=strategy, resource_conflicts=True)
    else:
        executor = ToolExecutor(registry, strategy=Sequential())
    calls = [ToolCall(str(i), name, args) for i, (name, args) in enumerate(case.calls)]

    async def main() -> list[ToolResult]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(release_holds, gates, case.release)
            if keyed and case.feed is not None:
                outcome = await streamed(executor, calls, case.feed)
            else:
                outcome = await executor.execute_batch(calls)
            for hold in gates.holds.values():
                hold.set()
        return list(outcome.results)

    return trio.run(main), gates, notes


async def streamed(executor: ToolExecutor, calls: list[ToolCall], feed: list[int]) -> BatchOutcome:
    """Run ``calls`` as a streamed batch, each added after ``feed[i]`` checkpoints."""
    batch = executor.open_batch()

    async def add_all() -> None:
        for call, checkpoints in zip(calls, feed, strict=True):
            for _ in range(checkpoints):
                await trio.lowlevel.checkpoint()
            batch.add(call)
        batch.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(add_all)
        outcome = await batch.run()
    assert outcome.plan == executor.prepare(calls).plan
    return outcome


def peak_by_class(
    results: list[ToolResult], spans: dict[str, tuple[int, int]]
) -> Counter[RoutingClass]:
    points = []
    routing = {r.call_id: r.routing for r in results}
    for call_id, (start, end) in spans.items():
        points += [(start, 1, routing[call_id]), (end, -1, routing[call_id])]
    now: Counter[RoutingClass] = Counter()
    peak: Counter[RoutingClass] = Counter()
    for _t, delta, route in sorted(points, key=lambda p: p[0]):
        now[route] += delta
        peak[route] = max(peak[route], now[route])
    return peak


@settings(settings.get_profile(stress_profile()))
@given(cases())
def test_every_schedule_matches_the_sequential_reference(case: Case) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        keyed_root, reference_root = Path(tmp, "keyed"), Path(tmp, "reference")
        keyed_root.mkdir()
        reference_root.mkdir()
        results, gates, notes = run_case(case, keyed_root, keyed=True)
        expected, _, expected_notes = run_case(case, reference_root, keyed=False)
        assert [observed(r) for r in results] == [observed(r) for r in expected]
        assert tree_of(keyed_root) == tree_of(reference_root)
        assert notes == expected_notes
    peak = peak_by_class(results, gates.spans)
    assert peak[RoutingClass.READ_ONLY] <= case.read_width
    assert peak[RoutingClass.CONCURRENT_MUT] <= case.mut_width
    assert peak[RoutingClass.SERIAL_MUT] <= 1
    overlapped = sum(peak.values()) > 1 and max(peak.values()) > 1
    event(f"calls overlapped: {overlapped}")

"""SubAgentTool and tree limits: results, events, limits, permissions, cancellation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

from conftest import live_tasks
from toolexec import (
    AgentLoop,
    AgentTree,
    Allow,
    ConcurrencyConfig,
    Deny,
    ErrorClass,
    Sequential,
    SideEffects,
    StopReason,
    SubAgentTool,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    TreeLimits,
    function_tool,
)
from toolexec.events import (
    CallbackSink,
    CallCompleted,
    CallFailed,
    CallProgress,
    CallStarted,
    Event,
    TraceRecorder,
)
from toolexec.models import ModelResponse
from toolexec.policy import ExecutionGrant
from toolexec.testing import ScriptedModel, tool_call

if TYPE_CHECKING:
    from collections.abc import Awaitable, Mapping

    from toolexec import AgentResult
    from toolexec.models import Model
    from toolexec.policy import Decision


@function_tool(side_effects=SideEffects.READ)
async def lookup(key: str) -> str:
    """Look a key up."""
    await trio.lowlevel.checkpoint()
    return f"value of {key}"


@function_tool(side_effects=SideEffects.EXECUTE)
async def shell(command: str) -> str:
    """Run a command (pretend)."""
    await trio.lowlevel.checkpoint()
    return f"ran {command}"


def delegate(task: str) -> Any:
    return tool_call("researcher", {"task": task})


def make_executor(
    researcher: SubAgentTool, *, events: list[Event] | None = None, **kw: Any
) -> ToolExecutor:
    registry = ToolRegistry()
    registry.register(lookup)
    registry.register(shell)
    registry.register(researcher)
    sinks = [CallbackSink(events.append)] if events is not None else []
    return ToolExecutor(registry, sinks=sinks, **kw)


def tree_of(executor: ToolExecutor) -> AgentTree:
    tree = executor.service(AgentTree)
    assert tree is not None, "no sub-agent has started under this executor"
    return tree


def researcher_tool(model: Model | Any, **kw: Any) -> SubAgentTool:
    return SubAgentTool(
        name="researcher",
        description="Research a question and report back.",
        system_prompt="You research.",
        model=model,
        **kw,
    )


async def test_child_final_text_is_the_parent_tool_result() -> None:
    child_model = ScriptedModel(
        [
            tool_call("lookup", {"key": "population"}),
            lambda messages: f"answer: {messages[-1].tool_results[0].text}",
        ]
    )
    executor = make_executor(researcher_tool(child_model))
    root_model = ScriptedModel(
        [delegate("find the population"), lambda m: m[-1].tool_results[0].text]
    )
    result = await AgentLoop(root_model, executor).run("go")

    assert result.text == "answer: value of population"
    sub_result = result.transcript[-2].tool_results[0]
    assert not sub_result.is_error
    assert sub_result.text == "answer: value of population"
    assert sub_result.details["agent_path"] == "root/researcher#1"
    assert sub_result.details["stop_reason"] == "finished"
    assert sub_result.details["turns"] == 2
    assert re.fullmatch(r"loop-[0-9a-f]{16,}", sub_result.details["child_loop_id"])
    # The child saw its system prompt, its task and the tools it may use.
    first = child_model.requests[0]
    assert [m.text for m in first.messages] == ["You research.", "find the population"]
    assert first.tool_names == ("lookup", "shell", "researcher")


async def test_sibling_paths_are_unique_and_each_child_gets_its_own_model() -> None:
    events: list[Event] = []
    made: list[ScriptedModel] = []

    def new_model() -> ScriptedModel:
        made.append(ScriptedModel([lambda m: f"did {m[-1].text}"]))
        return made[-1]

    executor = make_executor(researcher_tool(new_model), events=events)
    root_model = ScriptedModel([[delegate("a"), delegate("b")], [delegate("c")], "done"])
    result = await AgentLoop(root_model, executor).run("go")

    assert result.finished
    paths = sorted(r.details["agent_path"] for m in result.transcript for r in m.tool_results)
    assert paths == ["root/researcher#1", "root/researcher#2", "root/researcher#3"]
    assert len(made) == 3
    assert all(m.remaining == 0 for m in made)
    stats = tree_of(executor).statistics()
    assert (stats.live_agents, stats.started, stats.refused) == (1, 3, 0)
    assert stats.peak_agents >= 2


async def test_tree_events_are_tagged_and_causally_nested() -> None:
    events: list[Event] = []
    grandchild = ScriptedModel([tool_call("lookup", {"key": "deep"}), "deep answer"])
    child = ScriptedModel([delegate("dig"), "child answer"])
    models = iter([child, grandchild])
    executor = make_executor(researcher_tool(lambda: next(models)), events=events)
    await AgentLoop(ScriptedModel([delegate("top"), "root answer"]), executor).run("go")

    def span(path: str, tool: str) -> tuple[int, int]:
        start = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, CallStarted) and e.agent_path == path and e.tool_name == tool
        )
        end = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, (CallCompleted, CallFailed))
            and e.agent_path == path
            and e.tool_name == tool
        )
        return start, end

    paths = {e.agent_path for e in events}
    assert paths == {"root", "root/researcher#1", "root/researcher#1/researcher#1"}
    root_start, root_end = span("root", "researcher")
    child_start, child_end = span("root/researcher#1", "researcher")
    leaf_start, leaf_end = span("root/researcher#1/researcher#1", "lookup")
    assert root_start < child_start < leaf_start < leaf_end < child_end < root_end
    # Every event of a descendant lies inside the span of the call that started it.
    for i, e in enumerate(events):
        if e.agent_path.startswith("root/researcher#1/"):
            assert child_start < i < child_end
        elif e.agent_path.startswith("root/"):
            assert root_start < i < root_end


async def test_sibling_children_name_their_own_parent_call() -> None:
    events: list[Event] = []
    children = iter(
        [
            ScriptedModel([tool_call("lookup", {"key": "a"}), "a done"]),
            ScriptedModel([tool_call("lookup", {"key": "b"}), delegate("deeper"), "b done"]),
            ScriptedModel([tool_call("lookup", {"key": "z"}), "deepest"]),
        ]
    )
    executor = make_executor(researcher_tool(lambda: next(children)), events=events)
    root = ScriptedModel(
        [[tool_call("researcher", {"task": "a"}, id="p-a"), delegate("b")], "done"]
    )
    result = await AgentLoop(root, executor).run("go")

    by_path = {r.details["agent_path"]: r.call_id for r in result.transcript[-2].tool_results}
    assert sorted(by_path) == ["root/researcher#1", "root/researcher#2"]
    assert "p-a" in by_path.values()
    root_batch = next(e.batch_id for e in events if e.agent_path == "root")
    researcher_calls = {
        (e.batch_id, e.call_id)
        for e in events
        if isinstance(e, CallStarted) and e.tool_name == "researcher"
    }
    deep = set()
    for e in events:
        if e.agent_path == "root":
            assert (e.parent_batch_id, e.parent_call_id) == (None, None)
        elif e.agent_path in by_path:
            assert (e.parent_batch_id, e.parent_call_id) == (root_batch, by_path[e.agent_path])
        else:  # the grandchild names its parent's call, in its parent's batch
            parent_path = e.agent_path.rsplit("/", 1)[0]
            assert parent_path in by_path
            assert e.parent_batch_id is not None
            assert e.parent_batch_id.startswith(f"{parent_path}:b")
            assert (e.parent_batch_id, e.parent_call_id) in researcher_calls
            deep.add(e.agent_path)
    assert len(deep) == 1


async def test_trace_recorder_names_the_parent_call_of_each_child_batch() -> None:
    recorder = TraceRecorder()
    executor = make_executor(
        researcher_tool(lambda: ScriptedModel([tool_call("lookup", {"key": "k"}), "done"]))
    )
    executor = attrs.evolve(executor, sinks=[recorder])
    root = ScriptedModel(
        [[tool_call("researcher", {"task": t}, id=f"p-{t}") for t in "ab"], "done"]
    )
    result = await AgentLoop(root, executor).run("go")

    parents = {r.details["agent_path"]: r.call_id for r in result.transcript[-2].tool_results}
    trace = recorder.chrome_trace()["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in trace if e.get("name") == "process_name"}
    batches = [e for e in trace if e["ph"] == "X" and e["cat"] == "batch"]
    assert len(batches) == 3
    for batch in batches:
        path = batch["name"].removeprefix("batch ").rsplit(":", 1)[0]
        if path == "root":
            assert "parent_call_id" not in batch["args"]
            continue
        assert batch["args"]["parent_call_id"] == parents[path]
        assert batch["args"]["parent_batch_id"] == "root:b0"
        assert names[batch["pid"]] == f"agent {path} (under {parents[path]})"


async def test_child_progress_reaches_the_parent_call() -> None:
    events: list[Event] = []
    child = ScriptedModel([tool_call("lookup", {"key": "k"}), "done"])
    executor = make_executor(researcher_tool(child), events=events)
    await AgentLoop(ScriptedModel([delegate("x"), "ok"]), executor).run("go")
    progress = [e for e in events if isinstance(e, CallProgress)]
    assert [(e.agent_path, e.tool_name, e.message) for e in progress] == [
        ("root", "researcher", "root/researcher#1: turn 1: 1 tool call(s): lookup"),
        ("root", "researcher", "root/researcher#1: turn 2: answered"),
    ]


async def test_a_child_that_runs_out_of_turns_gives_an_error_result() -> None:
    child = ScriptedModel([answer_with_call("thinking"), answer_with_call("still")])
    executor = make_executor(researcher_tool(child, max_turns=2))
    result = await AgentLoop(ScriptedModel([delegate("x"), "ok"]), executor).run("go")
    sub = result.transcript[2].tool_results[0]
    assert sub.is_error
    assert sub.error_class is ErrorClass.EXECUTION_ERROR
    assert sub.text == (
        "Sub-agent 'researcher' stopped after 2 turns without a final answer. Its last words: still"
    )
    assert sub.details["stop_reason"] == StopReason.MAX_TURNS.value


def answer_with_call(text: str) -> ModelResponse:
    return ModelResponse(text, (tool_call("lookup", {"key": text}),))


async def test_a_failing_child_model_gives_an_error_result_and_frees_its_place() -> None:
    executor = make_executor(researcher_tool(lambda: ScriptedModel([])), services=[AgentTree()])
    result = await AgentLoop(ScriptedModel([delegate("x"), "ok"]), executor).run("go")
    sub = result.transcript[2].tool_results[0]
    assert sub.error_class is ErrorClass.EXECUTION_ERROR
    assert "ScriptExhaustedError: ScriptedModel ran out of steps" in sub.text
    assert tree_of(executor).statistics().live_agents == 1


# -- limits -----------------------------------------------------------------------


async def test_depth_limit_gives_an_error_result_at_once(autojump_clock: object) -> None:
    # Every agent tries to delegate once more; the tree allows two levels.
    def model() -> ScriptedModel:
        return ScriptedModel([delegate("deeper"), lambda m: "got: " + m[-1].tool_results[0].text])

    executor = make_executor(researcher_tool(model), services=[AgentTree(TreeLimits(max_depth=2))])
    with trio.fail_after(1):
        result = await AgentLoop(model(), executor).run("go")
    assert result.text.startswith("got: got: got: Sub-agent 'researcher' was not started:")
    assert "'root/researcher#1/researcher#1' is at the maximum depth" in result.text
    assert tree_of(executor).statistics().refused == 1


async def test_live_children_limit_refuses_the_extra_child_without_waiting() -> None:
    release = trio.Event()

    async def wait_then_answer(messages: object) -> str:
        await release.wait()
        return "child done"

    def model() -> ScriptedModel:
        return ScriptedModel([wait_then_answer])

    events: list[Event] = []
    executor = make_executor(
        researcher_tool(model), events=events, services=[AgentTree(TreeLimits(max_children=2))]
    )
    root = ScriptedModel([[delegate("a"), delegate("b"), delegate("c")], "done"])
    box: list[AgentResult] = []

    async def run() -> None:
        box.append(await AgentLoop(root, executor).run("go"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        refused = [e for e in events if isinstance(e, CallFailed)]
        assert len(refused) == 1  # answered while the other two still run
        assert "already has 2 sub-agents running (limit 2)" in refused[0].message
        release.set()
    texts = [r.text for r in box[0].transcript[2].tool_results]
    assert texts.count("child done") == 2
    (other,) = (t for t in texts if t != "child done")
    assert other.startswith("Sub-agent 'researcher' was not started: agent 'root'")


async def test_tree_size_limit_counts_every_live_agent() -> None:
    release = trio.Event()

    async def wait_then_answer(messages: object) -> str:
        await release.wait()
        return "child done"

    executor = make_executor(
        researcher_tool(lambda: ScriptedModel([wait_then_answer])),
        services=[AgentTree(TreeLimits(max_agents=3))],
    )
    root = ScriptedModel([[delegate("a"), delegate("b"), delegate("c")], "done"])
    async with trio.open_nursery() as nursery:
        box: list[AgentResult] = []
        nursery.start_soon(lambda: _store(box, AgentLoop(root, executor).run("go")))
        await trio.testing.wait_all_tasks_blocked()
        assert tree_of(executor).statistics().live_agents == 3
        release.set()
    results = box[0].transcript[2].tool_results
    errors = [r for r in results if r.is_error]
    assert len(errors) == 1
    assert "the agent tree already has 3 agents running (limit 3)" in errors[0].text


async def _store(box: list[AgentResult], coro: Awaitable[AgentResult]) -> None:
    box.append(await coro)


async def test_a_tool_can_tighten_the_limits_of_its_subtree() -> None:
    def model() -> ScriptedModel:
        return ScriptedModel([delegate("again"), lambda m: m[-1].tool_results[0].text])

    executor = make_executor(researcher_tool(model, limits=TreeLimits(max_depth=0)))
    result = await AgentLoop(model(), executor).run("go")
    assert "agent 'root/researcher#1' is at the maximum depth" in result.text


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="max_agents must be an integer >= 1"):
        TreeLimits(max_agents=0)
    with pytest.raises(ValueError, match="max_depth"):
        TreeLimits(max_depth=-1)


def test_tools_must_be_a_list_of_names() -> None:
    with pytest.raises(TypeError, match="list of tool names"):
        researcher_tool(ScriptedModel([]), tools="lookup")


async def test_steering_skips_sub_agents_not_yet_started() -> None:
    polls = []

    def steering() -> list[str]:
        polls.append(1)
        return ["never mind"] if len(polls) == 1 else []

    made: list[ScriptedModel] = []

    def model() -> ScriptedModel:
        made.append(ScriptedModel(["child done"]))
        return made[-1]

    executor = make_executor(researcher_tool(model), strategy=Sequential(), steering=steering)
    root = ScriptedModel([[delegate("a"), delegate("b")], lambda m: m[-1].text])
    result = await AgentLoop(root, executor).run("go")
    first, second = result.transcript[2].tool_results
    assert first.text == "child done"
    assert second.error_class is ErrorClass.SKIPPED
    assert len(made) == 1
    assert result.text == "never mind"
    assert tree_of(executor).statistics().started == 1


# -- permissions ---------------------------------------------------------------------


async def test_child_tools_are_a_subset_of_the_parent() -> None:
    child = ScriptedModel(
        [tool_call("shell", {"command": "rm -rf /"}), lambda m: m[-1].tool_results[0].text]
    )
    executor = make_executor(researcher_tool(child, tools=["lookup"]))
    result = await AgentLoop(
        ScriptedModel([delegate("x"), lambda m: m[-1].tool_results[0].text]), executor
    ).run("go")
    assert child.requests[0].tool_names == ("lookup",)
    assert result.text == "Tool 'shell' not found. Available: lookup"


async def test_a_child_cannot_name_a_tool_its_parent_lacks() -> None:
    child = ScriptedModel(["unreachable"])
    sub = researcher_tool(child, tools=["lookup", "deploy"])
    executor = make_executor(sub, services=[AgentTree()])
    result = await AgentLoop(ScriptedModel([delegate("x"), "done"]), executor).run("go")
    sub_result = result.transcript[2].tool_results[0]
    assert sub_result.error_class is ErrorClass.PERMISSION_DENIED
    assert "has no tool named 'deploy'" in sub_result.text
    assert child.remaining == 1
    assert tree_of(executor).statistics().live_agents == 1
    assert tree_of(executor).statistics().started == 0


class DenyShellAtRoot:
    """A path-aware policy: 'shell' is denied to the root agent only."""

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        if definition.name == "shell" and agent_path == "root":
            return Deny("no shell for the root agent")
        return Allow()


async def test_a_child_cannot_call_a_tool_its_parent_was_denied() -> None:
    child = ScriptedModel(
        [tool_call("shell", {"command": "ls"}), lambda m: m[-1].tool_results[0].text]
    )
    executor = make_executor(researcher_tool(child), policy=DenyShellAtRoot())
    result = await AgentLoop(
        ScriptedModel([delegate("x"), lambda m: m[-1].tool_results[0].text]), executor
    ).run("go")
    assert result.text == (
        "Permission denied for tool 'shell': no shell for the root agent "
        "(denied to the ancestor agent 'root')"
    )


# -- cancellation and forking -----------------------------------------------------------


def blocking_registry(running: list[int]) -> ToolRegistry:
    @function_tool(side_effects=SideEffects.READ)
    async def wait(n: int) -> str:
        """Block until cancelled."""
        running[0] += 1
        try:
            await trio.sleep_forever()
        finally:
            running[0] -= 1
        return "never"

    registry = ToolRegistry()
    registry.register(wait)
    return registry


async def test_cancelling_the_parent_call_stops_the_child_tree_and_leaves_no_task() -> None:
    running = [0]
    events: list[Event] = []
    registry = blocking_registry(running)

    # Agents at depth 0 and 1 start two sub-agents each; the four leaves wait twice.
    def step(messages: Any) -> Any:
        depth = int(next(m.text for m in messages if m.role == "user"))
        if depth < 2:
            return [delegate(str(depth + 1)), delegate(str(depth + 1))]
        return [tool_call("wait", {"n": 1}), tool_call("wait", {"n": 2})]

    registry.register(researcher_tool(lambda: ScriptedModel([step])))
    executor = ToolExecutor(
        registry, sinks=[CallbackSink(events.append)], services=[AgentTree(TreeLimits(max_depth=2))]
    )
    root = ScriptedModel([step, lambda m: m[-1].tool_results[0].text])
    before = live_tasks()
    box: list[AgentResult] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _store(box, AgentLoop(root, executor).run("0")))
        await trio.testing.wait_all_tasks_blocked()
        assert running[0] == 8  # four leaves, two waits each
        assert tree_of(executor).statistics().live_agents == 7
        executor.cancel_all()

    assert running[0] == 0
    assert live_tasks() == before
    assert tree_of(executor).statistics().live_agents == 1
    assert box[0].stop_reason is StopReason.CANCELLED
    assert {r.error_class for r in box[0].transcript[-1].tool_results} == {ErrorClass.CANCELLED}
    # Every call in the tree got exactly one result, the unfinished ones cancelled.
    started = {(e.agent_path, e.call_id) for e in events if isinstance(e, CallStarted)}
    ended = [
        (e.agent_path, e.call_id) for e in events if isinstance(e, (CallCompleted, CallFailed))
    ]
    assert sorted(ended) == sorted(set(ended))
    assert started <= set(ended)
    cancelled = {
        (e.agent_path, e.tool_name)
        for e in events
        if isinstance(e, CallFailed) and e.error_class is ErrorClass.CANCELLED
    }
    assert ("root/researcher#2/researcher#1", "wait") in cancelled
    assert ("root/researcher#1", "researcher") in cancelled
    assert ("root", "researcher") in cancelled
    assert len(started) == 2 + 4 + 8


async def test_a_parent_timeout_cancels_the_child(autojump_clock: object) -> None:
    running = [0]
    registry = blocking_registry(running)
    registry.register(
        researcher_tool(lambda: ScriptedModel([tool_call("wait", {"n": 1})]), timeout=5)
    )
    executor = ToolExecutor(registry)
    root = ScriptedModel([delegate("x"), lambda m: m[-1].tool_results[0].text])
    before = live_tasks()
    result = await AgentLoop(root, executor).run("go")
    assert result.text == "Tool 'researcher' timed out after 5s and was cancelled."
    assert running[0] == 0
    assert live_tasks() == before


def nested_model(levels: int) -> Any:
    """Each agent starts two sub-agents at once, until ``levels`` deep."""

    def step(messages: Any) -> Any:
        depth = int(next(m.text for m in messages if m.role == "user"))
        if depth >= levels:
            return "leaf"
        return [delegate(str(depth + 1)), delegate(str(depth + 1))]

    return lambda: ScriptedModel([step, lambda m: "ok"])


async def test_forking_lets_children_run_while_the_parent_holds_the_only_permit(
    autojump_clock: object,
) -> None:
    executor = make_executor(
        researcher_tool(nested_model(3)), config=ConcurrencyConfig(concurrent_mut_width=1)
    )
    with trio.fail_after(60):
        result = await AgentLoop(nested_model(3)(), executor).run("0")
    assert result.finished
    assert tree_of(executor).statistics().started == 2 + 4 + 8


class UnforkedSubAgent:
    """A sub-agent that wrongly runs its child on the parent's own executor."""

    definition = ToolDefinition("researcher", "no fork", is_recursive=True)

    def __call__(self) -> UnforkedSubAgent:
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        executor = ctx.service(ToolExecutor)
        assert executor is not None
        result = await AgentLoop(nested_model(2)(), executor).run(arguments["task"])
        return ToolOutput.text(result.text)


async def test_without_forking_the_same_tree_deadlocks(autojump_clock: object) -> None:
    registry = ToolRegistry()
    registry.register(UnforkedSubAgent())
    executor = ToolExecutor(registry, config=ConcurrencyConfig(concurrent_mut_width=1))
    with pytest.raises(trio.TooSlowError), trio.fail_after(60):
        await AgentLoop(nested_model(2)(), executor).run("0")


# -- the docs page -------------------------------------------------------------------


def test_agent_trees_doc_examples_run() -> None:
    page = (Path(__file__).parent.parent / "docs" / "agent-trees.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert blocks
    namespace: dict[str, Any] = {"__name__": "agent_trees_doc"}
    for block in blocks:
        exec(compile(block, "docs/agent-trees.md", "exec"), namespace)


async def test_a_child_runs_under_its_ancestors_limits(autojump_clock: object) -> None:
    @function_tool(side_effects=SideEffects.READ)
    async def long_text() -> str:
        """Long text."""
        return "T" * 5000

    @function_tool(side_effects=SideEffects.READ)
    async def slow() -> str:
        """Slow."""
        await trio.sleep(2)
        return "slow finished"

    class TightAtTheRoot:
        """The root's calls are capped; a child's own entry would give it no limits."""

        def decide(self, definition: Any, arguments: Any, agent_path: str) -> Any:
            if agent_path != "root":
                return Allow()
            if definition.is_recursive:
                return Allow(ExecutionGrant(max_output_chars=2000))
            return Allow(ExecutionGrant(timeout=0.5, max_output_chars=30))

    def report(messages: Any) -> str:
        return " | ".join(
            f"{r.call_id}:{len(r.text)}:{r.error_class}" for r in messages[-1].tool_results
        )

    child_model = ScriptedModel(
        [[tool_call("long_text", id="c1"), tool_call("slow", id="c2")], report]
    )
    helper = SubAgentTool(
        name="helper",
        description="d",
        system_prompt="s",
        model=child_model,
        tools=["long_text", "slow"],
    )
    registry = ToolRegistry()
    for tool in (long_text, slow, helper):
        registry.register(tool)
    executor = ToolExecutor(registry, policy=TightAtTheRoot())
    outcome = await executor.execute_batch([ToolCall("h", "helper", {"task": "go"})])
    child_line = outcome.results[0].text
    assert re.search(r"c2:\d+:ErrorClass\.TIMEOUT", child_line), child_line
    long_call = re.search(r"c1:(\d+):None", child_line)
    assert long_call, child_line
    long_length = int(long_call.group(1))
    assert long_length < 200, child_line  # cut to 30 characters plus the truncation note

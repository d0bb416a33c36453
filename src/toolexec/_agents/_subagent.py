"""Sub-agents: a tool that runs a child agent loop, and the limits of the tree.

Theory of operation (for users: docs/concepts.md, "Forking for sub-agents").
``SubAgentTool.execute`` asks the tree
for a place (``AgentTree.enter``), which either refuses at once with a
``ToolError`` (a depth, children or size limit) or reserves a unique name
such as ``researcher#2``. It then forks the parent's executor
(``fork_for_subagent``): the child shares the read and serial-mutator
limiters and gets fresh concurrent-mutator and per-tool ones, so the
concurrent-mutator permit this very call holds can never be needed by its
own child. The child's registry is a subset of the parent's and its policy
is the parent's, narrowed so that nothing denied to an ancestor is allowed
to the child. A child ``AgentLoop`` then runs on the fork, inside this call:
its events reach the same sinks tagged with the child's path, between this
call's start and end events; its progress is forwarded to this call's
``report_progress``; cancelling this call cancels the child loop and its
calls (each still gets its result) before the call itself ends.

The tree reaches the tool through its context: it is one of the executor's
services (``ToolExecutor(registry, services=[AgentTree(limits)])``), shared
by every fork; a root without one gets a default tree the first time a
sub-agent starts under it. The executor to fork is found the same way
(``ctx.service(ToolExecutor)``).
"""

from __future__ import annotations

import contextlib
import itertools
from typing import TYPE_CHECKING, Any

import attrs

from .._core._errors import ToolError
from .._core._executor import ToolExecutor
from .._core._types import ErrorClass, SideEffects, ToolDefinition, ToolOutput
from .._gate._policy import Allow, Ask, Deny, tightest
from ._agent import AgentLoop, StopReason

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from .._core._registry import ToolRegistry
    from .._core._tool_protocol import ToolContext
    from .._gate._policy import Decision, ToolPolicy
    from ._model import Model

__all__ = ["AgentTree", "SubAgentTool", "TreeLimits", "TreeStatistics"]


def _at_least(low: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{attr.name} must be an integer >= {low}, got {value!r}")

    return check


@attrs.frozen
class TreeLimits:
    """How large an agent tree may grow.

    On the tree (``AgentTree(limits)``) the limits are absolute. On a
    ``SubAgentTool`` they apply to the subtree its child starts, counted
    from that child, and can only tighten the tree's: each is combined with
    the enclosing limit by taking the smaller.

    Args:
        max_depth: levels of sub-agents below the root (or below the child,
            for a tool's limits); 0 forbids sub-agents.
        max_children: sub-agents one agent may have running at once.
        max_agents: agents alive at once in the tree, the root included
            (for a tool's limits: in the child's subtree, the child included).
    """

    max_depth: int = attrs.field(default=4, validator=_at_least(0))
    max_children: int = attrs.field(default=10, validator=_at_least(0))
    max_agents: int = attrs.field(default=100, validator=_at_least(1))


@attrs.frozen
class TreeStatistics:
    """A snapshot of an agent tree."""

    live_agents: int
    peak_agents: int
    started: int
    refused: int


@attrs.define(eq=False)
class _Node:
    path: str
    depth: int
    parent: _Node | None
    depth_left: int
    children_cap: int
    subtree_cap: int | None
    live_children: int = 0
    subtree_live: int = 1
    names: dict[str, itertools.count[int]] = attrs.field(factory=dict)


@attrs.define(eq=False)
class AgentTree:
    """The shared accounting of one agent tree: who runs where, and the limits.

    Give it to the root executor as a service (``ToolExecutor(registry,
    services=[AgentTree(TreeLimits(max_depth=2))])``); every fork shares it,
    and ``executor.service(AgentTree)`` finds it. A place is reserved
    synchronously, so a limit is reported at once and never waited on.
    """

    limits: TreeLimits = attrs.field(factory=TreeLimits)
    _nodes: dict[str, _Node] = attrs.field(factory=dict, init=False, repr=False)
    _live: int = attrs.field(default=0, init=False)
    _peak: int = attrs.field(default=1, init=False)
    _started: int = attrs.field(default=0, init=False)
    _refused: int = attrs.field(default=0, init=False)

    def statistics(self) -> TreeStatistics:
        """Live agents (root included), the peak, sub-agents started and refused."""
        return TreeStatistics(self._live + 1, self._peak, self._started, self._refused)

    @contextlib.contextmanager
    def enter(self, parent_path: str, name: str, limits: TreeLimits | None) -> Iterator[str]:
        """Reserve a place for a sub-agent of ``parent_path``; yield its unique name.

        Raises:
            ToolError: a limit would be exceeded (nothing was reserved).
        """
        parent = self._node(parent_path)
        refusal = self._refusal(parent, name)
        if refusal is not None:
            self._refused += 1
            raise ToolError(refusal)
        unique = f"{name}#{next(parent.names.setdefault(name, itertools.count(1)))}"
        child = self._add(parent, f"{parent_path}/{unique}", limits)
        try:
            yield unique
        finally:
            self._remove(child)

    def _node(self, path: str) -> _Node:
        node = self._nodes.get(path)
        if node is None:  # a root: the first agent seen at this path
            lim = self.limits
            node = _Node(path, 0, None, lim.max_depth, lim.max_children, None)
            self._nodes[path] = node
        return node

    def _refusal(self, parent: _Node, name: str) -> str | None:
        head = f"Sub-agent '{name}' was not started:"
        if parent.depth_left < 1:
            return (
                f"{head} agent '{parent.path}' is at the maximum depth of the agent tree "
                f"({parent.depth} levels of sub-agents). Do this part of the work yourself."
            )
        if parent.live_children >= parent.children_cap:
            return (
                f"{head} agent '{parent.path}' already has {parent.live_children} sub-agents "
                f"running (limit {parent.children_cap}). Wait for one to finish, or do "
                "this part of the work yourself."
            )
        if self._live + 1 >= self.limits.max_agents:
            return (
                f"{head} the agent tree already has {self._live + 1} agents running "
                f"(limit {self.limits.max_agents}). Do this part of the work yourself."
            )
        node: _Node | None = parent
        while node is not None:
            if node.subtree_cap is not None and node.subtree_live >= node.subtree_cap:
                return (
                    f"{head} the sub-agent '{node.path}' may have at most "
                    f"{node.subtree_cap} agents running in its subtree, itself included. "
                    "Do this part of the work yourself."
                )
            node = node.parent
        return None

    def _add(self, parent: _Node, path: str, limits: TreeLimits | None) -> _Node:
        depth_left, children_cap, subtree_cap = parent.depth_left - 1, parent.children_cap, None
        if limits is not None:
            depth_left = min(depth_left, limits.max_depth)
            children_cap = min(children_cap, limits.max_children)
            subtree_cap = limits.max_agents
        child = _Node(path, parent.depth + 1, parent, depth_left, children_cap, subtree_cap)
        self._nodes[path] = child
        parent.live_children += 1
        node: _Node | None = parent
        while node is not None:
            node.subtree_live += 1
            node = node.parent
        self._live += 1
        self._started += 1
        self._peak = max(self._peak, self._live + 1)
        return child

    def _remove(self, child: _Node) -> None:
        del self._nodes[child.path]
        parent = child.parent
        assert parent is not None
        parent.live_children -= 1
        node: _Node | None = parent
        while node is not None:
            node.subtree_live -= 1
            node = node.parent
        self._live -= 1


@attrs.frozen
class _NarrowedPolicy:
    """A policy asked for every ancestor's path too: a child gets no more than they.

    ``base`` is the root's policy and ``ancestors`` the paths above the agent,
    so a decision costs one question per level.
    """

    base: ToolPolicy
    ancestors: tuple[str, ...]

    @classmethod
    def below(cls, parent: ToolPolicy, parent_path: str) -> _NarrowedPolicy:
        """The policy for a child of the agent at ``parent_path`` that uses ``parent``."""
        if isinstance(parent, _NarrowedPolicy):
            return cls(parent.base, (*parent.ancestors, parent_path))
        return cls(parent, (parent_path,))

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        """Deny what an ancestor is denied; ask if one asks; the tightest of their grants.

        A child's call runs under limits no looser than any ancestor's grant
        for the same call (timeout, output cap), whatever its own says.
        """
        asked: Ask | None = None
        grants = []
        for path in self.ancestors:
            above = self.base.decide(definition, arguments, path)
            if isinstance(above, Deny):
                return Deny(f"{above.reason} (denied to the ancestor agent '{path}')")
            if isinstance(above, Ask) and asked is None:
                asked = above
            grants.append(above.grant)
        here = self.base.decide(definition, arguments, agent_path)
        if isinstance(here, Deny):
            return here
        grant = tightest([here.grant, *grants])
        if isinstance(here, Ask):
            return Ask(here.reason, grant)
        if asked is not None:
            return Ask(asked.reason, grant)
        return Allow(grant)


_TASK_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": "What the sub-agent should do, with everything it needs to know.",
        }
    },
    "required": ["task"],
    "additionalProperties": False,
}


def _tool_names(value: Sequence[str] | None) -> tuple[str, ...] | None:
    if isinstance(value, str):
        raise TypeError(f"tools must be a list of tool names, not the string {value!r}")
    return None if value is None else tuple(value)


@attrs.frozen
class SubAgentTool:
    """A tool that delegates a task to a child agent and returns its final answer.

    The model calls it with ``{"task": "..."}``. The call runs a child
    ``AgentLoop`` on a fork of the calling executor and returns the child's
    final text; the result details hold ``child_loop_id``, ``agent_path``,
    ``stop_reason``, ``turns`` and ``usage``. It is recursive (routed as a
    concurrent mutator, which forking makes deadlock-free).

    Example::

        researcher = SubAgentTool(
            name="researcher",
            description="Research a question in the workspace and report back.",
            system_prompt="You are a careful researcher.",
            model=lambda: MyModel(),
            tools=["read_file", "search_files"],
        )
        registry.register(researcher)

    Args:
        name: the tool name the parent model calls.
        description: what the parent model is told about the sub-agent.
        system_prompt: the child's system prompt.
        model: a ``Model`` shared by every child, or a zero-argument factory
            giving each child its own.
        tools: names of the parent's tools the child may use (``None``: all
            of them, this tool included, so children can nest as deep as
            the limits allow). A name the parent lacks fails the call.
        max_turns: the child's turn limit; a child that reaches it without
            a final answer gives an error result holding its last text.
        limits: tighten the tree limits for the child's subtree.
        timeout: seconds for the whole child run (default 600).
    """

    name: str
    description: str
    system_prompt: str
    model: Model | Callable[[], Model] = attrs.field(eq=False)
    tools: tuple[str, ...] | None = attrs.field(default=None, converter=_tool_names)
    max_turns: int = attrs.field(default=20, validator=_at_least(1))
    limits: TreeLimits | None = None
    timeout: float | None = None
    definition: ToolDefinition = attrs.field(init=False)

    @definition.default
    def _define(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description=self.description,
            input_schema=_TASK_SCHEMA,
            side_effects=SideEffects.EXECUTE,
            is_recursive=True,
            timeout=self.timeout,
        )

    def __call__(self) -> SubAgentTool:
        """Act as its own factory (it keeps no per-call state), so it can be registered."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run the child loop on a fork of the calling executor; return its final text."""
        parent = ctx.service(ToolExecutor)
        if parent is None:
            raise ToolError(f"Sub-agent '{self.name}' needs an executor to fork; none was given.")
        registry = self._child_registry(parent)  # refuses before reserving a place
        tree = ctx.service(AgentTree, AgentTree)
        with tree.enter(parent.agent_path, self.name, self.limits) as unique:
            child = parent.fork_for_subagent(
                unique,
                registry=registry,
                policy=_NarrowedPolicy.below(parent.policy, parent.agent_path),
                parent_call=(ctx.batch_id, ctx.call_id),
                journal_scope=(
                    None if ctx.idempotency_key is None else f"{self.name}@{ctx.idempotency_key}"
                ),
            )
            loop = AgentLoop(
                self._model(),
                child,
                self.system_prompt,
                self.max_turns,
                on_progress=lambda line: ctx.report_progress(f"{child.agent_path}: {line}"),
            )
            result = await loop.run(str(arguments["task"]))
        details: dict[str, Any] = {
            "child_loop_id": result.loop_id,
            "agent_path": result.agent_path,
            "stop_reason": result.stop_reason.value,
            "turns": result.turns,
            "tool_calls": result.tool_calls,
            "usage": {
                "input_tokens": result.usage.input_tokens,
                "output_tokens": result.usage.output_tokens,
            },
        }
        if result.stop_reason is StopReason.FINISHED:
            return ToolOutput.text(result.text, **details)
        if result.stop_reason is StopReason.CANCELLED:
            raise ToolError(
                f"Sub-agent '{self.name}' was cancelled by the host.",
                error_class=ErrorClass.CANCELLED,
            )
        last = f" Its last words: {result.text}" if result.text else ""
        return ToolOutput.text(
            f"Sub-agent '{self.name}' stopped after {result.turns} turns without a final "
            f"answer.{last}",
            is_error=True,
            **details,
        )

    def _child_registry(self, parent: ToolExecutor) -> ToolRegistry:
        if self.tools is None:
            return parent.registry
        missing = [n for n in self.tools if n not in parent.registry]
        if missing:
            have = ", ".join(parent.registry.names()) or "(none)"
            raise ToolError(
                f"Sub-agent '{self.name}' was not started: its parent agent "
                f"'{parent.agent_path}' has no tool named {', '.join(map(repr, missing))} "
                f"(it has: {have}); a sub-agent only gets tools its parent has.",
                error_class=ErrorClass.PERMISSION_DENIED,
            )
        return parent.registry.subset(self.tools)

    def _model(self) -> Model:
        # A plain attribute check: isinstance against a runtime Protocol is slow.
        model = self.model
        if not isinstance(model, type) and callable(getattr(model, "respond", None)):
            return model  # type: ignore[return-value]
        return model()  # type: ignore[operator]

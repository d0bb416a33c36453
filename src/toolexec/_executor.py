"""The executor: plan a batch, admit its calls, run them, one result per call.

Theory of operation.

1. *Plan* (``prepare``; synchronous, no I/O): each call is looked up, its
   arguments parsed and validated, hooks and the policy asked, and its
   approval mode decided. A failure at any step is a short-circuit: the call
   is answered at once with an error result, takes no permit and never
   splits a run. The rest get a routing class (DESIGN 3.1) and the strategy
   cuts them into runs of one class, in emitted order.
2. *Run* (``_batch.Batch``): runs one after another, serial runs call by
   call in emitted order, steering between runs, host cancel.
3. *Call* (``_run_call``): approval first (a waiting human holds no permit),
   then the tool's limiter, then the class limiter, a last check that the
   batch was not cancelled meanwhile, then the tool under its deadline.
   Every exception a tool raises becomes a result; ``trio.Cancelled`` and
   ``KeyboardInterrupt`` are never caught here. Permits are released on
   every path.
"""

from __future__ import annotations

import itertools
import json
import logging
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._approval import (
    ApprovalAnswer,
    ApprovalConfig,
    ApprovalMode,
    ApprovalRequest,
    Approver,
    canonical_json,
)
from ._batch import Batch, BatchOutcome, Steering
from ._errors import ToolError
from ._events import (
    ApprovalRequested,
    ApprovalResolved,
    CallStarted,
    EventSink,
)
from ._hooks import CallHook, Rewrite, Skip
from ._lifecycle import CallSlot, State, error_result
from ._limits import ConcurrencyConfig, ExecutorStatistics, Pools
from ._plan import BatchPlan, ExecutionStrategy, Parallel, RunPlan
from ._policy import HOST_GRANT, Allow, AllowAll, Ask, Deny, ExecutionGrant, ToolPolicy
from ._tool import ToolContext, _drop
from ._types import (
    ContentBlock,
    ErrorClass,
    JsonContent,
    RoutingClass,
    SideEffects,
    TextContent,
    ToolCall,
    ToolOutput,
    ToolResult,
)

if TYPE_CHECKING:
    from ._registry import ToolRegistry
    from ._subagent import AgentTree

__all__ = ["ToolExecutor"]

_log = logging.getLogger("toolexec")


def _as_sinks(sinks: Iterable[EventSink]) -> tuple[EventSink, ...]:
    return tuple(sinks)


def _as_hooks(hooks: Iterable[CallHook]) -> tuple[CallHook, ...]:
    return tuple(hooks)


@attrs.define(eq=False, on_setattr=attrs.setters.NO_OP)
class ToolExecutor:
    """Runs batches of tool calls: routed, admitted, ordered, bounded.

    Example::

        executor = ToolExecutor(registry)
        outcome = await executor.execute_batch(calls)
        for result in outcome.results: ...   # one per call, in call order

    Args:
        registry: the tools.
        config: pool widths, per-tool caps, promoted mutators.
        strategy: ``Parallel()`` (default), ``Sequential()`` or ``Batched(n)``.
        policy: decides per call; ``AllowAll()`` by default.
        sinks: receive events (``CallbackSink``, ``ChannelSink``, ...).
        steering: a sync or async callable polled between runs; returning
            messages skips the calls not yet started.
        agent_path: this executor's place in an agent tree.
        session_id: the host's session id, passed to tools.
        workspace: passed to tools in their context.
        grace_period: seconds a cancelled tool gets for cleanup.
        approver: answers approval requests; without one, a call that needs
            approval is denied.
        approval: which calls need approval (``ApprovalConfig``). ``None``
            means none do, unless the policy says ``Ask``; with an approver
            and no config, the ``ApprovalConfig()`` defaults apply.
        hooks: ``CallHook`` objects that see calls before and after.
    """

    registry: ToolRegistry
    config: ConcurrencyConfig = attrs.field(factory=ConcurrencyConfig)
    strategy: ExecutionStrategy = attrs.field(factory=Parallel)
    policy: ToolPolicy = attrs.field(factory=AllowAll)
    sinks: tuple[EventSink, ...] = attrs.field(default=(), converter=_as_sinks)
    steering: Steering | None = None
    agent_path: str = "root"
    session_id: str = ""
    workspace: Any = None
    grace_period: float = 5.0
    approver: Approver | None = None
    approval: ApprovalConfig | None = None
    hooks: tuple[CallHook, ...] = attrs.field(default=(), converter=_as_hooks)
    _memory: dict[str, bool] = attrs.field(factory=dict, alias="memory", repr=False)
    _pools: Pools | None = attrs.field(default=None, alias="pools", repr=False)
    _batches: set[Batch] = attrs.field(factory=set, init=False, repr=False)
    _ids: Any = attrs.field(factory=itertools.count, init=False, repr=False)
    _in_flight: int = attrs.field(default=0, init=False, repr=False)
    # The sub-agent tree this executor belongs to (limits, unique paths); forks share it.
    tree: AgentTree | None = None

    def __attrs_post_init__(self) -> None:
        if self._pools is None:
            self._pools = Pools.create(self.config)
        if self.approval is None and self.approver is not None:
            self.approval = ApprovalConfig()

    @property
    def pools(self) -> Pools:
        """The limiters this executor admits through (shared with forks as DESIGN 3.4)."""
        assert self._pools is not None
        return self._pools

    # -- public API -------------------------------------------------------

    def prepare(self, calls: Sequence[ToolCall]) -> Batch:
        """Route and plan a batch without running it (see ``Batch.plan``)."""
        slots = [CallSlot(i, call) for i, call in enumerate(calls)]
        for slot in slots:
            self._route(slot)
        routes = [s.routing for s in slots]
        runs = []
        for n, (routing, indices) in enumerate(self.strategy.cut(routes)):
            runs.append(
                RunPlan(
                    n,
                    routing,
                    tuple(indices),
                    tuple(slots[i].call.id for i in indices),
                    tuple(slots[i].call.name for i in indices),
                )
            )
        answered = [s for s in slots if s.state is State.DONE]
        plan = BatchPlan(
            tuple(runs), tuple(s.index for s in answered), tuple(s.call.id for s in answered)
        )
        return Batch(self, f"{self.agent_path}:b{next(self._ids)}", slots, plan)

    async def execute_batch(
        self, calls: Sequence[ToolCall], *, steering: Steering | None = None
    ) -> BatchOutcome:
        """Run a batch to completion; return one result per call, in call order."""
        return await self.prepare(calls).run(steering=steering)

    def cancel_all(self) -> None:
        """Cancel every batch this executor is running (results: ``cancelled``)."""
        for batch in list(self._batches):
            batch.cancel()

    def fork_for_subagent(self, name: str = "child") -> ToolExecutor:
        """An executor for a sub-agent: same tools, policy and sinks, forked pools.

        The fork shares the read and serial-mutator limiters (default mutators
        stay serial across the tree) and gets fresh concurrent-mutator and
        per-tool limiters of the same widths (so a recursive call holding a
        permit never waits on its own child).
        """
        return ToolExecutor(
            self.registry,
            self.config,
            self.strategy,
            self.policy,
            self.sinks,
            agent_path=f"{self.agent_path}/{name}",
            session_id=self.session_id,
            workspace=self.workspace,
            grace_period=self.grace_period,
            approver=self.approver,
            approval=self.approval,
            hooks=self.hooks,
            memory=self._memory,
            pools=self.pools.fork(),
            tree=self.tree,
        )

    def statistics(self) -> ExecutorStatistics:
        """A snapshot of this executor's limiters and calls in flight."""
        return self.pools.statistics(self._in_flight)

    # -- planning ---------------------------------------------------------

    def _route(self, slot: CallSlot) -> None:
        call = slot.call
        entry = self.registry._get(call.name)
        if entry is None:
            names = ", ".join(self.registry.names()) or "(none)"
            slot.finish(
                error_result(
                    slot, ErrorClass.NOT_FOUND, f"Tool '{call.name}' not found. Available: {names}"
                )
            )
            return
        slot.entry = entry
        arguments = self._parse(slot)
        if arguments is None:
            return
        violations = _violations(entry, arguments)
        if violations:
            slot.finish(_invalid(slot, violations, ""))
            return
        slot.arguments = arguments
        definition = entry.definition
        if self.hooks and not self._before_hooks(slot):
            return
        try:
            decision = self.policy.decide(definition, slot.arguments, self.agent_path)
        except Exception as exc:  # fail closed, like a hook that raises
            _log.exception("policy %r raised; denying the call", self.policy)
            decision = Deny(f"the policy could not decide ({type(exc).__name__})")
        if not isinstance(decision, (Allow, Ask, Deny)):
            decision = Deny(f"the policy returned {type(decision).__name__}, not a decision")
        if isinstance(decision, Deny):
            slot.finish(
                error_result(
                    slot,
                    ErrorClass.PERMISSION_DENIED,
                    f"Permission denied for tool '{call.name}': {decision.reason}",
                )
            )
            return
        mode = ApprovalMode.AUTO
        if self.approval is not None:
            mode = self.approval.mode_for(definition, self.workspace)
        if isinstance(decision, Ask):
            slot.reason = decision.reason
            # The policy asks about this call: a human answers it, whatever was
            # remembered for the tool (prompt_once covers the tool, not this ask).
            if mode in (ApprovalMode.AUTO, ApprovalMode.PROMPT_ONCE):
                mode = ApprovalMode.PROMPT
        if mode is ApprovalMode.DENY:
            slot.finish(
                error_result(
                    slot,
                    ErrorClass.PERMISSION_DENIED,
                    f"Permission denied for tool '{call.name}': the confirmation policy denies "
                    f"tools with side effects '{definition.side_effects.value}'.",
                )
            )
            return
        slot.grant = decision.grant
        slot.needs_approval = None if mode is ApprovalMode.AUTO else mode
        slot.routing = self._routing_class(entry, slot.arguments)
        slot.advance(State.QUEUED)

    def _before_hooks(self, slot: CallSlot) -> bool:
        call, entry = slot.call, slot.entry
        for hook in self.hooks:
            try:
                decision = hook.before_call(call, slot.arguments, self.agent_path)
            except Exception as exc:
                _log.exception("before_call hook %r raised; denying the call", hook)
                slot.finish(
                    error_result(
                        slot,
                        ErrorClass.PERMISSION_DENIED,
                        f"Permission denied for tool '{call.name}': a safety check failed "
                        f"({type(exc).__name__}).",
                    )
                )
                return False
            if isinstance(decision, Skip):
                slot.finish(
                    error_result(
                        slot, ErrorClass.SKIPPED, f"Skipped by the host: {decision.reason}"
                    )
                )
                return False
            if isinstance(decision, Rewrite):
                arguments = dict(decision.arguments)
                violations = _violations(entry, arguments)
                if violations:
                    slot.finish(_invalid(slot, violations, " after the host rewrote them"))
                    return False
                slot.arguments = arguments
        return True

    def _parse(self, slot: CallSlot) -> dict[str, Any] | None:
        raw = slot.call.arguments
        if isinstance(raw, dict):
            return raw
        if isinstance(raw, Mapping):
            return dict(raw)
        try:
            value = json.loads(raw) if raw.strip() else {}
        except RecursionError:
            slot.finish(
                error_result(
                    slot,
                    ErrorClass.INVALID_ARGUMENTS,
                    f"Invalid arguments for tool '{slot.call.name}': the JSON is nested too "
                    "deeply. Send a flatter JSON object.",
                )
            )
            return None
        except (ValueError, AttributeError, TypeError) as exc:  # ValueError: a 5000-digit number
            slot.finish(
                error_result(
                    slot,
                    ErrorClass.INVALID_ARGUMENTS,
                    f"Invalid arguments for tool '{slot.call.name}': the arguments "
                    f"are not valid JSON ({exc}). Send a JSON object.",
                )
            )
            return None
        if not isinstance(value, dict):
            slot.finish(
                error_result(
                    slot,
                    ErrorClass.INVALID_ARGUMENTS,
                    f"Invalid arguments for tool '{slot.call.name}': expected a JSON "
                    f"object, got {_JSON_KINDS.get(type(value), 'a value of another kind')}.",
                )
            )
            return None
        return value

    def _routing_class(self, entry: Any, arguments: Mapping[str, Any]) -> RoutingClass:
        definition = entry.definition
        if definition.is_recursive:
            return RoutingClass.CONCURRENT_MUT
        if entry.read_only:
            return RoutingClass.READ_ONLY
        if definition.classifier is not None:
            try:
                effects = definition.classifier(arguments)
            except Exception:
                _log.exception("classifier of tool %r raised; routing as declared", definition.name)
            else:
                if isinstance(effects, SideEffects) and effects.is_read_only:
                    return RoutingClass.READ_ONLY
        if definition.name in self.config.promoted:
            return RoutingClass.CONCURRENT_MUT
        return RoutingClass.SERIAL_MUT

    # -- running ----------------------------------------------------------

    async def _run_call(self, slot: CallSlot, batch: Batch) -> None:
        if slot.needs_approval is not None:
            slot.advance(State.APPROVING)
            denial = await self._approve(slot, batch)
            if denial is not None:
                slot.finish(denial)
                batch._settle(slot)
                return
        slot.advance(State.ADMITTING)
        pools = self.pools
        tool_limiter = pools.per_tool.get(slot.call.name)
        class_limiter = pools.by_class[slot.routing]
        if tool_limiter is not None:
            await _acquire(tool_limiter, slot)
        try:
            await _acquire(class_limiter, slot)
            try:
                # A cancel may have landed while this call waited for its turn (or
                # before the batch ran), and the nowait fast path does not look:
                # never start a tool after it.
                await trio.lowlevel.checkpoint_if_cancelled()
                ctx, start, timeout = self._begin(slot, batch)
                output: ToolOutput | None = None
                failure: ToolResult | None = None
                self._in_flight += 1
                try:
                    with trio.CancelScope(deadline=start + timeout) as scope:
                        output = await slot.entry.factory().execute(slot.arguments, ctx)
                except ToolError as exc:
                    failure = error_result(slot, exc.error_class, exc.message)
                except Exception as exc:
                    failure = self._crashed(slot, exc)
                finally:
                    self._in_flight -= 1
                slot.finish(
                    self._conclude(slot, output, failure, scope.cancel_called, start, timeout)
                )
            finally:
                class_limiter.release_on_behalf_of(slot)
        finally:
            if tool_limiter is not None:
                tool_limiter.release_on_behalf_of(slot)
        batch._settle(slot)

    async def _approve(self, slot: CallSlot, batch: Batch) -> ToolResult | None:
        call, mode = slot.call, slot.needs_approval
        if mode is ApprovalMode.PROMPT_ONCE and call.name in self._memory:
            if self._memory[call.name]:
                return None
            return error_result(
                slot,
                ErrorClass.USER_DENIED,
                f"The user denied tool '{call.name}' for the rest of this session.",
            )
        if self.approver is None:
            return error_result(
                slot,
                ErrorClass.PERMISSION_DENIED,
                f"Permission denied for tool '{call.name}': it needs approval and no "
                "approver is configured.",
            )
        try:
            shown = canonical_json(slot.arguments)
        except (TypeError, ValueError) as exc:  # not JSON values: nothing a human could read
            return error_result(
                slot,
                ErrorClass.PERMISSION_DENIED,
                f"Permission denied for tool '{call.name}': its arguments cannot be shown for "
                f"approval ({exc}).",
            )
        request = ApprovalRequest(
            call.id,
            call.name,
            self.agent_path,
            slot.entry.definition.side_effects,
            shown,
            slot.reason,
        )
        timeout = self.approval.timeout if self.approval is not None else 300.0
        batch.emit_call_event(ApprovalRequested, call, summary=request.summary)
        deadline = trio.current_time() + timeout
        answer: object = None
        try:
            with trio.CancelScope(deadline=deadline):
                answer = await self.approver.request(request)
        except Exception as exc:
            _log.exception("approver %r raised; denying the call", self.approver)
            return error_result(
                slot,
                ErrorClass.PERMISSION_DENIED,
                f"Permission denied for tool '{call.name}': the approval could not be "
                f"obtained ({type(exc).__name__}).",
            )
        if trio.current_time() >= deadline:
            answer = None  # too late (an approver that blocked): the timeout has answered
        elif not isinstance(answer, ApprovalAnswer):
            _log.error("approver %r returned %r, not an ApprovalAnswer", self.approver, answer)
            return error_result(
                slot,
                ErrorClass.PERMISSION_DENIED,
                f"Permission denied for tool '{call.name}': the approver gave no valid answer.",
            )
        batch.emit_call_event(
            ApprovalResolved,
            call,
            approved=answer is not None and answer.approved is True,
            by=answer.by if answer is not None else "timeout",
        )
        if answer is None:
            return error_result(
                slot,
                ErrorClass.CONFIRMATION_TIMEOUT,
                f"No answer to the approval request for tool '{call.name}' within "
                f"{timeout:g}s; the call did not run.",
            )
        if mode is ApprovalMode.PROMPT_ONCE:
            self._memory[call.name] = answer.approved is True
        if answer.approved is not True:
            why = f": {answer.reason}" if answer.reason else "."
            return error_result(
                slot, ErrorClass.USER_DENIED, f"The user denied this call of '{call.name}'{why}"
            )
        slot.arguments = json.loads(request.arguments)  # run exactly what was shown
        return None

    def _crashed(self, slot: CallSlot, exc: Exception) -> ToolResult:
        call = slot.call
        _log.error("tool %r raised in call %r", call.name, call.id, exc_info=exc)
        return error_result(
            slot,
            ErrorClass.EXECUTION_ERROR,
            f"Tool '{call.name}' failed: {type(exc).__name__}: {exc}",
            details={"traceback": "".join(traceback.format_exception(exc))},
        )

    def _begin(self, slot: CallSlot, batch: Batch) -> tuple[ToolContext, float, float]:
        call = slot.call
        grant: ExecutionGrant = slot.grant or HOST_GRANT
        timeout = slot.entry.definition.effective_timeout
        if grant.timeout is not None and grant.timeout < timeout:
            timeout = grant.timeout
        slot.advance(State.RUNNING)
        start = trio.current_time()
        sinks = self.sinks
        batch.emit_call_event(CallStarted, call, routing=slot.routing)
        ctx = ToolContext(
            call.id,
            call.name,
            self.agent_path,
            self.session_id,
            self.workspace,
            self,
            grant,
            self.grace_period,
            emit=batch.progress_emitter(call) if sinks or self.hooks else _drop,
        )
        return ctx, start, timeout

    def _conclude(
        self,
        slot: CallSlot,
        output: ToolOutput | None,
        failure: ToolResult | None,
        timed_out: bool,
        start: float,
        timeout: float,
    ) -> ToolResult:
        call = slot.call
        duration = trio.current_time() - start
        if timed_out:
            failure = error_result(
                slot,
                ErrorClass.TIMEOUT,
                f"Tool '{call.name}' timed out after {timeout:g}s and was cancelled.",
            )
        grant: ExecutionGrant = slot.grant or HOST_GRANT
        if failure is not None:
            if grant.max_output_chars is not None:  # an error's text is output the model reads
                content = _cap_output(failure.content, grant.max_output_chars)
                return attrs.evolve(failure, content=content, duration=duration)
            return attrs.evolve(failure, duration=duration)
        if not isinstance(output, ToolOutput):
            return error_result(
                slot,
                ErrorClass.EXECUTION_ERROR,
                f"Tool '{call.name}' returned {type(output).__name__}, not a "
                "ToolOutput (this is a bug in the tool).",
                duration=duration,
            )
        content = output.content
        if grant.max_output_chars is not None:
            content = _cap_output(content, grant.max_output_chars)
        return ToolResult(
            call.id,
            call.name,
            content,
            output.is_error,
            ErrorClass.EXECUTION_ERROR if output.is_error else None,
            output.details,
            duration,
            slot.routing,
        )


_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _violations(entry: Any, arguments: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``arguments`` for the tool's schema (nothing: ``[]``)."""
    try:
        if entry.schema.is_valid(arguments):
            return []
        return entry.schema.violations(arguments) or ["$: the arguments do not match"]
    except (TypeError, ValueError) as exc:  # a value JSON has no type for (bytes, ...)
        return [f"$: {exc}; arguments must be JSON values"]


def _invalid(slot: CallSlot, violations: list[str], when: str) -> ToolResult:
    return error_result(
        slot,
        ErrorClass.INVALID_ARGUMENTS,
        f"Invalid arguments for tool '{slot.call.name}'{when}:\n- " + "\n- ".join(violations),
        details={"violations": violations},
    )


async def _acquire(limiter: trio.CapacityLimiter, slot: CallSlot) -> None:
    # The fast path skips the two scheduling round trips of the async acquire
    # when a token is free; nowait never jumps the queue of waiting calls.
    try:
        limiter.acquire_on_behalf_of_nowait(slot)
    except trio.WouldBlock:
        await limiter.acquire_on_behalf_of(slot)


def _cap_output(content: tuple[ContentBlock, ...], limit: int) -> tuple[ContentBlock, ...]:
    """At most ``limit`` characters of text for the model: text blocks and JSON
    values as the model reads them (a JSON value too long becomes its cut text)."""
    out: list[ContentBlock] = []
    left = limit
    for block in content:
        if isinstance(block, JsonContent):
            text = json.dumps(block.value, ensure_ascii=False, default=str)
            block = block if len(text) <= left else TextContent(text)
        else:
            text = block.text if isinstance(block, TextContent) else ""
        if len(text) > left:
            cut = len(text) - left
            out.append(
                TextContent(text[:left] + f"\n[output truncated: {cut} more characters not shown]")
            )
            left = 0
        else:
            out.append(block)
            left -= len(text)
    return tuple(out)

"""The executor: plan a batch, admit its calls, run them, one result per call.

Theory of operation. This module only assembles the parts and holds the
configuration; the work is done elsewhere:

1. *Plan* (``_routing.Planner``; synchronous, no I/O): each call is looked
   up, its arguments parsed and validated, hooks and the policy asked, its
   approval mode settled and its backend found. A failure at any step is a
   short-circuit: an error result at once, no permit, no split run. The rest
   get a routing class (docs/concepts.md, "Routing") and the strategy cuts them into runs of
   one class, in emitted order (``_plan``).
2. *Run* (``_batch.Batch``): runs one after another, serial runs call by
   call in emitted order, steering between runs, host cancel.
3. *Call* (``_call``): one lifecycle, whoever drives it (``_drive``,
   ``_workers``): approval first (a waiting human holds no permit), then the
   tool's limiter and the class limiter, then the tool (or its backend)
   under its deadline, in its own copy of the context. Every exception a
   tool raises becomes a result; ``trio.Cancelled`` and ``KeyboardInterrupt``
   are never caught.

An executor never changes after it is built: a sub-agent's is a fork
(``fork_for_subagent``), which may name a narrower registry and policy.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from .._gate._approval import ApprovalConfig
from .._gate._asker import ApprovalMemory, Asker
from .._gate._policy import HOST, AllowAll, ToolPolicy
from ._backend import Backend
from ._batch import Batch, BatchOutcome, Steering, Stream
from ._call import RunBinding, Runtime
from ._drive import run_alone
from ._journaling import Journal, batch_key_of
from ._lifecycle import CallSlot
from ._limits import ConcurrencyConfig, ExecutorStatistics, Pools
from ._plan import BatchPlan, ExecutionStrategy, Parallel, RunPlan
from ._registry import ToolRegistry
from ._resources import keyed_cut
from ._routing import Planner
from ._tool_protocol import Services
from ._types import RoutingClass, ToolCall

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from .._gate._approval import Approver
    from .._gate._hooks import CallHook
    from ._events import EventSink
    from ._types import PathResolver, ToolResult

__all__ = ["ToolExecutor"]

T = TypeVar("T")


def _as_sinks(sinks: Iterable[EventSink]) -> tuple[EventSink, ...]:
    return tuple(sinks)


def _as_hooks(hooks: Iterable[CallHook]) -> tuple[CallHook, ...]:
    return tuple(hooks)


def _with_methods(
    kind: str, *methods: str, optional: bool = False
) -> Callable[[object, attrs.Attribute[Any], object], None]:
    """A validator: the value has these callable methods (each item, for a tuple)."""

    def check_one(attr: attrs.Attribute[Any], value: object, where: str) -> None:
        missing = [m for m in methods if not callable(getattr(value, m, None))]
        if missing:
            raise TypeError(
                f"ToolExecutor {where} must be {kind} (with {', '.join(methods)}); "
                f"got {value!r}, which has no callable {', '.join(missing)}"
            )

    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if value is None and optional:
            return
        if isinstance(value, tuple):
            for i, item in enumerate(value):
                check_one(attr, item, f"{attr.name}[{i}]")
        else:
            check_one(attr, value, attr.name)

    return check


def _instance(
    kind: type | tuple[type, ...], what: str, *, optional: bool = False
) -> Callable[[object, attrs.Attribute[Any], object], None]:
    """A validator: the value is a ``kind`` (``what`` says so to a person)."""

    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind) and not (optional and value is None):
            raise TypeError(
                f"ToolExecutor {attr.name} must be {what}; got {value!r:.80}"
                f" ({type(value).__name__})"
            )

    return check


def _callable_or_none(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"ToolExecutor {attr.name} must be callable or None, got {value!r}")


def _grace(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"ToolExecutor grace_period must be seconds >= 0, got {value!r}")


def _as_services(services: Iterable[object] | Services) -> Services:
    return services if isinstance(services, Services) else Services.of(services)


def _check_backends(_inst: object, _attr: object, value: Mapping[str, Backend]) -> None:
    for name, backend in value.items():
        if not isinstance(name, str) or not name or name == HOST:
            raise ValueError(
                f"backend names must be non-empty strings other than 'host' (the host "
                f"backend is built in), got {name!r}"
            )
        if not isinstance(backend, Backend):
            raise TypeError(
                f"backend {name!r} is {backend!r}, which has no async run(tool, arguments, ctx)"
            )


@attrs.frozen(eq=False)
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
        workspace: passed to tools in their context, and used to recognise
            trusted workspaces for approval.
        grace_period: seconds a cancelled tool gets for cleanup.
        approver: answers approval requests; without one, a call that needs
            approval is denied.
        approval: which calls need approval (``ApprovalConfig``). ``None``
            means none do, unless the policy says ``Ask``; with an approver
            and no config, the ``ApprovalConfig()`` defaults apply.
        hooks: ``CallHook`` objects that see calls before and after.
        backends: where calls run besides the host, by sandbox name; a
            policy's grant (``ExecutionGrant(sandbox=name)``) sends a call
            to one. A grant naming a sandbox not listed here gives the call
            an error result.
        services: host objects tools look up by type through
            ``ToolContext.service`` (an ``AgentTree`` with the tree's
            limits, say). Every fork shares them.
        parent_call: ``(batch id, call id)`` of the call whose sub-agent
            this executor runs (set by ``fork_for_subagent``); its events
            carry them as ``parent_batch_id`` and ``parent_call_id``.
        resource_conflicts: order the calls of tools that declare their
            resources (``ToolDefinition.resources``; the file tools and the
            shell do) by what they touch rather than by class: a write waits
            only for earlier calls touching the same resource, a read only
            for earlier writes to it (docs/resources.md). Off by default.
        journal: record every call in this session's ``Journal``, so that a
            batch submitted again after a crash resumes without repeating a
            side effect, and questions outlive the process (docs/durable.md).
            Forks record their calls below the call that started them.

    An executor is immutable; ``fork_for_subagent`` makes a changed copy.
    """

    registry: ToolRegistry = attrs.field(validator=_instance(ToolRegistry, "a ToolRegistry"))
    config: ConcurrencyConfig = attrs.field(
        factory=ConcurrencyConfig,
        validator=_instance(ConcurrencyConfig, "a ConcurrencyConfig (ConcurrencyConfig(...))"),
    )
    strategy: ExecutionStrategy = attrs.field(
        factory=Parallel,
        validator=_instance(
            ExecutionStrategy, "an ExecutionStrategy: Parallel(), Sequential() or Batched(n)"
        ),
    )
    policy: ToolPolicy = attrs.field(
        factory=AllowAll, validator=_with_methods("a policy", "decide")
    )
    sinks: tuple[EventSink, ...] = attrs.field(
        default=(), converter=_as_sinks, validator=_with_methods("event sinks", "emit")
    )
    steering: Steering | None = attrs.field(default=None, validator=_callable_or_none)
    agent_path: str = attrs.field(default="root", validator=_instance(str, "a string"))
    session_id: str = attrs.field(default="", validator=_instance(str, "a string"))
    workspace: PathResolver | None = None
    grace_period: float = attrs.field(default=5.0, validator=_grace)
    approver: Approver | None = attrs.field(
        default=None, validator=_with_methods("an approver", "request", optional=True)
    )
    approval: ApprovalConfig | None = attrs.field(
        default=None,
        validator=_instance(ApprovalConfig, "an ApprovalConfig or None", optional=True),
    )
    hooks: tuple[CallHook, ...] = attrs.field(
        default=(),
        converter=_as_hooks,
        validator=_with_methods("call hooks", "before_call", "after_call", "on_progress"),
    )
    backends: Mapping[str, Backend] = attrs.field(factory=dict, validator=_check_backends)
    services: Services = attrs.field(factory=Services, converter=_as_services)
    parent_call: tuple[str, str] | None = None
    resource_conflicts: bool = attrs.field(
        default=False, validator=_instance(bool, "True or False"), kw_only=True
    )
    journal: Journal | None = attrs.field(
        default=None,
        validator=_instance(Journal, "a toolexec.durable.Journal or None", optional=True),
        kw_only=True,
    )
    _memory: ApprovalMemory = attrs.field(factory=ApprovalMemory, alias="memory", repr=False)
    _pools: Pools | None = attrs.field(default=None, alias="pools", repr=False)
    _binding: RunBinding = attrs.field(factory=RunBinding, alias="binding", repr=False)
    _planner: Planner = attrs.field(init=False, repr=False)
    _runtime: Runtime = attrs.field(init=False, repr=False)
    _ids: Iterator[int] = attrs.field(factory=itertools.count, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        pools = self._pools if self._pools is not None else Pools.create(self.config)
        approval = self.approval
        if approval is None and self.approver is not None:
            approval = ApprovalConfig()
        planner = Planner(
            registry=self.registry,
            policy=self.policy,
            hooks=self.hooks,
            approval=approval,
            workspace=self.workspace,
            promoted=self.config.promoted,
            agent_path=self.agent_path,
            backends=dict(self.backends),
        )
        runtime = Runtime(
            agent_path=self.agent_path,
            session_id=self.session_id,
            workspace=self.workspace,
            grace_period=self.grace_period,
            pools=pools,
            sinks=self.sinks,
            hooks=self.hooks,
            asker=Asker(self.approver, approval, self._memory, self.agent_path),
            services=self.services,
            executor=self,
            parent_call=self.parent_call,
            binding=self._binding,
        )
        for name, value in (
            ("_pools", pools),
            ("approval", approval),
            ("_planner", planner),
            ("_runtime", runtime),
        ):
            object.__setattr__(self, name, value)

    @property
    def pools(self) -> Pools:
        """The limiters this executor admits through; forks share some of them.

        Which ones: docs/concepts.md, "Forking for sub-agents".
        """
        return self._runtime.pools

    # -- public API -------------------------------------------------------

    def prepare(self, calls: Sequence[ToolCall], *, batch_key: str | None = None) -> Batch:
        """Route and plan a batch without running it (see ``Batch.plan``).

        With a journal, ``batch_key`` names the batch in it (the same on
        every re-submission); by default it is derived from the call ids.

        Raises:
            TypeError: ``calls`` is not a sequence of ``ToolCall``.
            RuntimeError: the journal's records were not loaded (``execute_batch``
                loads them).
        """
        if isinstance(calls, ToolCall | str | Mapping):
            raise _not_calls(calls)
        slots = [CallSlot(i, call) for i, call in enumerate(calls)]
        for slot in slots:  # all of them before planning any: a refused batch asks no policy
            if not isinstance(slot.call, ToolCall):
                raise _not_calls(slot.call, slot.index)
        plan_call = self._planner.plan_call
        journal = None
        if self.journal is None:
            for slot in slots:
                plan_call(slot)
        else:
            journal = self.journal.batch(batch_key or batch_key_of([s.call for s in slots]))
            for slot in slots:
                journal.plan(slot, plan_call)
        return Batch(
            f"{self.agent_path}:b{next(self._ids)}",
            slots,
            self._plan(slots),
            self._runtime,
            self.steering,
            journal=journal,
        )

    def open_batch(self) -> Batch:
        """A batch that takes its calls as a model streams them.

        ``add(call)`` each call as soon as it is complete, then ``close()``;
        ``await run()`` may begin before the first call. A call starts as
        soon as its run is open (every earlier run has finished), so tools
        run while the model is still writing later calls. Results, their
        order and steering are those of the same calls planned whole;
        ``plan`` is complete once the batch is closed.

        Example::

            batch = executor.open_batch()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(feed, batch)   # add(...) per call, then close()
                outcome = await batch.run()

        Raises:
            ValueError: the executor has a journal: streamed batches are not
                journaled (plan the batch whole).
        """
        if self.journal is not None:
            raise ValueError(
                "a streamed batch cannot be journaled yet: its call ids are not known when it "
                "opens; run the calls with execute_batch once the model has sent them all"
            )
        slots: list[CallSlot] = []
        stream = Stream(
            self._planner,
            self.strategy,
            self._plan,
            resource_conflicts=self.resource_conflicts,
        )
        return Batch(
            f"{self.agent_path}:b{next(self._ids)}",
            slots,
            BatchPlan((), ()),
            self._runtime,
            self.steering,
            stream=stream,
        )

    def _plan(
        self,
        slots: Sequence[CallSlot],
        cut: Sequence[tuple[RoutingClass, list[int], bool]] | None = None,
    ) -> BatchPlan:
        """The plan of ``slots``: cut here, or as ``cut`` (a streamed batch's, cut as they came)."""
        if cut is None and len(slots) == 1 and not self.resource_conflicts:
            only = slots[0]  # any strategy: one run, or none
            call = only.call
            if only.routing is RoutingClass.SHORT_CIRCUIT:
                return BatchPlan((), (0,), (call.id,))
            return BatchPlan((RunPlan(0, only.routing, (0,), (call.id,), (call.name,)),), ())
        if cut is None and self.resource_conflicts:  # resource-keyed conflicts: _resources
            cut = keyed_cut(self.strategy, slots)
        elif cut is None:
            cut = [(r, i, False) for r, i in self.strategy.cut([s.routing for s in slots])]
        runs = []
        for n, (routing, indices, keyed) in enumerate(cut):
            calls = [slots[i].call for i in indices]
            runs.append(
                RunPlan(
                    n,
                    routing,
                    tuple(indices),
                    tuple([c.id for c in calls]),
                    tuple([c.name for c in calls]),
                    keyed,
                )
            )
        answered = [s for s in slots if s.routing is RoutingClass.SHORT_CIRCUIT]
        if not answered:
            return BatchPlan(tuple(runs), ())
        return BatchPlan(
            tuple(runs), tuple([s.index for s in answered]), tuple([s.call.id for s in answered])
        )

    async def execute_batch(
        self,
        calls: Sequence[ToolCall],
        *,
        steering: Steering | None = None,
        batch_key: str | None = None,
    ) -> BatchOutcome:
        """Run a batch to completion; return one result per call, in call order.

        ``batch_key``: the batch's name in the journal, if there is one
        (``prepare``).

        Raises:
            TypeError: ``calls`` is not a sequence of ``ToolCall``.
        """
        if self.journal is not None:
            await self.journal.ready()
        return await self.prepare(calls, batch_key=batch_key).run(steering=steering)

    async def resume_session(self) -> list[BatchOutcome]:
        """Run again every batch of the journal's session that has a call without a result.

        Each batch is rebuilt from its records (its calls, in order, under
        its batch key) and resumes as a re-submitted batch would
        (docs/durable.md): finished calls replayed, the others by the resume
        rules. Batches run one after another, in the order of their keys.
        A batch whose plan never reached the store is not known: its host
        submits it again.

        Raises:
            RuntimeError: the executor has no journal.
        """
        if self.journal is None:
            raise RuntimeError("resume_session needs an executor with a journal (journal=...)")
        await self.journal.ready()
        return [
            await self.execute_batch(calls, batch_key=key)
            for key, calls in self.journal.unfinished()
        ]

    async def execute_call(self, call: ToolCall) -> ToolResult:
        """Run one call as a batch of its own; return its result.

        The result, and everything sinks and hooks see, are those of
        ``(await execute_batch([call])).results[0]``. When nobody observes
        the executor (no sinks, hooks or steering), a call answered at plan
        time, or one whose tool cannot block (no ``await``) with a permit
        free, is answered without building a batch, its plan or its outcome.

        Raises:
            TypeError: ``call`` is not a ``ToolCall``.
        """
        if not isinstance(call, ToolCall):
            raise TypeError(
                f"execute_call takes a ToolCall, got {type(call).__name__} ({call!r:.80}); "
                "toolexec.formats parses a provider's calls into ToolCall objects"
            )
        if self.journal is not None:
            return (await self.execute_batch([call])).results[0]
        slot = CallSlot(0, call)
        self._planner.plan_call(slot)
        rt = self._runtime
        batch_id = f"{self.agent_path}:b{next(self._ids)}"
        unobserved = self.steering is None and not (rt.sinks or rt.hooks or self.resource_conflicts)
        if unobserved and await run_alone(rt, slot, batch_id):
            assert slot.result is not None
            return slot.result
        batch = Batch(batch_id, [slot], self._plan([slot]), rt, self.steering)
        return (await batch.run()).results[0]

    def cancel_all(self) -> None:
        """Cancel every batch this executor is running (results: ``cancelled``).

        Thread-safe, as ``Batch.cancel`` is.
        """
        for cancel in list(self._runtime.cancellers):
            cancel()

    def fork_for_subagent(
        self,
        name: str = "child",
        *,
        registry: ToolRegistry | None = None,
        policy: ToolPolicy | None = None,
        parent_call: tuple[str, str] | None = None,
        journal_scope: str | None = None,
    ) -> ToolExecutor:
        """An executor for a sub-agent: same tools, policy and sinks, forked pools.

        The fork shares the read and serial-mutator limiters (default mutators
        stay serial across the tree), the services, the backends and the
        ``prompt_once`` answers, and gets fresh concurrent-mutator and per-tool
        limiters of the same widths (so a recursive call holding a permit
        never waits on its own child).

        Args:
            name: the child's name; its path is ``<this path>/<name>``.
            registry: the child's tools, if not this executor's.
            policy: the child's policy, if not this executor's.
            parent_call: ``(batch id, call id)`` of the call starting the
                sub-agent; the child's events name it.
            journal_scope: where the child's calls are journaled, below this
                executor's (``Journal.below``); the same on every attempt of
                the call starting it, so the child resumes too. By default
                ``name``.
        """
        journal = self.journal
        if journal is not None:
            journal = journal.below(journal_scope or name)
        return attrs.evolve(
            self,
            registry=registry if registry is not None else self.registry,
            policy=policy if policy is not None else self.policy,
            agent_path=f"{self.agent_path}/{name}",
            parent_call=parent_call,
            memory=self._memory,
            pools=self.pools.fork(),
            binding=self._binding,
            journal=journal,
        )

    def service(self, kind: type[T]) -> T | None:
        """The service of type ``kind`` this executor's tree shares, or ``None``."""
        return self.services.get(kind)

    def statistics(self) -> ExecutorStatistics:
        """A snapshot of this executor's limiters and calls in flight."""
        return self.pools.statistics(self._runtime.in_flight)


def _not_calls(value: object, index: int | None = None) -> TypeError:
    """What is wrong with the calls handed to ``prepare`` or ``execute_batch``:
    the whole ``value``, or (``index`` given) the item ``value`` at ``index``."""
    fix = "toolexec.formats parses a provider's calls into ToolCall objects"
    if index is not None:
        return TypeError(
            f"a batch takes a sequence of ToolCall; item {index} is a {type(value).__name__}"
            f" ({value!r:.80}); {fix}"
        )
    if isinstance(value, ToolCall):
        return TypeError(
            "a batch takes a sequence of ToolCall, got one ToolCall: put it in a list, "
            "or use execute_call"
        )
    return TypeError(f"a batch takes a sequence of ToolCall, got a {type(value).__name__}; {fix}")

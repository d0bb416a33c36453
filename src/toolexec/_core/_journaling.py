"""What a journaled batch records, when it makes it durable, and how it resumes.

The user-facing story: docs/durable.md.

Theory of operation. A ``Journal`` is one session's view of a store
(``_journal.JournalStore``); it loads the session's records once, and
keeps them as it writes. Each batch of an executor built with a journal
gets a ``BatchJournal``, reached by the lifecycle through one attribute,
``Reporter.journal`` (``None`` without a journal, so a call then pays one
``is None`` check at each step):

1. *Plan* (``BatchJournal.plan``, in place of the planner): a call whose
   record is finished is answered at once with the recorded result (and
   ``details["replayed"]``); a call that started, may have taken effect and
   may not run again is answered at once as interrupted. Both are answered
   as the planner answers a call it refuses: no permit, no run split. Any
   other call is planned as usual and its record (tool, arguments, grant,
   whether it may run again) is kept for the next write.
2. *Start*: a call that could change something and is not idempotent must
   be durably started before its tool runs, or a crash could leave no
   trace of a side effect. Its plan gives it a backend (``ClaimFirst``) that
   first writes the results kept so far and then claims the call in the
   store; with ``Journal(lease=...)`` every call is claimed, under a lease,
   so hosts sharing the journal never run one call twice. Any other call
   may run again whatever happens to it, so its start is not recorded.
3. *Conclude*: the result is kept (``conclude``); every run ends with one
   write of all that was kept, and so does the batch before it returns:
   a result is durable before the host receives it.
4. *Approve*: a call's question is a record, written before the wait; the
   answer may come from this process's approver or from any other process
   through the store (polled every ``poll_interval`` seconds), the first
   one wins, and a question already answered is never asked again.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._gate._approval import ApprovalAnswer
from .._gate._policy import HOST_GRANT
from . import _messages as say
from ._errors import ToolError
from ._journal import (
    ANSWERS,
    CallKey,
    CallRecord,
    JournalStore,
    Phase,
    result_from_json,
    result_to_json,
)
from ._lifecycle import State, error_result
from ._types import ErrorClass, RoutingClass, ToolCall

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from .._gate._approval import ApprovalRequest
    from ._backend import Backend
    from ._lifecycle import CallSlot
    from ._tool_protocol import Tool, ToolContext
    from ._types import ToolOutput, ToolResult

__all__ = ["BatchJournal", "ClaimFirst", "Journal", "batch_key_of"]


def _positive(_inst: object, attr: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and (isinstance(value, bool) or not value > 0):
        raise ValueError(f"Journal {attr.name} must be seconds > 0, got {value!r}")


@attrs.define(eq=False)
class _Records:
    """The records of a session this process knows, shared by a journal's scopes."""

    by_key: dict[CallKey, CallRecord] = attrs.field(factory=dict)
    loaded: bool = False


@attrs.define(eq=False, kw_only=True)
class Journal:
    """One session's call journal: where a durable executor records its calls.

    Give it to an executor (``ToolExecutor(..., journal=journal)``); every
    batch's calls are recorded, and a batch submitted again with the same
    call ids resumes (docs/durable.md). ``open`` loads the session's records;
    an executor's ``execute_batch`` loads them too if nobody has.

    Example::

        store = SQLiteStore("journal.db")
        journal = await Journal.open(store, "session-1")
        executor = ToolExecutor(registry, journal=journal)
        outcome = await executor.execute_batch(calls)   # again after a crash: resumed

    Args:
        store: where the records live (``SQLiteStore``, a PostgreSQL store).
        session: the session's id; records of other sessions are not read.
        owner: who claims calls (a host's name): unique per process by default.
        lease: seconds a claimed call's lease lasts, renewed while it runs.
            Set it when several hosts share the journal: every call is then
            claimed, and another host never runs a call while its lease is
            live. ``None`` (one host): only calls that could change
            something are claimed, without a lease.
        poll_interval: seconds between looks at the store while waiting for
            an answer from another process (or another host's call).
        scope: the agent path records are kept under (a sub-agent's journal
            is a scope below its parent call's).
    """

    store: JournalStore
    session: str = attrs.field(validator=attrs.validators.instance_of(str))
    owner: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    lease: float | None = attrs.field(default=None, validator=_positive)
    poll_interval: float = attrs.field(default=1.0, validator=_positive)
    scope: str = "root"
    _records: _Records = attrs.field(factory=_Records, alias="records", repr=False)

    @classmethod
    async def open(cls, store: JournalStore, session: str, **kw: Any) -> Journal:
        """A journal of ``session`` in ``store``, its records loaded (``kw``: see the class)."""
        journal = cls(store=store, session=session, **kw)
        await journal.load()
        return journal

    @property
    def loaded(self) -> bool:
        """Whether the session's records were read from the store."""
        return self._records.loaded

    async def load(self) -> None:
        """Read the session's records from the store (again, if they were)."""
        records = await self.store.load(self.session)
        self._records.by_key.update((r.key, r) for r in records)
        self._records.loaded = True

    async def ready(self) -> None:
        """Load the records if nobody has; with a lease (several hosts), read them afresh."""
        if not self._records.loaded or self.lease is not None:
            await self.load()

    def below(self, name: str) -> Journal:
        """The journal of a sub-agent's calls: a scope below this one."""
        return attrs.evolve(self, scope=f"{self.scope}/{name}", records=self._records)

    def batch(self, key: str) -> BatchJournal:
        """The journal of one batch, whose records are kept under ``key``.

        Raises:
            RuntimeError: the session's records were never loaded (use
                ``Journal.open``, ``load()``, or ``execute_batch``).
        """
        if not self._records.loaded:
            raise RuntimeError(
                "the journal's records are not loaded, so a batch could repeat a call that "
                "already ran: open it with `await Journal.open(store, session)`, or call "
                "`await journal.load()` first, or run batches with execute_batch"
            )
        return BatchJournal(self, key)

    def known(self, key: CallKey) -> CallRecord | None:
        """The record this process knows for ``key``."""
        return self._records.by_key.get(key)

    def records(self) -> list[CallRecord]:
        """Every record this process knows of the session, in no particular order."""
        return list(self._records.by_key.values())

    def keep(self, record: CallRecord) -> None:
        """Remember ``record`` as the latest known."""
        self._records.by_key[record.key] = record

    async def remembered(self, tool: str) -> bool | None:
        """The session's ``prompt_once`` answer for ``tool``, from any process; ``None``: none."""
        record = await self.store.get(CallKey(self.session, "", ANSWERS, tool))
        if record is None or record.result is None:
            return None
        return bool(json.loads(record.result).get("approved"))

    async def remember(self, tool: str, approved: bool, by: str) -> None:
        """Record the session's ``prompt_once`` answer for ``tool`` (the first one stays)."""
        answer = json.dumps({"approved": approved, "by": by}, ensure_ascii=False)
        key = CallKey(self.session, "", ANSWERS, tool)
        await self.store.write(
            [CallRecord(key=key, phase=Phase.FINISHED, tool=tool, result=answer)]
        )

    def unfinished(self) -> list[tuple[str, list[ToolCall]]]:
        """The batches of this scope with a call that has no result: ``(batch key, calls)``.

        Each batch's calls are rebuilt from their records, in call order, by
        batch key order (``ToolExecutor.resume_session`` runs them).
        """
        batches: dict[str, list[CallRecord]] = {}
        for record in self._records.by_key.values():
            if record.key.agent_path == self.scope:
                batches.setdefault(record.key.batch, []).append(record)
        out = []
        for key, records in sorted(batches.items()):
            if any(r.phase is not Phase.FINISHED for r in records):
                records.sort(key=lambda r: r.index)
                out.append((key, [ToolCall(r.key.call_id, r.tool, r.arguments) for r in records]))
        return out


def batch_key_of(calls: Sequence[ToolCall]) -> str:
    """The journal key of a batch the host named none for: a digest of its call ids."""
    digest = hashlib.sha256("\0".join(c.id for c in calls).encode())
    return f"ids-{digest.hexdigest()[:16]}"


class BatchJournal:
    """One batch's records: kept as its calls go, written at its durability points."""

    __slots__ = ("_journal", "_kept", "_mine", "_planned_at", "_started", "_swaps", "key")

    def __init__(self, journal: Journal, key: str) -> None:
        self._journal = journal
        self.key = key
        self._planned_at = time.time()
        self._started: dict[str, float] = {}  # when each call's tool started
        self._mine: dict[str, CallRecord] = {}  # this batch's records, by call id
        self._kept: dict[str, CallRecord] = {}  # those not written yet
        self._swaps: dict[str, ToolResult] = {}

    @property
    def journal(self) -> Journal:
        """The session's journal."""
        return self._journal

    def call_key(self, call_id: str) -> CallKey:
        """The key of this batch's call ``call_id``."""
        j = self._journal
        return CallKey(j.session, j.scope, self.key, call_id)

    def idempotency_key(self, call_id: str) -> str:
        """The key a tool gets in ``ToolContext.idempotency_key``: the same on every attempt."""
        k = self.call_key(call_id)
        text = "\0".join((k.session, k.agent_path, k.batch, k.call_id))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _keep(self, record: CallRecord) -> None:
        call_id = record.key.call_id
        self._mine[call_id] = self._kept[call_id] = record

    # -- 1. plan ------------------------------------------------------------------

    def plan(self, slot: CallSlot, plan_call: Callable[[CallSlot], None]) -> None:
        """Answer a call from its record (replayed, interrupted), or plan it (``plan_call``)."""
        key = self.call_key(slot.call.id)
        known = self._journal.known(key)
        if known is not None and known.phase is Phase.FINISHED and known.result is not None:
            slot.finish(result_from_json(known.result, replayed=True))
            return
        if known is not None and self._interrupted(known):
            self._finish_interrupted(slot, known)
            return
        plan_call(slot)
        grant = slot.grant
        record = CallRecord(
            key=key,
            index=slot.index,
            tool=slot.call.name,
            arguments=_arguments_text(slot.call.arguments),
            grant=None if grant is None or grant is HOST_GRANT else _json(attrs.asdict(grant)),
            rerun=may_rerun(slot),
            attempt=0 if known is None else known.attempt,
        )
        if slot.state is State.DONE:
            assert slot.result is not None
            record = _finished(record, self._result_json(slot.call.id, slot.result))
        elif not record.rerun or self._journal.lease is not None:
            slot.backend = ClaimFirst(self, slot.backend)
        self._keep(record)

    def _interrupted(self, known: CallRecord) -> bool:
        """Whether a call started, may not run again, and runs on no other host now."""
        if known.phase is not Phase.STARTED or known.rerun:
            return False
        return not self._leased_elsewhere(known, time.time())

    def _leased_elsewhere(self, record: CallRecord, now: float) -> bool:
        """Whether another owner holds a live lease on the call (it may be running there)."""
        live = record.lease_until is not None and record.lease_until > now
        return live and record.lease_owner != self._journal.owner

    def _finish_interrupted(self, slot: CallSlot, known: CallRecord) -> None:
        result = interrupted(slot)
        slot.finish(result)
        self._keep(_finished(known, self._result_json(slot.call.id, result)))

    # -- 2. start -----------------------------------------------------------------

    def started(self, slot: CallSlot) -> None:
        """Note when the call's tool started (``_call.begin``), for its record's ``times``.

        The start of a call that could change something is recorded
        durably by its claim; any other may run again whatever happens to
        it, so its start needs no record of its own.
        """
        self._started[slot.call.id] = time.time()

    async def claim(self, call_id: str) -> None:
        """Make the kept records durable, then claim the call; raise ``ToolError`` if refused.

        A call another host holds under a live lease is waited for; one
        that finished there is answered with its result, one that started
        and may not run again, as interrupted (``concluded`` swaps them in).
        """
        j = self._journal
        if self._kept:  # the batch's plan and results so far, before anything can happen
            await self.flush()
        while True:
            known = self._mine[call_id]
            now = time.time()
            until = None if j.lease is None else now + j.lease
            mine = attrs.evolve(known, lease_owner=j.owner, lease_until=until)
            stored = await j.store.claim(mine, now)
            if stored is None:
                self._mine[call_id] = attrs.evolve(
                    mine, phase=Phase.STARTED, attempt=known.attempt + 1
                )
                self._kept.pop(call_id, None)  # the claim wrote it
                return
            self._mine[call_id] = stored
            self._kept.pop(call_id, None)
            if stored.phase is Phase.FINISHED and stored.result is not None:
                self._swaps[call_id] = result_from_json(stored.result, replayed=True)
                raise ToolError(say.finished_elsewhere(stored.tool))
            if self._leased_elsewhere(stored, now):
                # Running on another host: wait for it. Our own results so far
                # go first, for that host may be waiting for one of them.
                await self.flush()
                await trio.sleep(j.poll_interval)
            elif stored.phase is Phase.STARTED and not stored.rerun:
                raise ToolError(say.interrupted(stored.tool), details={"interrupted": True})

    async def renew(self, call_id: str) -> None:
        """Keep the call's lease live while it runs (with ``Journal(lease=...)``)."""
        j = self._journal
        assert j.lease is not None
        while True:
            await trio.sleep(j.lease / 3)
            await j.store.renew([self.call_key(call_id)], j.owner, time.time() + j.lease)

    # -- 3. conclude --------------------------------------------------------------

    def concluded(self, slot: CallSlot, result: ToolResult) -> ToolResult:
        """Keep the call's result (``_call.conclude``); the result the call gets."""
        call_id = slot.call.id
        swap = self._swaps.pop(call_id, None)
        if swap is not None:
            return swap
        self._keep(_finished(self._mine[call_id], self._result_json(call_id, result)))
        return result

    def _result_json(self, call_id: str, result: ToolResult) -> str:
        """The result's JSON, with when the call was planned, started and finished."""
        started = self._started.pop(call_id, None)
        times = {"planned": self._planned_at, "started": started, "finished": time.time()}
        return result_to_json(result, times=times)

    async def flush(self) -> None:
        """Write every kept record, in one transaction (durable on return)."""
        if self._kept:
            records = list(self._kept.values())
            self._kept.clear()
            await self._journal.store.write(records)
            for record in records:
                self._journal.keep(record)

    # -- 4. approve -----------------------------------------------------------------

    async def approval(
        self,
        slot: CallSlot,
        request: ApprovalRequest,
        timeout: float,
        ask_here: Callable[[float], Awaitable[ApprovalAnswer | ToolResult | None]] | None,
        asked: Callable[[], None],
    ) -> ApprovalAnswer | ToolResult | None:
        """The answer to the call's question, from here or any process; ``None``: none in time.

        The question is written (with its deadline) before anyone is asked
        (``asked`` tells the sinks); a question already in the journal keeps
        its deadline, and one already answered is answered from the journal
        without asking.
        """
        j = self._journal
        key = self.call_key(slot.call.id)
        stored = await j.store.get(key)
        if stored is not None and stored.answer is not None:
            return _answer_of(stored.answer)
        if stored is not None and stored.question is not None and stored.deadline is not None:
            deadline = stored.deadline
        else:
            deadline = time.time() + timeout
            known = self._mine[slot.call.id]
            question = attrs.evolve(known, question=_question_json(request), deadline=deadline)
            self._keep(question)
            await self.flush()
        asked()
        waiting = _Waiting(self, key)
        with trio.move_on_after(max(0.0, deadline - time.time())):
            async with trio.open_nursery() as nursery:
                waiting.scope = nursery.cancel_scope
                nursery.start_soon(waiting.poll)
                if ask_here is not None:
                    nursery.start_soon(waiting.ask, ask_here, deadline)
        return waiting.answer


class _Waiting:
    """One question's wait: this process's approver and the store, the first answer wins."""

    def __init__(self, batch: BatchJournal, key: CallKey) -> None:
        self.batch, self.key = batch, key
        self.answer: ApprovalAnswer | ToolResult | None = None
        self.scope = trio.CancelScope()

    async def poll(self) -> None:
        j = self.batch.journal
        while True:
            await trio.sleep(j.poll_interval)
            stored = await j.store.get(self.key)
            if stored is not None and stored.answer is not None:
                self._set(_answer_of(stored.answer))
                return

    async def ask(
        self,
        ask_here: Callable[[float], Awaitable[ApprovalAnswer | ToolResult | None]],
        deadline: float,
    ) -> None:
        answer = await ask_here(max(0.0, deadline - time.time()))
        if not isinstance(answer, ApprovalAnswer):
            if answer is not None:  # a broken approver: refused here, as without a journal
                self._set(answer)
            return
        store = self.batch.journal.store
        if not await store.answer(self.key, _json({**attrs.asdict(answer), "at": time.time()})):
            stored = await store.get(self.key)  # another process answered first
            if stored is not None and stored.answer is not None:
                answer = _answer_of(stored.answer)
        self._set(answer)

    def _set(self, answer: ApprovalAnswer | ToolResult) -> None:
        self.answer = answer
        self.scope.cancel()


@attrs.frozen
class ClaimFirst:
    """A call's backend while journaled: claim the call durably, then run it where it runs."""

    batch: BatchJournal
    inner: Backend | None

    async def run(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Claim, then run the tool (on ``inner``, if the grant named a backend)."""
        await self.batch.claim(ctx.call_id)
        if self.batch.journal.lease is None:
            return await self._run(tool, arguments, ctx)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.batch.renew, ctx.call_id)
            output = await self._run(tool, arguments, ctx)
            nursery.cancel_scope.cancel()
        return output

    async def _run(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        if self.inner is not None:
            return await self.inner.run(tool, arguments, ctx)
        return await tool.execute(arguments, ctx)


def may_rerun(slot: CallSlot) -> bool:
    """Whether an interrupted call may run again: it cannot change anything (routed
    read-only), its tool declares itself idempotent, or it runs a sub-agent (whose
    own calls are journaled and resume by these rules)."""
    if slot.routing is RoutingClass.READ_ONLY:
        return True
    entry = slot.entry
    if entry is None:
        return False
    return entry.definition.idempotent or entry.definition.is_recursive


def interrupted(slot: CallSlot) -> ToolResult:
    """The result of a call that started, may have taken effect, and will not run again."""
    text = say.interrupted(slot.call.name)
    return error_result(slot, ErrorClass.EXECUTION_ERROR, text, details={"interrupted": True})


def _finished(r: CallRecord, result: str) -> CallRecord:
    """``r`` finished with ``result``: ``attrs.evolve``'s record, at a third of its cost."""
    return CallRecord(
        key=r.key,
        phase=Phase.FINISHED,
        index=r.index,
        tool=r.tool,
        arguments=r.arguments,
        grant=r.grant,
        rerun=r.rerun,
        attempt=r.attempt,
        lease_owner=r.lease_owner,
        lease_until=r.lease_until,
        result=result,
        question=r.question,
        deadline=r.deadline,
        answer=r.answer,
    )


def _arguments_text(arguments: object) -> str:
    if isinstance(arguments, str):
        return arguments
    return _json(arguments)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _question_json(request: ApprovalRequest) -> str:
    return _json(
        {
            "call_id": request.call_id,
            "tool_name": request.tool_name,
            "agent_path": request.agent_path,
            "side_effects": request.side_effects.value,
            "arguments": request.arguments,
            "reason": request.reason,
            "summary": request.summary,
        }
    )


def _answer_of(text: str) -> ApprovalAnswer:
    data = json.loads(text)
    return ApprovalAnswer(
        bool(data["approved"]), str(data.get("by", "")), str(data.get("reason", ""))
    )

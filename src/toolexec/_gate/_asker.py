"""Asking a human: the approval step of a call's run (docs/security.md).

Theory of operation. A call whose planned approval mode is not ``auto`` asks
before it is admitted, so a waiting human never holds a permit. A remembered
``prompt_once`` answer for the tool decides at once (with a journal, one any
process of the session gave: it is a record); while a ``prompt_once``
question for the tool is open, later calls of it (in this batch, another, or
a sibling agent sharing the memory) wait for that answer instead of asking
again, and ask only if it ends without one (a timeout, a cancel). Otherwise the approver
is shown the arguments as canonical JSON, and the call runs exactly those
(re-read from that JSON) if the answer is a yes given within the timeout.
Everything else fails closed: no approver, arguments that cannot be shown,
an approver that raises or answers with something that is not an
``ApprovalAnswer``, and an answer that arrives after the deadline.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from typing import TYPE_CHECKING

import attrs
import trio

from .._core import _messages as say
from .._core._events import ApprovalRequested, ApprovalResolved
from .._core._lifecycle import error_result
from .._core._types import ErrorClass, ToolResult
from ._approval import ApprovalAnswer, ApprovalMode, ApprovalRequest, canonical_json

if TYPE_CHECKING:
    from .._core._lifecycle import CallSlot
    from .._core._report import Reporter
    from ._approval import ApprovalConfig, Approver

__all__ = ["ApprovalMemory", "Asker"]

_log = logging.getLogger("toolexec")


@attrs.define(eq=False)
class ApprovalMemory:
    """``prompt_once`` answers by tool name, and the questions still open.

    One per session: an executor and all its forks share it.
    """

    answers: dict[str, bool] = attrs.field(factory=dict)
    open: dict[str, trio.Event] = attrs.field(factory=dict)


@attrs.frozen
class Asker:
    """Who answers approval requests, how long they get, and what is remembered."""

    approver: Approver | None
    config: ApprovalConfig | None
    memory: ApprovalMemory
    agent_path: str

    async def ask(self, slot: CallSlot, report: Reporter) -> ToolResult | None:
        """Get the call approved (``None``) or the result that refuses it."""
        if slot.needs_approval is not ApprovalMode.PROMPT_ONCE:
            return await self._ask(slot, report)
        name, memory, journal = slot.call.name, self.memory, report.journal
        looked = journal is None  # with a journal, another process may have answered
        while name not in memory.answers:
            question = memory.open.get(name)
            if question is None and journal is not None and not looked:
                looked = True
                remembered = await journal.journal.remembered(name)
                if remembered is not None:
                    memory.answers[name] = remembered
                continue  # anything may have changed meanwhile
            if question is None:  # the first to ask: the others wait for this answer
                question = memory.open[name] = trio.Event()
                try:
                    return await self._ask(slot, report)
                finally:
                    del memory.open[name]
                    question.set()
            await question.wait()
        if memory.answers[name]:
            return None
        return error_result(slot, ErrorClass.USER_DENIED, say.denied_for_session(name))

    async def _ask(self, slot: CallSlot, report: Reporter) -> ToolResult | None:
        name = slot.call.name
        if self.approver is None and report.journal is None:  # a journal: any process answers
            return error_result(slot, ErrorClass.PERMISSION_DENIED, say.no_approver(name))
        try:
            request = self._request(slot)
        except (TypeError, ValueError) as exc:  # not JSON values: nothing a human could read
            return error_result(slot, ErrorClass.PERMISSION_DENIED, say.not_showable(name, exc))
        return await self._answer(slot, request, report)

    def _request(self, slot: CallSlot) -> ApprovalRequest:
        assert slot.entry is not None
        return ApprovalRequest(
            slot.call.id,
            slot.call.name,
            self.agent_path,
            slot.entry.definition.side_effects,
            canonical_json(slot.arguments),
            slot.reason,
        )

    async def _answer(
        self, slot: CallSlot, request: ApprovalRequest, report: Reporter
    ) -> ToolResult | None:
        name = slot.call.name
        timeout = self.config.timeout if self.config is not None else 300.0
        asked = partial(report.call_event, ApprovalRequested, slot.call, summary=request.summary)
        if report.journal is None:
            asked()
            answer = await self._wait(slot, request, timeout)
        else:  # the question is a journal record; any process may answer it
            here = None if self.approver is None else partial(self._wait, slot, request)
            answer = await report.journal.approval(slot, request, timeout, here, asked)
        if isinstance(answer, ToolResult):
            return answer
        report.call_event(
            ApprovalResolved,
            slot.call,
            approved=answer is not None and answer.approved is True,
            by=answer.by if answer is not None else "timeout",
        )
        if answer is None:
            text = say.approval_timeout(name, timeout)
            return error_result(slot, ErrorClass.CONFIRMATION_TIMEOUT, text)
        if slot.needs_approval is ApprovalMode.PROMPT_ONCE:
            self.memory.answers[name] = answer.approved is True
            if report.journal is not None:  # for the session's other processes, and resumes
                await report.journal.journal.remember(name, answer.approved is True, answer.by)
        if answer.approved is not True:
            return error_result(slot, ErrorClass.USER_DENIED, say.user_denied(name, answer.reason))
        slot.arguments = json.loads(request.arguments)  # run exactly what was shown
        return None

    async def _wait(
        self, slot: CallSlot, request: ApprovalRequest, timeout: float
    ) -> ApprovalAnswer | ToolResult | None:
        """The answer; ``None`` for none in time; a refusal for a broken approver."""
        assert self.approver is not None
        name = slot.call.name
        deadline = trio.current_time() + timeout
        answer: object = None
        try:
            with trio.CancelScope(deadline=deadline):
                answer = await self.approver.request(request)
        except Exception as exc:
            _log.exception("approver %r raised; denying the call", self.approver)
            text = say.approver_failed(name, exc)
            return error_result(slot, ErrorClass.PERMISSION_DENIED, text)
        if trio.current_time() >= deadline:
            return None  # too late (an approver that blocked): the timeout has answered
        if not isinstance(answer, ApprovalAnswer):
            _log.error("approver %r returned %r, not an ApprovalAnswer", self.approver, answer)
            text = say.approver_invalid(name)
            return error_result(slot, ErrorClass.PERMISSION_DENIED, text)
        return answer

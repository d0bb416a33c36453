"""The agent loop: model -> batch of calls -> executor -> results -> model.

Theory of operation. A loop owns a conversation (``Message`` values) and
repeats one *turn*: ask the model, and if it asked for tool calls, run them
as one batch on the executor and append the results. It stops when the model
answers without calls (``StopReason.FINISHED``), after ``max_turns`` turns
(``StopReason.MAX_TURNS``, a value, never an exception), or when the host
cancels one of its batches (``StopReason.CANCELLED``).

Steering belongs to the executor: when it fires, the calls not yet started
are answered ``skipped`` and its messages become user messages that the model
reads on the next turn.

Cancellation from an enclosing trio scope (a parent's call timing out, the
host cancelling a task) is never swallowed. Before it propagates, the batch
in flight is cancelled in an orderly way, so every call still gets its
``cancelled`` result and event, and every task the batch started has ended.

With a journal on the executor (docs/durable.md, "Agent loops"), the loop
checkpoints its conversation twice a turn (``_checkpoint``): once the model
has answered, and once the turn's results are in. A loop run again after a
crash starts from its last checkpoint: a turn whose calls were asked for
submits those same calls again, and the journal's resume rules decide what
runs; a loop that had stopped gives its result again without asking.
"""

from __future__ import annotations

import enum
import itertools
import secrets
from typing import TYPE_CHECKING, Any

import attrs

from ._checkpoint import Checkpoint, load_checkpoint, save_checkpoint, transcript_calls
from ._model import Message, Usage

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._core._batch import BatchOutcome
    from .._core._executor import ToolExecutor
    from .._core._types import ToolCall
    from ._model import Model, ModelResponse

__all__ = ["AgentLoop", "AgentResult", "StopReason"]


class StopReason(enum.Enum):
    """Why an agent loop stopped."""

    FINISHED = "finished"
    """The model answered without asking for tool calls."""
    MAX_TURNS = "max_turns"
    """The loop ran ``max_turns`` turns and the model still wanted tools."""
    CANCELLED = "cancelled"
    """The host cancelled a batch of the loop (``ToolExecutor.cancel_all``)."""


@attrs.frozen
class AgentResult:
    """What an agent loop hands back.

    Attributes:
        loop_id: the ``AgentLoop``'s id (sub-agents report it in their
            result details as ``child_loop_id``).
        agent_path: the executor's place in the agent tree.
        stop_reason: why the loop stopped.
        text: the model's last text; the final answer when ``FINISHED``.
        transcript: the whole conversation, system prompt first. Every
            assistant tool call has its results in the following ``tool``
            message, so a transcript can be continued with ``run``.
        usage: token counts summed over every model response.
        turns: how many times the model was asked.
        tool_calls: how many tool calls the model asked for in total.
    """

    loop_id: str
    agent_path: str
    stop_reason: StopReason
    text: str
    transcript: tuple[Message, ...]
    usage: Usage
    turns: int
    tool_calls: int

    @property
    def finished(self) -> bool:
        """Whether the model gave a final answer (``stop_reason`` is ``FINISHED``)."""
        return self.stop_reason is StopReason.FINISHED


def _positive(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attr.name} must be an integer >= 1, got {value!r}")


# Loop ids: a random per-process prefix and a counter (cheaper than a uuid4 each).
_ID_PREFIX = secrets.token_hex(5)
_loop_numbers = itertools.count(1)


def _new_loop_id() -> str:
    return f"loop-{_ID_PREFIX}{next(_loop_numbers):06x}"


@attrs.define
class _Progress:
    """Where a loop is: its conversation, turns, calls, usage, last text, and why it stopped."""

    messages: list[Message]
    turn: int = 0
    calls: int = 0
    usage: Usage = attrs.field(factory=Usage)
    text: str = ""
    stop: str | None = None


@attrs.define(eq=False)
class AgentLoop:
    """Run a model against an executor until it answers without tool calls.

    Example::

        loop = AgentLoop(model, ToolExecutor(registry), system_prompt="Be brief.")
        result = await loop.run("How many files are in the workspace?")
        print(result.stop_reason, result.text, result.usage)

    Args:
        model: the LLM (any ``Model``; ``toolexec.testing.ScriptedModel`` in tests).
        executor: runs the calls; its registry is what the model is shown.
        system_prompt: the first message, if not empty.
        max_turns: how many times the model may be asked; when the last
            turn still asks for tools, those calls run (so the transcript
            stays valid) and the loop stops with ``StopReason.MAX_TURNS``.
        on_progress: called with a short line of text after each model
            answer (``SubAgentTool`` passes the parent call's
            ``report_progress``). It must not block; exceptions propagate.
        loop_id: defaults to a fresh unique id; create one loop per run to
            keep ids distinct (``SubAgentTool`` does).
        checkpoint_key: with a journal on the executor, the name of this
            loop's checkpoint in the executor's scope of the session; a
            loop run with the same key resumes from it (docs/durable.md).
            A sub-agent's loop is in a scope of its own already.
    """

    model: Model
    executor: ToolExecutor
    system_prompt: str = ""
    max_turns: int = attrs.field(default=20, validator=_positive)
    on_progress: Callable[[str], None] | None = None
    loop_id: str = attrs.field(factory=_new_loop_id)
    checkpoint_key: str = "loop"

    async def run(self, prompt: str | Sequence[Message]) -> AgentResult:
        """Run turns until the model finishes, ``max_turns`` is reached, or a cancel.

        Args:
            prompt: the user's request; or a whole conversation to continue
                (used as given: the system prompt is added only before a
                string prompt).

        Returns:
            The final text, the transcript, and the usage counts.

        Raises:
            trio.Cancelled: an enclosing scope was cancelled (after every
                call in flight got its ``cancelled`` result).
            Exception: whatever the model raised.
        """
        at = await self._restore(prompt)
        if at.stop is not None:  # it had stopped: the same result, without asking
            return self._result(at, StopReason(at.stop))
        tools = self.executor.registry.definitions()
        stop = StopReason.MAX_TURNS
        # Calls asked for before a crash (a restored turn): submit them again.
        pending = transcript_calls(at.messages) if at.turn else ()
        while pending or at.turn < self.max_turns:
            if not pending:
                response = await self._ask(at, tools)
                if not response.tool_calls:
                    stop = StopReason.FINISHED
                    break
                pending = response.tool_calls
                await self._save(at)
            outcome = await self._run_calls(at, pending)
            pending = ()
            if outcome.cancelled:
                stop = StopReason.CANCELLED
                break
            await self._save(at)
        if stop is not StopReason.CANCELLED:
            await self._save(at, stop.value)
        return self._result(at, stop)

    async def _ask(self, at: _Progress, tools: Sequence[Any]) -> ModelResponse:
        """One model turn: its answer, appended to the conversation."""
        at.turn += 1
        response = await self.model.respond(tuple(at.messages), tools)
        if response.usage.input_tokens or response.usage.output_tokens:
            at.usage += response.usage
        at.text = response.text
        at.messages.append(
            Message(
                "assistant",
                response.text,
                response.tool_calls,
                provider_blocks=response.provider_blocks,
            )
        )
        self._report(at.turn, response)
        at.calls += len(response.tool_calls)
        return response

    async def _run_calls(self, at: _Progress, calls: Sequence[ToolCall]) -> BatchOutcome:
        """Run the turn's calls as one batch; append the results (and steering)."""
        # In this task: on an outside cancel, Batch.run answers every
        # unfinished call ``cancelled`` once its tasks have ended.
        outcome = await self.executor.prepare(calls).run()
        at.messages.append(Message("tool", tool_results=outcome.results))
        at.messages.extend(Message("user", m) for m in outcome.steering_messages)
        return outcome

    async def _restore(self, prompt: str | Sequence[Message]) -> _Progress:
        """Where the loop starts: its last checkpoint (with a journal), or the prompt."""
        journal = self.executor.journal
        if journal is not None:
            await journal.ready()
            saved = await load_checkpoint(journal, self.checkpoint_key)
            if saved is not None:
                text = next((m.text for m in reversed(saved.messages) if m.role == "assistant"), "")
                return _Progress(
                    list(saved.messages), saved.turn, saved.calls, saved.usage, text, saved.stop
                )
        return _Progress(self._opening(prompt))

    async def _save(self, at: _Progress, stop: str | None = None) -> None:
        """Checkpoint the loop in the executor's journal, if it has one (``stop``: why
        it stopped, once it has)."""
        journal = self.executor.journal
        if journal is not None:
            state = Checkpoint(tuple(at.messages), at.turn, at.calls, at.usage, stop or at.stop)
            await save_checkpoint(journal, self.checkpoint_key, state)

    def _result(self, at: _Progress, stop: StopReason) -> AgentResult:
        return AgentResult(
            self.loop_id,
            self.executor.agent_path,
            stop,
            at.text,
            tuple(at.messages),
            at.usage,
            at.turn,
            at.calls,
        )

    def _opening(self, prompt: str | Sequence[Message]) -> list[Message]:
        if not isinstance(prompt, str):
            return list(prompt)
        opening = [Message("system", self.system_prompt)] if self.system_prompt else []
        opening.append(Message("user", prompt))
        return opening

    def _report(self, turn: int, response: ModelResponse) -> None:
        if self.on_progress is None:
            return
        if response.tool_calls:
            names = ", ".join(c.name for c in response.tool_calls)
            self.on_progress(f"turn {turn}: {len(response.tool_calls)} tool call(s): {names}")
        else:
            self.on_progress(f"turn {turn}: answered")

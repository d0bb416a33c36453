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
"""

from __future__ import annotations

import enum
import itertools
import secrets
from typing import TYPE_CHECKING

import attrs

from ._model import Message, Usage

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._core._executor import ToolExecutor
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
    """

    model: Model
    executor: ToolExecutor
    system_prompt: str = ""
    max_turns: int = attrs.field(default=20, validator=_positive)
    on_progress: Callable[[str], None] | None = None
    loop_id: str = attrs.field(factory=_new_loop_id)

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
        messages = self._opening(prompt)
        tools = self.executor.registry.definitions()
        usage, calls, text = Usage(), 0, ""
        stop = StopReason.MAX_TURNS
        turn = 0
        while turn < self.max_turns:
            turn += 1
            response = await self.model.respond(tuple(messages), tools)
            usage += response.usage
            text = response.text
            messages.append(
                Message(
                    "assistant",
                    response.text,
                    response.tool_calls,
                    provider_blocks=response.provider_blocks,
                )
            )
            self._report(turn, response)
            if not response.tool_calls:
                stop = StopReason.FINISHED
                break
            calls += len(response.tool_calls)
            # In this task: on an outside cancel, Batch.run answers every
            # unfinished call ``cancelled`` once its tasks have ended.
            outcome = await self.executor.prepare(response.tool_calls).run()
            messages.append(Message("tool", tool_results=outcome.results))
            messages.extend(Message("user", m) for m in outcome.steering_messages)
            if outcome.cancelled:
                stop = StopReason.CANCELLED
                break
        return AgentResult(
            self.loop_id,
            self.executor.agent_path,
            stop,
            text,
            tuple(messages),
            usage,
            turn,
            calls,
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

"""A deterministic, scripted model, so agent loops run the same way in every test.

``ScriptedModel`` answers from a list of steps, one per model call (the
package docstring shows one). When the script runs out, ``respond`` raises
``ScriptExhaustedError`` naming the conversation's last message, so a loop
that runs longer than the test expected fails loudly instead of hanging or
inventing answers.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from .._agents._model import Message, ModelResponse
from .._core._errors import ToolexecError
from .._core._types import ToolCall, ToolDefinition

__all__ = ["ScriptExhaustedError", "ScriptedModel", "ScriptedRequest", "Step", "tool_call"]

Answer: TypeAlias = str | ToolCall | Sequence[ToolCall] | ModelResponse
Step: TypeAlias = (
    Answer
    | Callable[[Sequence[Message]], Answer]
    | Callable[[Sequence[Message]], Awaitable[Answer]]
)

_ids = itertools.count(1)


def tool_call(
    name: str, arguments: Mapping[str, Any] | str | None = None, /, *, id: str = ""
) -> ToolCall:
    """Build a ``ToolCall``, with a fresh unique id unless one is given.

    Example: ``tool_call("read_file", {"path": "notes.txt"})``.
    """
    return ToolCall(id or f"call_{next(_ids)}", name, {} if arguments is None else arguments)


class ScriptExhaustedError(ToolexecError, AssertionError):
    """A ``ScriptedModel`` was asked for more answers than its script holds."""


@attrs.frozen
class ScriptedRequest:
    """What a ``ScriptedModel`` was asked once: the conversation and the tools shown."""

    messages: tuple[Message, ...]
    tool_names: tuple[str, ...]


def _steps(steps: Iterable[Step]) -> list[Step]:
    return list(steps)


def _as_response(answer: object) -> ModelResponse:
    if isinstance(answer, ModelResponse):
        return answer
    if isinstance(answer, str):
        return ModelResponse(text=answer)
    if isinstance(answer, ToolCall):
        return ModelResponse(tool_calls=(answer,))
    if isinstance(answer, Sequence) and all(isinstance(c, ToolCall) for c in answer):
        return ModelResponse(tool_calls=tuple(answer))
    raise TypeError(
        f"a ScriptedModel step gave {answer!r}; expected a str, a ToolCall, a list of "
        "ToolCalls, a ModelResponse, or a function of the messages returning one"
    )


@attrs.define(eq=False)
class ScriptedModel:
    """A ``Model`` that answers from a script of steps, one step per call.

    Each step is a text answer (``str``), one or several ``ToolCall`` s, a
    full ``ModelResponse`` (text and calls, usage), or a function (sync or
    async) of the conversation so far returning one of those.

    Args:
        steps: the script, consumed in order.

    Attributes:
        requests: every request answered so far, to assert on.
    """

    steps: list[Step] = attrs.field(converter=_steps)
    requests: list[ScriptedRequest] = attrs.field(factory=list, init=False)

    @property
    def remaining(self) -> int:
        """How many steps are left."""
        return len(self.steps) - len(self.requests)

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition]
    ) -> ModelResponse:
        """Answer with the next step of the script.

        Raises:
            ScriptExhaustedError: every step was already used.
            TypeError: a step is not one of the accepted forms.
        """
        n = len(self.requests)
        if n >= len(self.steps):
            last = messages[-1] if messages else None
            seen = f"{last.role}: {last.text or last.tool_results!r}" if last else "nothing"
            raise ScriptExhaustedError(
                f"ScriptedModel ran out of steps: it was asked a turn {n + 1} but its script "
                f"has {len(self.steps)}. The conversation's last message was ({seen}). "
                "Add a step, or check why the loop ran longer than expected."
            )
        self.requests.append(ScriptedRequest(tuple(messages), tuple(t.name for t in tools)))
        step = self.steps[n]
        if callable(step):
            answer = step(messages)
            if inspect.isawaitable(answer):
                answer = await answer
            return _as_response(answer)
        return _as_response(step)

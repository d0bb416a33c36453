"""Streaming admission: tool calls handed to a batch while the model still writes.

A model streams its answer; a tool call in it is complete long before the
answer is. A *feed* watches a provider's stream events and adds each call
to a streamed batch (``ToolExecutor.open_batch``) the moment its last
argument byte has arrived, and closes the batch when the answer ends, so
the executor starts the call at once if its run is open::

    batch = executor.open_batch()
    feed = AnthropicFeed(batch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch.run)          # or keep the outcome: see below
        async for event in stream:             # the SDK's streamed events
            feed.feed(event)
        feed.close()                           # the stream ended

Three feeds, one per wire format of ``toolexec.formats``:

``OpenAIChatFeed``
    Chat Completions chunks. A call (a ``tool_calls`` delta index) is
    complete when a later index starts or the choice finishes.
``OpenAIResponsesFeed``
    Responses events. A ``function_call`` item is complete at
    ``response.function_call_arguments.done`` (or, failing that, at its
    ``response.output_item.done``); the batch closes at ``response.completed``,
    ``response.incomplete`` or ``response.failed``.
``AnthropicFeed``
    Messages events. A ``tool_use`` block is complete at its
    ``content_block_stop``; the batch closes at ``message_stop``. A block
    whose ``content_block_start`` carries its input whole, with no
    ``input_json_delta`` after it, is added with that input.

Events may be the official SDKs' objects or the same events as plain dicts
(parsed server-sent-event JSON). Arguments are passed on as the JSON text
the model wrote: the executor parses it, so a call cut off mid-stream (the
feed's ``close`` adds it as it stands) gets an ``invalid_arguments`` result
rather than raising here. Events of other kinds (text, reasoning, usage)
are ignored. Feeds are synchronous and cheap: call ``feed`` from the trio
task that reads the stream.

A feed reads each call ahead (``Batch.expect``) once its argument text
looks complete, so that when the provider's event that ends the call
arrives, only the hooks, the policy and the approval settings are left to
ask before the tool starts. The call added is always the text the stream
ended it with: if that differs from what was read ahead, it is read afresh.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._core._public import fixup_module_metadata as _fixup_module_metadata
from ._core._types import ToolCall

if TYPE_CHECKING:
    from ._core._batch import Batch

__all__ = ["AnthropicFeed", "OpenAIChatFeed", "OpenAIResponsesFeed"]


def _get(obj: Any, name: str) -> Any:
    """A field of an SDK object or of the same event as a dict (``None`` if absent)."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


class _Feed:
    """The calls in progress, by the provider's index, and the batch they go to."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        # key -> [call id, tool name, argument text so far]
        self._open: dict[Any, list[str]] = {}
        # key -> the call as last handed to ``Batch.expect``
        self._expected: dict[Any, ToolCall] = {}
        # key -> arguments an event gave whole when the call started (used if no text follows)
        self._given: dict[Any, str] = {}
        self._closed = False

    def _start(self, key: Any, call_id: Any, name: Any, arguments: Any = "") -> None:
        self._open[key] = [str(call_id or ""), str(name or ""), str(arguments or "")]

    def _more(self, key: Any, parts: list[str], text: str) -> None:
        """Append argument text; if the call may be complete now, let the batch read ahead."""
        parts[2] += text
        if parts[2].rstrip().endswith("}"):
            call = ToolCall(*parts)
            self._expected[key] = call
            self.batch.expect(call)

    def _finish(self, key: Any, arguments: str | None = None) -> None:
        parts = self._open.pop(key, None)
        expected = self._expected.pop(key, None)
        given = self._given.pop(key, "")
        if parts is not None:
            call_id, name, text = parts
            text = (text or given) if arguments is None else arguments
            call = ToolCall(call_id, name, text) if expected is None else expected
            if call.arguments != text or call.id != call_id or call.name != name:
                call = ToolCall(call_id, name, text)  # it grew or changed since
            self.batch.add(call)

    def close(self) -> None:
        """The stream ended: add any call still open (as it stands), then close the batch."""
        if self._closed:
            return
        self._closed = True
        for key in list(self._open):
            self._finish(key)
        self.batch.close()


class OpenAIChatFeed(_Feed):
    """Adds the tool calls of streamed Chat Completions chunks to a batch.

    Only the first choice (index 0) is read. Calls are streamed one after
    another; each is added when the next one starts or the choice
    finishes, and a finished choice closes the batch.
    """

    def feed(self, chunk: Any) -> None:
        """Take one ``ChatCompletionChunk`` (or its dict)."""
        for choice in _get(chunk, "choices") or ():
            if (_get(choice, "index") or 0) != 0:
                continue
            for delta in _get(_get(choice, "delta"), "tool_calls") or ():
                self._delta(delta)
            if _get(choice, "finish_reason"):
                self.close()

    def _delta(self, delta: Any) -> None:
        index = _get(delta, "index") or 0
        function = _get(delta, "function")
        if index not in self._open:
            for earlier in [k for k in self._open if k < index]:
                self._finish(earlier)
            self._start(index, _get(delta, "id"), _get(function, "name"))
        parts = self._open[index]
        if _get(delta, "id") and not parts[0]:
            parts[0] = str(_get(delta, "id"))
        if _get(function, "name") and not parts[1]:
            parts[1] = str(_get(function, "name"))
        self._more(index, parts, _get(function, "arguments") or "")


class OpenAIResponsesFeed(_Feed):
    """Adds the ``function_call`` items of streamed Responses events to a batch."""

    def feed(self, event: Any) -> None:
        """Take one Responses stream event (or its dict)."""
        kind = _get(event, "type")
        if kind == "response.output_item.added":
            item = _get(event, "item")
            if _get(item, "type") == "function_call":
                key = _get(item, "id") or _get(event, "output_index")
                self._start(key, _get(item, "call_id"), _get(item, "name"), _get(item, "arguments"))
        elif kind == "response.function_call_arguments.delta":
            parts = self._open.get(key := _get(event, "item_id"))
            if parts is not None:
                self._more(key, parts, _get(event, "delta") or "")
        elif kind == "response.function_call_arguments.done":
            self._finish(_get(event, "item_id"), _get(event, "arguments"))
        elif kind == "response.output_item.done":
            item = _get(event, "item")
            if _get(item, "type") == "function_call":
                self._finish(
                    _get(item, "id") or _get(event, "output_index"), _get(item, "arguments")
                )
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.close()


class AnthropicFeed(_Feed):
    """Adds the ``tool_use`` blocks of streamed Anthropic Messages events to a batch."""

    def feed(self, event: Any) -> None:
        """Take one Messages stream event (or its dict)."""
        kind = _get(event, "type")
        if kind == "content_block_start":
            block = _get(event, "content_block")
            if _get(block, "type") == "tool_use":
                index, given = _get(event, "index"), _get(block, "input")
                self._start(index, _get(block, "id"), _get(block, "name"))
                if isinstance(given, Mapping) and given:  # whole, where no delta will follow
                    self._given[index] = json.dumps(dict(given), ensure_ascii=False)
        elif kind == "content_block_delta":
            delta = _get(event, "delta")
            parts = self._open.get(_get(event, "index"))
            if parts is not None and _get(delta, "type") == "input_json_delta":
                self._more(_get(event, "index"), parts, _get(delta, "partial_json") or "")
        elif kind == "content_block_stop":
            self._finish(_get(event, "index"))
        elif kind == "message_stop":
            self.close()


_fixup_module_metadata(__name__, __all__)

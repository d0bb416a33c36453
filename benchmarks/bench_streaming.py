"""Streaming admission: from a call's last streamed byte to its tool starting.

Run: ``python benchmarks/bench_streaming.py [--quick]``. A recorded-style
Anthropic stream is replayed in real time through ``AnthropicFeed`` into a
streamed batch (``ToolExecutor.open_batch``): text deltas, then tool-use
blocks whose JSON arguments arrive in several deltas, with gaps between
events drawn from 2 to 30 ms (a model writing some 30 to 100 tokens a
second), for read-only calls of a tool that waits 50 ms (so later calls
arrive while earlier ones run). For every call it records the time from
feeding the event that completes it (its ``content_block_stop``: the last
byte the model streamed for it) to the tool's first line, and prints the
median and the 90th percentile, with the load average, and the ratio of
toolexec's median to the floor's (target: at most 1.2x; the last line
prints it for scripts). The gap before an event is slept *before* the
event is timed, so it never counts. Alongside, the same stream is replayed
through a naive floor: at each call's last event, parse its JSON and start
a task for the tool (``nursery.start_soon``), which is one scheduling
round, the least any design that runs a tool in its own task can take,
plus the parse. A third replay shows what this machine charges for the least work at all: a
task per call started ahead of time waits on an event, set at the call's
last event, and records when it wakes (no parsing, no planning, no task
start: one wake-up and one scheduling pass). It is the bound below which
no design that runs the tool in a task of its own can go on this machine,
whatever it does in the feed. A fourth, for reference and without a
target, is the floor reading ahead as toolexec's feeds do (``Batch.expect``):
it parses a call's JSON at the delta after which the text looks complete
(ends with ``}``), and at the call's last event only starts its task (it
parses again if the text changed since).

The same streams are then replayed with no gaps (``trio.sleep(0)`` between
events), for reference and without a target: then the process never goes
idle between events, and the figures show what the path itself costs,
apart from what a machine charges to wake a process that slept.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from typing import Any

import trio

from toolexec import SideEffects, ToolExecutor, ToolRegistry, function_tool
from toolexec.streams import AnthropicFeed

TARGET_RATIO = 1.2  # toolexec median <= 1.2x the parse-and-start floor's, gaps of 2-30 ms
CALLS_PER_STREAM = 12
STARTED: dict[str, float] = {}


@function_tool(side_effects=SideEffects.READ)
async def lookup(key: str) -> str:
    """Look a key up (50 ms of I/O)."""
    STARTED[key] = time.perf_counter()
    await trio.sleep(0.05)
    return key


def stream_events(stream: int, rng: random.Random) -> list[tuple[dict[str, Any], str | None]]:
    """(event, key of the call it completes or None), in stream order."""
    events: list[tuple[dict[str, Any], str | None]] = [
        (
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            None,
        )
    ]
    events += [
        (
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "word "},
            },
            None,
        )
        for _ in range(5)
    ]
    events.append(({"type": "content_block_stop", "index": 0}, None))
    for i in range(1, CALLS_PER_STREAM + 1):
        key = f"s{stream}c{i}"
        block = {"type": "tool_use", "id": f"toolu_{key}", "name": "lookup", "input": {}}
        events.append(({"type": "content_block_start", "index": i, "content_block": block}, None))
        text = json.dumps({"key": key})
        cuts = sorted(rng.sample(range(1, len(text)), 3))
        for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
            delta = {"type": "input_json_delta", "partial_json": text[a:b]}
            events.append(({"type": "content_block_delta", "index": i, "delta": delta}, None))
        events.append(({"type": "content_block_stop", "index": i}, key))
    events.append(({"type": "message_stop"}, None))
    return events


GAPS = (0.002, 0.03)  # seconds between events: a model writing 30 to 100 tokens a second


async def gap(rng: random.Random, gaps: tuple[float, float]) -> None:
    await trio.sleep(rng.uniform(*gaps))


async def replay(
    executor: ToolExecutor, stream: int, rng: random.Random, gaps: tuple[float, float] = GAPS
) -> list[float]:
    """Seconds from each call's last streamed event to its tool starting."""
    fed: dict[str, float] = {}
    batch = executor.open_batch()
    feed = AnthropicFeed(batch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch.run)
        for event, completes in stream_events(stream, rng):
            await gap(rng, gaps)
            if completes is not None:
                fed[completes] = time.perf_counter()
            feed.feed(event)
    return [STARTED[key] - at for key, at in fed.items()]


async def call_tool(arguments: dict[str, Any]) -> None:
    """The floor's task: the tool function itself, on parsed arguments."""
    await lookup.fn(**arguments)


async def replay_floor(
    stream: int, rng: random.Random, gaps: tuple[float, float] = GAPS
) -> list[float]:
    """The same stream, each completed call started as a task of its own."""
    fed: dict[str, float] = {}
    arguments: dict[int, str] = {}
    async with trio.open_nursery() as nursery:
        for event, completes in stream_events(stream, rng):
            await gap(rng, gaps)
            if completes is not None:
                fed[completes] = time.perf_counter()
            if event["type"] == "content_block_delta" and event["index"]:
                arguments[event["index"]] = (
                    arguments.get(event["index"], "") + event["delta"]["partial_json"]
                )
            elif event["type"] == "content_block_stop" and event["index"]:
                nursery.start_soon(call_tool, json.loads(arguments[event["index"]]))
    return [STARTED[key] - at for key, at in fed.items()]


async def replay_floor_ahead(
    stream: int, rng: random.Random, gaps: tuple[float, float] = GAPS
) -> list[float]:
    """The floor reading ahead as toolexec's feed does: the JSON parsed at the delta
    that makes it look complete, the task started at the call's last event."""
    fed: dict[str, float] = {}
    arguments: dict[int, str] = {}
    parsed: dict[int, Any] = {}
    async with trio.open_nursery() as nursery:
        for event, completes in stream_events(stream, rng):
            await gap(rng, gaps)
            if completes is not None:
                fed[completes] = time.perf_counter()
            index = event.get("index")
            if event["type"] == "content_block_delta" and index:
                text = arguments[index] = arguments.get(index, "") + event["delta"]["partial_json"]
                if text.rstrip().endswith("}"):
                    parsed[index] = (text, json.loads(text))
            elif event["type"] == "content_block_stop" and index:
                text, value = parsed.get(index, ("", None))
                if text != arguments[index]:
                    value = json.loads(arguments[index])
                nursery.start_soon(call_tool, value)
    return [STARTED[key] - at for key, at in fed.items()]


async def replay_wake(
    stream: int, rng: random.Random, gaps: tuple[float, float] = GAPS
) -> list[float]:
    """The same stream, each call's task waiting ahead of time and woken at its last event."""
    fed: dict[str, float] = {}
    woken: dict[str, float] = {}
    events = stream_events(stream, rng)
    ready = {key: trio.Event() for _, key in events if key is not None}

    async def waiter(key: str, event: trio.Event) -> None:
        await event.wait()
        woken[key] = time.perf_counter()

    async with trio.open_nursery() as nursery:
        for key, event in ready.items():
            nursery.start_soon(waiter, key, event)
        for _, completes in events:
            await gap(rng, gaps)
            if completes is not None:
                fed[completes] = time.perf_counter()
                ready[completes].set()
    return [woken[key] - at for key, at in fed.items()]


def report(samples: dict[str, list[float]], *, target: bool) -> None:
    for label, delays in samples.items():
        us = sorted(d * 1e6 for d in delays)
        median = statistics.median(us)
        p90 = us[int(len(us) * 0.9)]
        until = "task wakes" if label == "wake" else "tool start"
        print(
            f"  {label:<8} last streamed byte -> {until}, {len(us)} calls: median"
            f" {median:.0f} us, p90 {p90:.0f} us, max {us[-1]:.0f} us"
        )
    measured = ratio(samples["toolexec"], samples["floor"])
    verdict = "met" if measured <= TARGET_RATIO else "MISSED"
    shown = f"  (target <= {TARGET_RATIO:g}x: {verdict})" if target else ""
    print(f"  ratio of medians: {measured:.2f}x{shown}")
    ahead = ratio(samples["toolexec"], samples["ahead"])
    print(f"  against the floor reading ahead too (reference): {ahead:.2f}x")


def ratio(delays: list[float], floor: list[float]) -> float:
    """toolexec's median over the parse-and-start floor's, from the same replays."""
    return statistics.median(delays) / statistics.median(floor)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def main(streams: int) -> None:
    registry = ToolRegistry()
    registry.register(lookup)
    executor = ToolExecutor(registry)
    rng = random.Random(7)
    print(f"streaming admission: {streams} streams of {CALLS_PER_STREAM} calls, Anthropic events")
    print(
        f"python {sys.version.split()[0]}, trio {trio.__version__}; load average before: {load()}"
    )
    await replay(executor, -1, rng)  # warm up
    measured = 0.0
    for label, gaps in (("gaps of 2-30 ms", GAPS), ("no gaps, for reference", (0.0, 0.0))):
        samples: dict[str, list[float]] = {"toolexec": [], "floor": [], "ahead": [], "wake": []}
        for stream in range(streams):  # alternate, so that load drift hits all alike
            samples["toolexec"] += await replay(executor, stream, rng, gaps)
            samples["floor"] += await replay_floor(stream, rng, gaps)
            samples["ahead"] += await replay_floor_ahead(stream, rng, gaps)
            samples["wake"] += await replay_wake(stream, rng, gaps)
        print(f"{label}:")
        report(samples, target=gaps == GAPS)
        if gaps == GAPS:
            measured = ratio(samples["toolexec"], samples["floor"])
    print(f"load average after: {load()}")
    # For scripts: the figure, with real gaps (target <= 1.2x).
    print(f"streamed admission vs floor: {measured:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 streams instead of 30")
    args = parser.parse_args()
    # 30 streams, 360 calls a side: with 10, the ratio of medians moved by 0.3 from one
    # run to the next on a quiet machine; with 30, by about half that.
    trio.run(main, 3 if args.quick else 30)

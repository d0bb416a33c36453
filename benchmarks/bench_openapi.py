"""What loading an OpenAPI document costs, and what a call costs over a raw ``httpx2`` request.

Run: ``python benchmarks/bench_openapi.py`` (add ``--quick`` for fewer calls,
``--load-only`` for the load time alone). Needs the ``openapi`` extra.

First, *load*: a generated document of 5,000 operations over 500 shared
component schemas (``generated_document``) is opened with
``open_openapi_source`` and closed again, three times; the median wall time
and CPU time of opening it (reading, converting every schema, registering
every tool) are printed, with the tools registered and skipped.

Then the calls. It starts the test API
(``tests/openapi_server.py``, uvicorn) in a subprocess on 127.0.0.1 and
measures, against that one server:

1. *sequential*: one ``getItem`` call at a time, through
   ``ToolExecutor.execute_batch([call])`` versus ``AsyncClient.get`` of the
   same URL on a client of its own, reading the body as text (what the tool
   returns); both keep their connection alive;
2. *batch of 10*: ten read-only ``getItem`` calls in one batch versus ten
   raw requests started together in a nursery.

Rounds of both sides alternate (which goes first alternates too) and each
figure is the median round time, so background load hits both alike. The
load average is printed with the figures. The ratio target is 1.2x.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
import trio

from toolexec import ToolCall, ToolExecutor, ToolRegistry
from toolexec.openapi import open_openapi_source

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

SERVER = Path(__file__).parents[1] / "tests" / "openapi_server.py"
TARGET = 1.2
ARGS = {"item_id": "benchmark", "verbose": True}
LOAD_OPERATIONS = 5000


def _component(i: int) -> dict[str, Any]:
    """Schema ``S<i>``: a few scalars, shared ``Tag`` and ``Meta``, and the schema before it.

    ``S<i>`` refers to ``S<i-1>`` (twice when ``i`` is odd: as a property
    and as array items) unless ``i`` starts a chain of eight, so each schema
    is shared by several others, as in a large real API, while the inlined
    form of any one stays bounded.
    """
    properties: dict[str, Any] = {
        "id": {"type": "string", "format": "uuid"},
        "name": {"type": "string", "maxLength": 200, "description": f"The name of S{i}."},
        "count": {"type": "integer", "minimum": 0, "nullable": True},
        "state": {"type": "string", "enum": ["new", "open", "closed"]},
        "tags": {"type": "array", "items": {"$ref": "#/components/schemas/Tag"}},
        "meta": {"$ref": "#/components/schemas/Meta"},
    }
    if i % 8:
        properties["parent"] = {"$ref": f"#/components/schemas/S{i - 1}"}
        if i % 2:
            properties["siblings"] = {
                "type": "array",
                "items": {"$ref": f"#/components/schemas/S{i - 1}"},
            }
    return {"type": "object", "properties": properties, "required": ["id", "name"]}


def generated_document(operations: int = LOAD_OPERATIONS, schemas: int = 500) -> dict[str, Any]:
    """An OpenAPI 3.0 document of ``operations`` operations over ``schemas`` shared schemas.

    Half the operations are GETs with a path parameter and query parameters,
    half POSTs whose body refers to a component schema (``_component``).
    Seeded: the same document every run.
    """
    rng = random.Random(7)
    components: dict[str, Any] = {
        "Tag": {"type": "string", "minLength": 1},
        "Meta": {
            "type": "object",
            "properties": {
                "created": {"type": "string", "format": "date-time"},
                "labels": {"type": "array", "items": {"$ref": "#/components/schemas/Tag"}},
            },
        },
    }
    for i in range(schemas):
        components[f"S{i}"] = _component(i)
    paths: dict[str, Any] = {}
    for n in range(operations // 2):
        target = f"#/components/schemas/S{rng.randrange(schemas)}"
        paths[f"/r{n}/{{rid}}"] = {
            "parameters": [
                {"name": "rid", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            "get": {
                "operationId": f"get{n}",
                "summary": f"Get resource {n}.",
                "parameters": [
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "maximum": 100}},
                    {
                        "name": "fields",
                        "in": "query",
                        "schema": {"type": "array", "items": {"type": "string"}},
                    },
                ],
                "responses": {"200": {"description": "ok"}},
            },
            "post": {
                "operationId": f"post{n}",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": target}}},
                },
                "responses": {"201": {"description": "created"}},
            },
        }
    return {
        "openapi": "3.0.3",
        "info": {"title": "Generated", "version": "1"},
        "servers": [{"url": "http://127.0.0.1:9"}],
        "components": {"schemas": components},
        "paths": paths,
    }


async def bench_load(rounds: int = 3) -> None:
    """Print the median wall and CPU time of opening the generated document."""
    document = generated_document()
    size = len(json.dumps(document))
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(rounds):
        registry = ToolRegistry()
        wall, cpu = time.perf_counter(), time.process_time()
        async with open_openapi_source(registry, document) as source:
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            tools, skipped = len(source.tools), len(source.skipped)
    print(
        f"load: {LOAD_OPERATIONS} operations ({size / 1e6:.1f} MB of JSON): "
        f"{statistics.median(walls):.2f} s wall, {statistics.median(cpus):.2f} s CPU "
        f"(median of {rounds}); {tools} tools, {skipped} skipped"
    )


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    """Seconds one round of ``fn`` takes."""
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def compare(
    label: str,
    ours: Callable[[], Awaitable[object]],
    raw: Callable[[], Awaitable[object]],
    rounds: int,
    per_round: int = 1,
) -> float:
    """Print and return the ratio of the median round times of ``ours`` and ``raw``."""
    for _ in range(50):  # warm up both paths
        await ours()
        await raw()
    ours_t: list[float] = []
    raw_t: list[float] = []
    for i in range(rounds):
        if i % 2:
            ours_t.append(await timed(ours))
            raw_t.append(await timed(raw))
        else:
            raw_t.append(await timed(raw))
            ours_t.append(await timed(ours))
    a = statistics.median(ours_t) / per_round
    b = statistics.median(raw_t) / per_round
    ratio = a / b
    verdict = "ok" if ratio <= TARGET else "ABOVE TARGET"
    print(
        f"{label:<34} {a * 1e6:9.0f} us {b * 1e6:9.0f} us {ratio:7.3f}x"
        f"  (target {TARGET}x: {verdict})"
    )
    return ratio


async def start_server() -> tuple[trio.Process, str]:
    """The test API in a subprocess, and its base URL."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    buffer = b""
    with trio.fail_after(30):
        while b"\n" not in buffer:
            chunk = await process.stdout.receive_some()
            assert chunk, "the test API exited before listening"
            buffer += chunk
    word, port = buffer.split(b"\n", 1)[0].split()
    assert word == b"PORT"
    return process, f"http://127.0.0.1:{int(port)}"


async def bench(url: str, rounds: int) -> None:
    registry = ToolRegistry()
    async with (
        open_openapi_source(registry, f"{url}/openapi.json") as source,
        httpx2.AsyncClient(base_url=url) as raw_client,
    ):
        assert "getItem" in source.tools
        executor = ToolExecutor(registry)
        one = [ToolCall("c0", "getItem", ARGS)]
        ten = [ToolCall(f"c{i}", "getItem", ARGS) for i in range(10)]

        async def raw_get() -> str:
            response = await raw_client.get("/items/benchmark", params={"verbose": "true"})
            return response.text

        async def ours_one() -> object:
            outcome = await executor.execute_batch(one)
            assert not outcome.results[0].is_error, outcome.results[0].text
            return outcome

        async def ours_ten() -> object:
            return await executor.execute_batch(ten)

        async def raw_ten() -> None:
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(raw_get)

        print(f"{'':<34} {'toolexec':>12} {'raw httpx2':>12} {'ratio':>8}")
        await compare("sequential GET, per call", ours_one, raw_get, rounds)
        await compare("batch of 10 GETs, per call", ours_ten, raw_ten, rounds // 5, 10)


async def main(quick: bool, load_only: bool) -> None:
    await bench_load()
    if load_only:
        return
    rounds = 200 if quick else 1500
    process, url = await start_server()
    try:
        await bench(url, rounds)
    finally:
        assert process.stdin is not None
        await process.stdin.aclose()
        with trio.fail_after(30):
            await process.wait()
    load = os.getloadavg()
    print(f"load average after the runs: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and samples")
    parser.add_argument("--load-only", action="store_true", help="only the load time")
    options = parser.parse_args()
    trio.run(main, options.quick, options.load_only)

"""What a pydantic-model parameter costs a function tool, against pydantic alone.

Run: `python benchmarks/bench_typed.py [--quick]`. One process, three
comparisons, each as the ratio of median round times, the two sides
alternating round by round so that background load hits both alike:

- registration: ``function_tool`` + ``ToolRegistry.register`` of a tool whose
  parameter is a pydantic model (schema taken, inlined, checked, compiled),
  against ``Model.model_json_schema()`` alone;
- validation, per call: what the executor does with the arguments (the
  compiled schema's ``is_valid``, then the parameter's converter, which calls
  ``Model.model_validate``), against ``Model.model_validate`` on the same JSON;
- a whole call: ``execute_batch`` of one call to the tool, against
  ``model_validate`` plus calling the function directly;
- the typed share of a whole call: the same call to the tool, against the
  same call to a twin tool whose parameter is a plain ``dict`` (no model
  schema in the check, no ``model_validate``).

There is no target: the figures are reported as measured, with the load
average.
"""

from __future__ import annotations

import argparse
import enum
import os
import statistics
import time
from typing import TYPE_CHECKING, Any

import trio
from pydantic import BaseModel, Field

from toolexec import SideEffects, ToolCall, ToolExecutor, ToolRegistry, function_tool
from toolexec._tools._function_types import typed

if TYPE_CHECKING:
    from collections.abc import Callable


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Line(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]{3}-\d+$")
    quantity: int = Field(ge=1, le=1000)


class Order(BaseModel):
    """An order to place."""

    customer: str = Field(max_length=40, description="who orders")
    lines: list[Line] = Field(min_length=1)
    priority: Priority = Priority.LOW
    note: str | None = None


ORDER = {
    "customer": "ACME",
    "lines": [{"sku": f"ABC-{i}", "quantity": i + 1} for i in range(5)],
    "priority": "high",
}


async def place(order: Order) -> str:
    """Place an order."""
    return str(len(order.lines))


async def place_dict(order: dict[str, Any]) -> str:
    """Place an order, given as a plain JSON object."""
    return str(len(order["lines"]))


def make_tool() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(function_tool(side_effects=SideEffects.READ)(place))
    return registry


def timed_batches(executor: ToolExecutor, name: str, per_round: int) -> Callable[[], float]:
    """Seconds per call of ``per_round`` one-call batches to ``name``, in one trio.run."""
    calls = [ToolCall("c", name, {"order": ORDER})]

    async def batches() -> None:
        for _ in range(per_round):
            outcome = await executor.execute_batch(calls)
            assert outcome.results[0].text == "5", outcome.results[0].text

    def run() -> float:
        start = time.perf_counter()
        trio.run(batches)
        return (time.perf_counter() - start) / per_round

    return run


def rounds_of(fn: Callable[[], object], per_round: int) -> Callable[[], float]:
    def one_round() -> float:
        start = time.perf_counter()
        for _ in range(per_round):
            fn()
        return (time.perf_counter() - start) / per_round

    return one_round


def compare(label: str, ours: Callable[[], float], base: Callable[[], float], rounds: int) -> None:
    """Print the median of ``rounds`` alternating rounds of both, and their ratio."""
    ours_t: list[float] = []
    base_t: list[float] = []
    for i in range(rounds):
        pair = (ours, base) if i % 2 else (base, ours)
        for fn in pair:
            (ours_t if fn is ours else base_t).append(fn())
    a, b = statistics.median(ours_t), statistics.median(base_t)
    print(f"{label:<30} {a * 1e6:10.1f} us {b * 1e6:10.1f} us {a / b:8.2f}x")


def whole_call(per_round: int) -> tuple[Callable[[], float], Callable[[], float]]:
    executor = ToolExecutor(make_tool())

    async def base() -> None:
        for _ in range(per_round):
            assert await place(Order.model_validate(ORDER)) == "5"

    def run_base() -> float:
        start = time.perf_counter()
        trio.run(base)
        return (time.perf_counter() - start) / per_round

    return timed_batches(executor, "place", per_round), run_base


def typed_share(per_round: int) -> tuple[Callable[[], float], Callable[[], float]]:
    registry = make_tool()
    registry.register(function_tool(side_effects=SideEffects.READ)(place_dict))
    executor = ToolExecutor(registry)
    return (
        timed_batches(executor, "place", per_round),
        timed_batches(executor, "place_dict", per_round),
    )


def main(quick: bool) -> None:
    rounds = 11 if quick else 31
    entry = make_tool().lookup("place")
    assert entry is not None
    convert = typed(Order, "bench").convert
    assert convert is not None
    arguments = {"order": ORDER}

    def validate_ours() -> None:
        assert entry.schema.is_valid(arguments)
        convert(arguments["order"])

    print(f"{'':<30} {'toolexec':>13} {'pydantic':>13} {'ratio':>9}")
    compare(
        "registration",
        rounds_of(make_tool, 20 if quick else 100),
        rounds_of(Order.model_json_schema, 20 if quick else 100),
        rounds,
    )
    compare(
        "validation, per call",
        rounds_of(validate_ours, 2000 if quick else 20000),
        rounds_of(lambda: Order.model_validate(ORDER), 2000 if quick else 20000),
        rounds,
    )
    compare("whole call, per call", *whole_call(200 if quick else 2000), rounds)
    print(f"{'':<30} {'model':>13} {'dict':>13} {'ratio':>9}")
    compare("whole call, model vs dict", *typed_share(200 if quick else 2000), rounds)
    load = os.getloadavg()
    print(f"load average after the runs: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    main(parser.parse_args().quick)

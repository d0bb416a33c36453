"""What a supervisor costs per call over a raw pipe echo, and its throughput with 8 runners.

Run: ``python benchmarks/bench_ipc.py`` (``--quick`` for fewer calls). In one
run it measures:

1. *Round trip per call*: a runner process sends a ``tool_call`` line and
   waits for the answer, N times. Against a ``Supervisor`` (an ``echo``
   tool, through the executor) and against a raw trio echo that reads each
   line and writes back a ready-made ``tool_response`` line of the same
   shape over the same pipes. The runner's loop is timed (its start-up is
   not); the two are interleaved, and the ratio is printed (target <= 1.5x).
2. *Throughput*: 8 runner processes served at once, each sending 1000
   calls one at a time, and again with each sending its calls 50 at a time
   (one batch per write). Calls per second over the wall time of the runners.

The load average is printed before and after: compare runs only on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from toolexec import SideEffects, ToolExecutor, ToolRegistry, function_tool
from toolexec.ipc import RunnerConfig, Supervisor

TARGET = 1.5
CALL = {"op": "tool_call", "tool_call_id": "c", "tool": "echo", "args": {"text": "hello"}}
ANSWER = (
    json.dumps(
        {
            "op": "tool_response",
            "tool_call_id": "c",
            "ok": True,
            "result": {"text": "hello", "content": [{"text": "hello", "type": "text"}]},
        },
        separators=(",", ":"),
    ).encode()
    + b"\n"
)


@function_tool(side_effects=SideEffects.READ)
async def echo(text: str) -> str:
    """Echo the text."""
    return text


# -- the runner (this file, run with --runner) ---------------------------------------


def runner(calls: int, per_write: int, out: str) -> None:
    """Send ``calls`` calls, ``per_write`` at a time; write the loop's start and end."""
    read, write = os.fdopen(os.dup(0), "rb", buffering=0), os.fdopen(os.dup(1), "wb")
    lines = [
        json.dumps({**CALL, "tool_call_id": f"c{i}" if per_write > 1 else "c"}).encode() + b"\n"
        for i in range(per_write)
    ]
    payload = b"".join(lines)
    start = time.monotonic()
    for _ in range(calls // per_write):
        write.write(payload)
        write.flush()
        for _ in range(per_write):
            answer = json.loads(read.readline())
            assert answer["ok"] is True, answer
    end = time.monotonic()
    Path(out).write_text(json.dumps([start, end]))


def _runner_argv(calls: int, per_write: int, out: Path) -> list[str]:
    return [sys.executable, __file__, "--runner", str(calls), str(per_write), str(out)]


# -- the servers -----------------------------------------------------------------------


def _supervisor() -> Supervisor:
    registry = ToolRegistry()
    registry.register(echo)
    return Supervisor(ToolExecutor(registry))


async def _raw_echo(argv: list[str]) -> None:
    """Serve a runner with a ready-made answer per line: the pipes and nothing else."""
    process = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None
    assert process.stdout is not None
    pending = b""
    while chunk := await process.stdout.receive_some(1 << 16):
        pending += chunk
        lines = pending.count(b"\n")
        pending = pending[pending.rfind(b"\n") + 1 :]
        for _ in range(lines):
            json.loads(CALL_LINE)  # the supervisor decodes each line too
            await process.stdin.send_all(ANSWER)
    await process.stdin.aclose()
    await process.wait()


CALL_LINE = json.dumps(CALL).encode()


def _span(paths: list[Path]) -> tuple[float, list[float]]:
    spans = [json.loads(p.read_text()) for p in paths]
    return max(e for _, e in spans) - min(s for s, _ in spans), [e - s for s, e in spans]


def round_trip(calls: int, tmp: Path, *, raw: bool) -> float:
    """Seconds per call, one runner, one call at a time."""
    out = tmp / f"rt-{'raw' if raw else 'sup'}.json"
    argv = _runner_argv(calls, 1, out)
    if raw:
        trio.run(_raw_echo, argv)
    else:
        trio.run(_supervisor().run_process, argv, RunnerConfig("bench"))
    return _span([out])[0] / calls


def throughput(runners: int, calls: int, per_write: int, tmp: Path) -> float:
    """Calls per second with ``runners`` runners served at once."""
    supervisor = _supervisor()
    outs = [tmp / f"tp-{i}-{per_write}.json" for i in range(runners)]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i, out in enumerate(outs):
                argv = _runner_argv(calls, per_write, out)
                nursery.start_soon(supervisor.run_process, argv, RunnerConfig(f"r{i}"))

    trio.run(main)
    wall, _ = _span(outs)
    return runners * calls / wall


def _load() -> str:
    return Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and repeats")
    parser.add_argument("--runner", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runner:
        runner(int(args.runner[0]), int(args.runner[1]), args.runner[2])
        return
    calls, repeats = (500, 3) if args.quick else (2000, 5)
    print(f"load average before: {_load()}")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        raw, sup = [], []
        for _ in range(repeats):  # interleaved, so load changes hit both
            raw.append(round_trip(calls, tmp, raw=True))
            sup.append(round_trip(calls, tmp, raw=False))
        r, s = statistics.median(raw), statistics.median(sup)
        print(f"round trip per call ({calls} calls, median of {repeats}):")
        print(f"  raw pipe echo   {r * 1e6:8.1f} us")
        print(f"  supervisor      {s * 1e6:8.1f} us")
        verdict = "meets" if s / r <= TARGET else "misses"
        print(f"  ratio           {s / r:8.2f}x  ({verdict} the {TARGET}x target)")
        n = 1000
        one = throughput(8, n, 1, tmp)
        fifty = throughput(8, n, 50, tmp)
        print(f"throughput, 8 runners x {n} calls:")
        print(f"  one call per write      {one:9.0f} calls/s")
        print(f"  50 calls per write      {fifty:9.0f} calls/s")
    print(f"load average after:  {_load()}")


if __name__ == "__main__":
    main()

"""An example runner: an agent process that asks its supervisor to run tools.

Run it under a supervisor, which gives it the channel on stdin and stdout::

    toolexec serve --stdio --workspace examples/workspace --allow read_file \\
        --grant notes -- python examples/ipc_runner.py '[["read_file", {"path": "notes/todo.txt"}]]'

The argument is a JSON list of steps; a step is ``[tool, args]`` (one call,
answered before the next step) or a list of such pairs (sent together, so
the supervisor runs them as one batch). Each answer is printed to stderr as
one JSON line, in call order. With ``--out FILE`` the answers go to that
file instead. The exit status is 0 when every call was answered.
"""

from __future__ import annotations

import argparse
import json
import sys

from toolexec.ipc import RunnerClient


def _steps(text: str) -> list[list[tuple[str, dict[str, object]]]]:
    steps = []
    for step in json.loads(text):
        if step and isinstance(step[0], str):
            steps.append([(step[0], step[1] if len(step) > 1 else {})])
        else:
            steps.append([(tool, args) for tool, args in step])
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description="Send tool calls to a supervisor.")
    parser.add_argument("steps", help="a JSON list of steps: [tool, args] or [[tool, args], ...]")
    parser.add_argument("--out", help="write the answers here instead of stderr")
    args = parser.parse_args()
    client = RunnerClient.stdio()  # from here on, print() goes to stderr
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stderr  # noqa: SIM115
    try:
        for step in _steps(args.steps):
            for response in client.call_many(step):
                record = {
                    "tool_call_id": response.tool_call_id,
                    "ok": response.ok,
                    "error": response.error,
                    "text": response.text,
                }
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                out.flush()
    finally:
        if out is not sys.stderr:
            out.close()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""An MCP server written by hand over stdio, for schemas and failures the SDK would not send.

Run ``python raw_server.py``: it reads JSON-RPC messages, one per line, on
stdin and answers on stdout, with no SDK. It speaks only the ``initialize``
handshake (anything else unknown is answered "method not found", so a
client that probes ``server/discover`` falls back).

Its tools carry the schema shapes real servers send (``SCHEMAS``): an
``anyOf`` whose branches have their own descriptions, an ``anyOf`` with a
repeated branch, a union of object schemas, and a ``oneOf`` of objects told
apart by a ``const`` (every call echoes its arguments as JSON text). Three
more fail on purpose: ``broken`` answers JSON-RPC error -32603 (the tool
failed inside the server), ``picky`` error -32602 (the server rejects the
call), ``chatty`` writes a line that is not JSON to stdout before it
answers, and ``die`` kills the server with SIGKILL. ``overlap`` has a
``oneOf`` whose branches overlap (``UNPORTABLE``): it cannot be registered.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

CIRCLE = {
    "type": "object",
    "properties": {"kind": {"const": "circle"}, "radius": {"type": "number", "minimum": 0}},
    "required": ["kind", "radius"],
    "additionalProperties": False,
}
SQUARE = {
    "type": "object",
    "properties": {"kind": {"const": "square"}, "side": {"type": "number", "minimum": 0}},
    "required": ["kind", "side"],
    "additionalProperties": False,
}


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


SCHEMAS: dict[str, dict[str, Any]] = {
    "toggle": _object(
        mode={
            "anyOf": [
                {"type": "boolean", "description": "true for on, false for off"},
                {"type": "string", "description": "a named mode, such as 'eco'"},
            ],
            "description": "How to set the switch.",
        }
    ),
    "repeat": {
        **_object(value={"anyOf": [{"type": "string"}, {"type": "string"}, {"type": "integer"}]}),
        "required": ["value"],
    },
    "area": {
        **_object(shape={"anyOf": [CIRCLE, {"$ref": "#/$defs/Square"}]}),
        "$defs": {"Square": SQUARE},
        "required": ["shape"],
    },
    "tagged": {**_object(shape={"oneOf": [CIRCLE, SQUARE]}), "required": ["shape"]},
    "broken": _object(),
    "picky": _object(),
    "chatty": _object(),
    "die": _object(),
}
#: A tool whose schema no provider-accepted form says exactly: it is refused.
UNPORTABLE = {"overlap": _object(v={"oneOf": [{"type": "string"}, {"maxLength": 3}]})}


def _answer(message_id: Any, result: Any = None, error: dict[str, Any] | None = None) -> None:
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message_id}
    if error is None:
        reply["result"] = result
    else:
        reply["error"] = error
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


def _call(message_id: Any, params: dict[str, Any]) -> None:
    name = params.get("name")
    arguments = params.get("arguments") or {}
    if name == "broken":
        _answer(message_id, error={"code": -32603, "message": "the disk is full"})
    elif name == "picky":
        _answer(message_id, error={"code": -32602, "message": "no calls on Sundays"})
    elif name == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    else:
        if name == "chatty":
            sys.stdout.write("hello from a stray print\n")
        text = json.dumps(arguments, sort_keys=True)
        _answer(message_id, {"content": [{"type": "text", "text": text}], "isError": False})


def _handle(message: dict[str, Any]) -> None:
    method, message_id = message.get("method"), message.get("id")
    if message_id is None:
        return  # a notification
    params = message.get("params") or {}
    if method == "initialize":
        _answer(
            message_id,
            {
                "protocolVersion": params.get("protocolVersion"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"},
            },
        )
    elif method == "tools/list":
        tools = [
            {"name": name, "description": f"The {name} tool.", "inputSchema": schema}
            for name, schema in {**SCHEMAS, **UNPORTABLE}.items()
        ]
        _answer(message_id, {"tools": tools})
    elif method == "tools/call":
        _call(message_id, params)
    elif method == "ping":
        _answer(message_id, {})
    else:
        _answer(message_id, error={"code": -32601, "message": f"method not found: {method}"})


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            _handle(json.loads(line))


if __name__ == "__main__":
    main()

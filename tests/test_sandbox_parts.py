"""The subprocess sandbox's parts, in this process: the launcher's protocol, the codec.

The launcher (``_sandbox_child``) runs as ``python -c`` in the sandbox, where
coverage does not follow it; the parts of it that do not fork, exec or change
mounts are run here, on real pipes, and ``tests/test_sandbox.py`` runs all of
it for real.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import sys
import threading
from pathlib import Path
from typing import Any

import coverage
import pytest
import trio

import sandbox_tools
from toolexec import ImageContent, JsonContent, TextContent, ToolContext, ToolOutput
from toolexec._backends import _sandbox_child as child
from toolexec._backends import _sandbox_launch as launch
from toolexec._backends._sandbox import _describe_signal
from toolexec._backends._sandbox_codec import (
    call_context,
    context_to_json,
    locate,
    output_from_json,
    output_to_json,
    resolve,
)
from toolexec._backends._sandbox_launch import Detection, _keep, find_bwrap
from toolexec._core._errors import ToolError
from toolexec.backends import SubprocessBackend


def _lines(fd: int) -> list[dict[str, Any]]:
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    return [json.loads(line) for line in data.splitlines()]


def test_the_launcher_reports_json_lines() -> None:
    read, write = os.pipe()
    try:
        child._report(write, {"op": "started"})
        child._report(write, {"op": "exit", "code": 3})
        child._report(write, {"op": "exit", "signal": 9})
        child._report(write, {"op": "failed", "message": 'a "quoted"\nline'})
        assert _lines(read) == [
            {"op": "started"},
            {"op": "exit", "code": 3},
            {"op": "exit", "signal": 9},
            {"op": "failed", "message": 'a "quoted"\nline'},
        ]
    finally:
        os.close(read)
        os.close(write)


def test_the_launcher_reads_a_request_in_pieces() -> None:
    request = {"kind": "exec", "argv": ["/bin/true"], "cwd": "/", "big": "x" * 200_000}
    body = marshal.dumps(request)
    read, write = os.pipe()
    with os.fdopen(write, "wb") as out:
        # The writer blocks on the full pipe until the reader reads: a thread writes.
        writer = threading.Thread(target=out.write, args=(len(body).to_bytes(8, "big") + body,))
        writer.start()
        assert child._read_request(read) == request
        writer.join()
    # The pipe closing early is an error, not a hang.
    read2, write2 = os.pipe()
    os.write(write2, (100).to_bytes(8, "big") + b"short")
    os.close(write2)
    with pytest.raises(OSError, match="ended early"):
        child._read_request(read2)
    os.close(read2)
    os.close(read)


def test_the_launcher_changes_mounts_only_in_a_namespace_of_its_own() -> None:
    here = os.readlink("/proc/self/ns/mnt")
    with pytest.raises(OSError, match="not in a mount namespace of its own"):
        child._mount({"hide": ["/tmp"], "host_ns": here})


def _function_request(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    ctx = ToolContext("c1", tool, "root/a", "s", None)
    return {
        "function": {
            "module": "sandbox_tools",
            "qualname": tool,
            "name": tool,
            "arguments": arguments,
            "sys_path": list(sys.path),
            "context": context_to_json(ctx),
        }
    }


@pytest.mark.parametrize(
    ("tool", "arguments", "op"),
    [
        ("where", {}, "result"),
        ("refuse", {"reason": "no"}, "error"),
        ("crash", {}, "crash"),
        ("plain", {"text": "a"}, "result"),
    ],
)
async def test_the_launcher_runs_a_function_and_reports_it(
    tool: str, arguments: dict[str, Any], op: str
) -> None:
    read, write = os.pipe()
    saved = list(sys.path)
    try:
        request = _function_request(tool, arguments)
        await trio.to_thread.run_sync(child._run_function, request, write)
        reports = _lines(read)
    finally:
        sys.path[:] = saved
        os.close(read)
        os.close(write)
    assert reports[-1]["op"] == op
    if tool == "where":
        assert reports[0] == {"op": "progress", "message": "looking around"}
        assert reports[-1]["output"]["content"][0]["value"]["tool"] == "where"
    if op == "error":
        assert reports[-1]["error_class"] == "permission_denied"
    if op == "crash":
        assert "broken on purpose" in reports[-1]["tb"]


def test_outputs_cross_the_pipe_whole() -> None:
    output = ToolOutput(
        (TextContent("t"), JsonContent({"a": [1, None]}), ImageContent("aGk=", "image/png")),
        {"n": 1, "odd": {1, 2}},
        True,
    )
    data = json.loads(json.dumps(output_to_json(output)))
    back = output_from_json(data)
    assert back.content == output.content
    assert back.is_error
    assert back.details == {"n": 1, "odd": "{1, 2}"}
    for bad in ({}, {"content": [{"type": "video"}], "is_error": False}, None):
        with pytest.raises(ValueError, match=r"not a tool output|unknown content type"):
            output_from_json(bad)


def test_a_context_crosses_the_pipe(tmp_path: Path) -> None:
    from toolexec import Workspace
    from toolexec.policy import ExecutionGrant

    events: list[tuple[str, Any]] = []
    ctx = ToolContext(
        "c", "t", "root", "s", Workspace(tmp_path), ExecutionGrant("subprocess", 3.0, 10, {"x": 1})
    )
    again = call_context(json.loads(json.dumps(context_to_json(ctx))), lambda *e: events.append(e))
    assert again.grant == ctx.grant
    assert again.workspace is not None
    assert again.workspace.root == ctx.workspace.root  # type: ignore[union-attr]


def test_tools_are_found_by_name_or_refused() -> None:
    assert locate(sandbox_tools.where) == ("sandbox_tools", "where")
    assert resolve("sandbox_tools", "plain", "plain").definition.name == "plain"
    with pytest.raises(TypeError, match="is not a function"):
        resolve("sandbox_tools", "os", "x")
    from toolexec import function_tool

    main = function_tool(name="m")(lambda: "x")
    main.fn.__module__ = "__main__"
    with pytest.raises(ToolError, match="__main__ script"):
        locate(main)
    gone = function_tool(name="g")(sandbox_tools.plain)
    object.__setattr__(gone, "fn", lambda text: text)
    gone.fn.__module__, gone.fn.__qualname__ = "sandbox_tools", "nothing_here"
    with pytest.raises(ToolError, match="does not import"):
        locate(gone)
    gone.fn.__qualname__ = "where"
    with pytest.raises(ToolError, match="names another object"):
        locate(gone)


def test_small_helpers() -> None:
    assert "SIGXCPU" in _describe_signal(24)
    assert "its CPU-time limit" in _describe_signal(24)
    assert _describe_signal(200) == "signal 200"
    assert Detection(None, {}).why_not() == "no reason known"
    found = find_bwrap()
    assert found is None or os.path.basename(found) == "bwrap"
    assert _keep(["/tmp/a", "/usr", "/tmp/ws/x"], ["/tmp"], "/tmp/ws") == ["/tmp/a"]


async def test_a_missing_unshare_is_a_reason() -> None:
    backend = SubprocessBackend(levels=("unshare",), unshare="/nonexistent/unshare")
    found = await backend.detect()
    assert found.level is None
    assert "cannot start /nonexistent/unshare" in found.reasons["unshare"]
    assert await backend.detect() is found
    bad = SubprocessBackend(levels=("bwrap",), bwrap="/bin/false")
    found = await bad.detect()
    assert "fails here" in found.reasons["bwrap"]


@pytest.fixture
def measured_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start the launcher as a file, under coverage when the suite measures it."""
    measuring = coverage.Coverage.current()
    program = child.__file__
    if measuring is None:
        command = [sys.executable, "-I", "-S", program]
    else:
        script = str(Path(__file__).with_name("cover_supervisor.py"))
        data_file = os.path.abspath(measuring.config.data_file)
        command = [sys.executable, script, data_file, program]
    monkeypatch.setattr(launch, "_launch", lambda: command)


async def test_the_launcher_as_a_plain_child(measured_launcher: None, tmp_path: Path) -> None:
    from toolexec import ToolCall, ToolExecutor, ToolRegistry, Workspace, function_tool
    from toolexec.policy import Allow, ExecutionGrant
    from toolexec.tools import ShellTool

    class Route:
        def decide(self, definition: object, arguments: object, agent_path: str) -> Allow:
            return Allow(ExecutionGrant(sandbox="subprocess", limits={"open_files": 64}))

    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(tmp_path)))
    registry.register(sandbox_tools.where)
    registry.register(sandbox_tools.refuse)
    registry.register(function_tool(name="plain")(sandbox_tools.plain))
    backend = SubprocessBackend(levels=("rlimits",))
    executor = ToolExecutor(
        registry, policy=Route(), backends={"subprocess": backend}, workspace=Workspace(tmp_path)
    )
    outcome = await executor.execute_batch(
        [
            ToolCall("1", "shell", {"command": "ulimit -n"}),
            ToolCall("2", "shell", {"command": "kill -TERM $$"}),
            ToolCall("3", "where", {}),
            ToolCall("4", "refuse", {"reason": "r"}),
            ToolCall("5", "plain", {"text": "p"}),
        ]
    )
    texts = [r.text for r in outcome.results]
    assert texts[0].endswith("stdout:\n64"), texts[0]
    assert "killed by signal SIGTERM" in texts[1]
    assert json.loads(texts[2])["tool"] == "where"
    assert texts[3] == "refused: r"
    assert texts[4] == "P"
    # A set-up that fails (a working directory that is gone) runs nothing, and says why.
    gone = tmp_path / "gone"
    gone.mkdir()
    registry2 = ToolRegistry()
    registry2.register(ShellTool(Workspace(gone)))
    gone.rmdir()
    executor2 = ToolExecutor(registry2, policy=Route(), backends={"subprocess": backend})
    outcome = await executor2.execute_batch([ToolCall("1", "shell", {"command": "true"})])
    assert "could not be set up" in outcome.results[0].text


def test_the_launcher_sets_every_limit() -> None:
    """Limits far above anything a test uses, on this process, put back after."""
    import resource

    names = {
        "memory_bytes": resource.RLIMIT_AS,
        "file_size_bytes": resource.RLIMIT_FSIZE,
        "processes": resource.RLIMIT_NPROC,
    }
    saved = {key: resource.getrlimit(which) for key, which in names.items()}
    huge = 1 << 40
    try:
        child._set_limits(dict.fromkeys(names, huge))
        for key, which in names.items():
            limit = saved[key][1]
            expected = huge if limit == resource.RLIM_INFINITY else min(huge, limit)
            assert resource.getrlimit(which)[0] == expected
    finally:
        for key, which in names.items():
            with contextlib.suppress(ValueError, OSError):  # raising a hard limit needs root
                resource.setrlimit(which, saved[key])


def test_report_lines_are_split_in_one_pass() -> None:
    from toolexec._backends._sandbox import ReportLines

    lines = ReportLines(limit=1 << 20)
    assert lines.feed(b'{"op": ') == []
    assert lines.scanned == 7  # the next search starts past what was searched
    assert lines.feed(b'"started"}\n{"op"') == [b'{"op": "started"}']
    assert (bytes(lines.buffer), lines.scanned) == (b'{"op"', 5)
    assert lines.feed(b": 1}\n\n") == [b'{"op": 1}', b""]
    assert (bytes(lines.buffer), lines.scanned) == (b"", 0)
    for _ in range(20):  # a long line in many chunks: each byte is searched once
        lines.feed(b"x" * 60_000)
        assert lines.scanned == len(lines.buffer)
    assert lines.oversized
    assert lines.feed(b"\n") == [b"x" * 1_200_000]


class _Progress:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def report_progress(self, message: str) -> None:
        self.messages.append(message)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b'{"op": "progress", "message": NaN}', "NaN is not JSON"),
        (b'{"op": "progress", "message": 1e999}', "finite"),
        (b'{"op": "progress", "message": [' + b"[]," * 300_000 + b"[]]}", "over the limit"),
        (b'{"op": "progress", "message": ' + b"[" * 200 + b"]" * 200 + b"}", "nested"),
    ],
)
def test_a_report_line_is_decoded_within_bounds(line: bytes, why: str) -> None:
    from toolexec._backends._sandbox import _Reports, _Run

    ctx = _Progress()
    run = _Run(SubprocessBackend(), Detection("rlimits", {}), "rlimits", None, {}, ctx)  # type: ignore[arg-type]
    reports = _Reports()
    run._take(line, reports)
    assert ctx.messages == []
    assert reports.malformed is not None
    assert why in reports.malformed
    run._take(b'{"op": "progress", "message": "fine"}', reports)
    assert ctx.messages == ["fine"]


async def test_a_warm_launcher_as_a_plain_child(measured_launcher: None, tmp_path: Path) -> None:
    """The warm launcher at ``rlimits`` (a subreaper): commands with and without limits,
    a background process, a timeout, function tools; then it is closed."""
    from toolexec import ToolCall, ToolExecutor, ToolRegistry, Workspace, function_tool
    from toolexec.policy import Allow, ExecutionGrant
    from toolexec.tools import ShellTool

    class Route:
        def __init__(self, limits: dict[str, Any]) -> None:
            self.limits = limits

        def decide(self, definition: object, arguments: object, agent_path: str) -> Allow:
            return Allow(ExecutionGrant(sandbox="subprocess", limits=self.limits))

    registry = ToolRegistry()
    registry.register(ShellTool(Workspace(tmp_path)))
    registry.register(sandbox_tools.where)
    registry.register(function_tool(name="plain")(sandbox_tools.plain))
    backend = SubprocessBackend(levels=("rlimits",), warm=2)
    async with backend:
        for limits in ({}, {"open_files": 64}):
            executor = ToolExecutor(
                registry,
                policy=Route(limits),
                backends={"subprocess": backend},
                workspace=Workspace(tmp_path),
                grace_period=0.5,
            )
            outcome = await executor.execute_batch(
                [
                    ToolCall(
                        "1", "shell", {"command": "ulimit -n; (setsid sleep 60 &); sleep 60 &"}
                    ),
                    ToolCall("2", "shell", {"command": "sleep 30", "timeout": 0.5}),
                    ToolCall("3", "shell", {"command": "/nonexistent/program"}),
                    ToolCall("4", "where", {}),
                    ToolCall("5", "plain", {"text": "p"}),
                ]
            )
            texts = [r.text for r in outcome.results]
            assert (texts[0].split("stdout:\n")[1] == "64") is bool(limits)
            assert outcome.results[1].error_class is not None
            assert outcome.results[1].error_class.value == "timeout"
            assert outcome.results[2].details["exit_code"] == 127
            assert json.loads(texts[3])["tool"] == "where"
            assert texts[4] == "P"
        assert backend._pool.idle
    assert not backend._pool.idle


def test_a_warm_launcher_empties_its_scratch_directories(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    (scratch / "kept" / "inner").mkdir(parents=True)
    (scratch / "link").symlink_to("/etc")
    dev = scratch.stat().st_dev
    emptied = object.__new__(child._Scratch)
    emptied.ipc = False
    emptied.dirs = {str(scratch): (dev, scratch.stat().st_mode, child._snapshot(str(scratch), dev))}
    assert emptied.clean() is None
    (scratch / "left.txt").write_text("x")
    (scratch / "kept" / "new" / "deep").mkdir(parents=True)
    (scratch / "kept" / "new" / "deep" / "f").write_text("x")
    (scratch / "kept" / "new").chmod(0)
    mode = (scratch / "kept").stat().st_mode
    (scratch / "kept").chmod(0o500)
    assert emptied.clean() is None
    assert sorted(p.name for p in scratch.iterdir()) == ["kept", "link"]
    assert [p.name for p in (scratch / "kept").iterdir()] == ["inner"]
    assert (scratch / "kept").stat().st_mode == mode
    # What cannot be put back (a link pointed elsewhere, a directory gone) breaks it.
    (scratch / "link").unlink()
    (scratch / "link").symlink_to("/usr")
    assert "link was removed" in (emptied.clean() or "")
    (scratch / "link").symlink_to("/etc")
    (scratch / "kept" / "inner").rmdir()
    assert "inner was removed" in (emptied.clean() or "")
    if os.stat("/").st_dev == dev:
        with pytest.raises(OSError, match="not a private file system"):
            child._Scratch([str(scratch)])


def test_a_warm_launcher_reads_requests_with_their_descriptors() -> None:
    import socket

    ours, theirs = socket.socketpair()
    pipes = [os.pipe() for _ in range(3)]
    try:
        body = marshal.dumps({"kind": "exec", "big": "x" * 100_000})

        def send() -> None:
            socket.send_fds(ours, [len(body).to_bytes(8, "big") + body], [p[1] for p in pipes])
            ours.close()

        sender = threading.Thread(target=send)
        sender.start()
        got = child._next_request(theirs)
        sender.join()
        assert got is not None
        request, fds = got
        assert request["big"] == "x" * 100_000
        assert len(fds) == 3
        for fd in fds:
            os.close(fd)
        assert child._next_request(theirs) is None  # the end: toolexec closed it
    finally:
        theirs.close()
        for read, write in pipes:
            os.close(read)
            os.close(write)

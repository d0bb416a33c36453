"""RayBackend on a real local Ray cluster: order, exactly once, cancels, trees, hints.

One local cluster (``num_cpus=2``) serves the whole module; it starts with
the first test that needs it. The tools are plain functions in this module
that Ray's workers import (the workers get this directory on their path).
What happened on the cluster is read from files the tools write with
``O_APPEND`` (one line per event, in the order the kernel appended them),
so overlaps are recorded, not timed.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from conftest import process_alive
from toolexec import (
    AgentLoop,
    AgentTree,
    AllowAll,
    ConcurrencyConfig,
    ErrorClass,
    JsonContent,
    SideEffects,
    SubAgentTool,
    ToolContext,
    ToolDefinition,
    ToolError,
    ToolExecutor,
    ToolOutput,
    ToolRegistry,
    function_tool,
)
from toolexec._backends._ray import _execute_remotely
from toolexec._cli._main import main
from toolexec.backends import RayBackend
from toolexec.policy import Allow, Decision, ExecutionGrant, RulePolicy
from toolexec.testing import ScriptedModel, tool_call

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from toolexec import ToolResult

# Slow (tests/README.md): a local Ray cluster.
pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
# Seconds; only so that a broken cancel fails instead of hanging. Far above the
# work: on a loaded two-core machine starting the CLI against the cluster alone
# takes half a minute.
HANG_GUARD = 600


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster for this module; yields its address.

    Ray is imported here, not at import: collection stays free of it.
    """
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    try:
        context = ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=100 * 2**20,
            runtime_env={"env_vars": env},
        )
    except Exception as exc:  # pragma: no cover - only where Ray cannot start at all
        pytest.skip(f"a local Ray cluster cannot start on this machine: {exc}")
    yield str(context.address_info["gcs_address"])
    ray.shutdown()


# -- tools (run on Ray workers) ---------------------------------------------------


def _mark(log: str, line: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _busy(ms: int) -> None:
    """Hold the CPU for about ``ms`` milliseconds (work, not a sleep)."""
    total = 0
    for i in range(ms * 20_000):
        total += i


@function_tool(side_effects=SideEffects.READ)
def get(log: str, state: str, key: str, call: str) -> str:
    """Read a key of the state file."""
    _mark(log, f"start {call} {os.getpid()}")
    _busy(5)
    data = json.loads(Path(state).read_text()) if Path(state).exists() else {}
    _mark(log, f"end {call}")
    return str(data.get(key, "missing"))


@function_tool(side_effects=SideEffects.WRITE)
def put(log: str, state: str, key: str, value: str, call: str) -> str:
    """Set a key of the state file."""
    _mark(log, f"start {call} {os.getpid()}")
    data = json.loads(Path(state).read_text()) if Path(state).exists() else {}
    _busy(20)
    data[key] = value
    Path(state).write_text(json.dumps(data))
    _mark(log, f"end {call}")
    return f"{key}={value}"


@function_tool
def refuse(why: str) -> str:
    """Fail with a message for the model."""
    raise ToolError(f"refused: {why}", error_class=ErrorClass.PERMISSION_DENIED)


@function_tool
def crash(why: str) -> str:
    """Fail with an exception."""
    raise LookupError(why)


@function_tool
def double(x: int) -> int:
    """Twice x."""
    return 2 * x


@function_tool
def die(log: str) -> str:
    """Mark the start, then end the worker process abruptly."""
    _mark(log, f"start die {os.getpid()}")
    os._exit(1)


@function_tool(resource_hints={"num_cpus": 2})
def cpus() -> float:
    """How many CPUs Ray reserved for this call."""
    ray = importlib.import_module("ray")  # imported already: this runs on a Ray worker
    return float(ray.get_runtime_context().get_assigned_resources().get("CPU", 0))


def _tell_pid(fifo: str) -> None:
    """Tell the test this worker's pid through a FIFO (the test blocks until then)."""
    with open(fifo, "w") as f:
        f.write(str(os.getpid()))


@function_tool
def spin(fifo: str) -> str:
    """Start a child process, then compute forever, ignoring every interrupt.

    The worker's and the child's pids are told from inside the region that
    ignores interrupts, so an interrupt sent once the test has them is
    always ignored.
    """
    told = False
    while True:
        try:
            if not told:
                told = True
                child = subprocess.Popen(["sleep", "1000"])
                with open(fifo, "w") as f:
                    f.write(f"{os.getpid()} {child.pid}")
            while True:
                pass
        except KeyboardInterrupt:
            pass


@function_tool
def spin_before_ignoring(fifo: str, log: str, gate: str) -> str:
    """Tell the test our pid, compute until ``gate`` exists, then ignore interrupts.

    An interrupt that lands before the gate opens ends the call: the tool
    was not yet ignoring it.
    """
    try:
        _tell_pid(fifo)
        while not os.path.exists(gate):
            pass
    except KeyboardInterrupt:
        _mark(log, "interrupted")
        raise
    while True:
        try:
            while True:
                pass
        except KeyboardInterrupt:
            pass


# -- helpers ----------------------------------------------------------------------


class ToRay:
    """A policy that runs every call but the sub-agent's on Ray."""

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        if definition.is_recursive:
            return Allow()
        return Allow(ExecutionGrant(sandbox="ray", limits=dict(arguments.get("limits", {}))))


def make_executor(*tools: Any, **kw: Any) -> ToolExecutor:
    registry = ToolRegistry()
    for tool in tools:
        registry.register(tool)
    kw.setdefault("policy", ToRay())
    return ToolExecutor(registry, backends={"ray": RayBackend()}, **kw)


def spans(log: Path) -> dict[str, tuple[int, int]]:
    """Each call's (start line, end line) in the marker log; a call marked twice fails."""
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    for n, line in enumerate(log.read_text().splitlines()):
        kind, call = line.split()[:2]
        seen = starts if kind == "start" else ends
        assert call not in seen, f"{call} ran twice on the cluster"
        seen[call] = n
    assert starts.keys() == ends.keys()
    return {call: (starts[call], ends[call]) for call in starts}


def overlapping(found: dict[str, tuple[int, int]], calls: Sequence[str]) -> list[tuple[str, str]]:
    return [
        (a, b)
        for i, a in enumerate(calls)
        for b in calls[i + 1 :]
        if found[a][0] < found[b][1] and found[b][0] < found[a][1]
    ]


def texts(results: Sequence[ToolResult]) -> list[str]:
    return [r.text for r in results]


async def read_fifo(fifo: Path) -> str:
    """What a tool writes to ``fifo`` (blocks until the tool has written and closed it)."""

    def read() -> str:
        with open(fifo) as f:
            return f.read()

    return await trio.to_thread.run_sync(read, abandon_on_cancel=True)


def state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0].decode()


# -- the worker side, in this process (no cluster) -------------------------------


def test_the_worker_function_tags_outputs_and_failures() -> None:
    info = {"call_id": "c", "tool_name": "t", "grant": ExecutionGrant(sandbox="ray")}
    assert _execute_remotely(double, {"x": 2}, info) == ("ok", ToolOutput((JsonContent(4),)))
    assert _execute_remotely(refuse, {"why": "no"}, info) == (
        "tool_error",
        "refused: no",
        "permission_denied",
        {},
    )
    tag, exc = _execute_remotely(crash, {"why": "gone"}, info)
    assert tag == "raised"
    assert isinstance(exc, LookupError)
    assert "raised on a Ray worker" in exc.__notes__[0]

    class Unpicklable(Exception):
        def __reduce__(self) -> Any:
            raise TypeError("no pickling")

    @function_tool
    async def odd(ctx: ToolContext) -> str:
        """Async, with a context: runs under its own trio.run."""
        await trio.lowlevel.checkpoint()
        if ctx.call_id == "c":
            raise Unpicklable("odd")
        return ctx.call_id

    with pytest.raises(ValueError, match="call_here runs only sync functions without one"):
        odd.call_here({})
    tag, exc = _execute_remotely(odd, {}, info)
    assert tag == "raised"
    assert type(exc) is RuntimeError
    assert "Unpicklable: odd" in str(exc)
    assert _execute_remotely(odd, {}, {**info, "call_id": "d"})[1].content[0].text == "d"


def test_bad_resource_hints_are_refused_where_they_are_given() -> None:
    with pytest.raises(ValueError, match="unknown hint 'gpus'; the hints are num_cpus"):
        RayBackend(resource_hints={"gpus": 1})
    with pytest.raises(ValueError, match="memory must be an integer number of bytes"):
        ToolDefinition("t", "d", resource_hints={"memory": 1.5})
    with pytest.raises(ValueError, match="num_cpus must be a number >= 0, got -1"):
        function_tool(resource_hints={"num_cpus": -1})(lambda: None)
    with pytest.raises(ValueError, match="RayBackend address must be a Ray address"):
        RayBackend(address=" ")


# -- on the cluster ---------------------------------------------------------------


async def test_a_mixed_batch_on_ray_matches_the_host_in_order_and_runs_each_call_once(
    cluster: str, tmp_path: Path
) -> None:
    def batch(where: Path) -> list[Any]:
        common = {"log": str(where / "log"), "state": str(where / "state")}
        plan = [
            ("get", {"key": "a"}),
            ("put", {"key": "a", "value": "1"}),
            ("get", {"key": "a"}),
            ("get", {"key": "b"}),
            ("put", {"key": "b", "value": "2"}),
            ("put", {"key": "a", "value": "3"}),
            ("get", {"key": "a"}),
            ("get", {"key": "b"}),
        ]
        return [
            tool_call(name, {**args, **common, "call": f"c{i}"}, id=f"c{i}")
            for i, (name, args) in enumerate(plan)
        ]

    (tmp_path / "ray").mkdir()
    (tmp_path / "host").mkdir()
    on_ray = await make_executor(get, put).execute_batch(batch(tmp_path / "ray"))
    on_host = await make_executor(get, put, policy=AllowAll()).execute_batch(
        batch(tmp_path / "host")
    )
    assert [r.call_id for r in on_ray.results] == [f"c{i}" for i in range(8)]
    assert texts(on_ray.results) == texts(on_host.results)
    assert texts(on_ray.results) == ["missing", "a=1", "1", "missing", "b=2", "a=3", "3", "2"]
    found = spans(tmp_path / "ray" / "log")
    assert sorted(found) == [f"c{i}" for i in range(8)]  # each call ran once on the cluster
    writes = ["c1", "c4", "c5"]
    for w in writes:  # a write overlaps nothing, so reads keep their place around it
        assert all(not overlapping(found, [w, c]) for c in found if c != w)
    pids = {
        line.split()[2]
        for line in (tmp_path / "ray" / "log").read_text().splitlines()
        if line.startswith("start")
    }
    assert str(os.getpid()) not in pids  # they ran in Ray's workers, not here


async def test_errors_and_hints_map_to_one_result_each(cluster: str) -> None:
    executor = make_executor(refuse, crash, cpus)
    outcome = await executor.execute_batch(
        [
            tool_call("refuse", {"why": "policy"}, id="r"),
            tool_call("crash", {"why": "lost"}, id="c"),
            tool_call("cpus", {}, id="n"),
        ]
    )
    refused, crashed, counted = outcome.results
    assert refused.error_class is ErrorClass.PERMISSION_DENIED
    assert refused.text == "refused: policy"
    assert crashed.error_class is ErrorClass.EXECUTION_ERROR
    assert "LookupError: lost" in crashed.text
    assert counted.text == "2.0"  # the tool's num_cpus hint reached Ray


async def test_a_worker_dying_mid_call_is_an_error_result_and_the_call_is_not_retried(
    cluster: str, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    outcome = await make_executor(die, double).execute_batch(
        [tool_call("die", {"log": str(log)}), tool_call("double", {"x": 21})]
    )
    died, doubled = outcome.results
    assert died.error_class is ErrorClass.EXECUTION_ERROR
    assert died.text.startswith("Tool 'die' failed on the Ray cluster: ")
    assert "WorkerCrashedError" in died.text
    assert len(log.read_text().splitlines()) == 1  # ran once: Ray did not retry it
    assert doubled.text == "42"


async def test_a_bad_hint_in_the_grant_is_an_error_result(cluster: str) -> None:
    class BadGrant:
        def decide(self, definition: ToolDefinition, arguments: Any, agent_path: str) -> Decision:
            return Allow(ExecutionGrant(sandbox="ray", limits={"num_gpus": "all"}))

    outcome = await make_executor(cpus, policy=BadGrant()).execute_batch([tool_call("cpus", {})])
    [result] = outcome.results
    assert result.is_error
    assert "cannot run on Ray: the grant's limits: num_gpus must be a number >= 0" in result.text


async def test_a_cancel_that_lands_before_the_tool_ignores_it_ends_the_call_and_keeps_the_worker(
    cluster: str, tmp_path: Path
) -> None:
    # The interrupt lands where the tool does not catch it, so the task ends
    # there and Ray reports it over at once. Its worker survives (Ray keeps it
    # for the next task) and is not killed, though the grace period is long.
    fifo, log, gate = tmp_path / "fifo", tmp_path / "log", tmp_path / "gate"
    os.mkfifo(fifo)
    executor = make_executor(spin_before_ignoring, grace_period=HANG_GUARD)
    results: list[ToolResult] = []
    with trio.fail_after(HANG_GUARD):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                args = {"fifo": str(fifo), "log": str(log), "gate": str(gate)}
                call = tool_call("spin_before_ignoring", args)
                results.extend((await executor.execute_batch([call])).results)

            nursery.start_soon(run)
            pid = int(await read_fifo(fifo))
            assert state_of(pid) == "R"  # computing on the cluster
            executor.cancel_all()
    [result] = results
    assert result.error_class is ErrorClass.CANCELLED
    assert log.read_text() == "interrupted\n"  # the interrupt ended the tool's code
    assert process_alive(pid)  # and its worker was not killed
    # Idle again: the worker is back to waiting for work instead of computing.
    with trio.fail_after(HANG_GUARD):
        while state_of(pid) == "R":
            await trio.sleep(0.01)


async def test_a_task_that_ignores_the_interrupt_is_killed_with_its_children_after_the_grace_period(
    cluster: str, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    executor = make_executor(spin, grace_period=0.5)
    results: list[ToolResult] = []
    with trio.fail_after(HANG_GUARD):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                call = tool_call("spin", {"fifo": str(fifo)})
                results.extend((await executor.execute_batch([call])).results)

            nursery.start_soon(run)
            pids = [int(pid) for pid in (await read_fifo(fifo)).split()]
            pidfds = [os.pidfd_open(pid) for pid in pids]  # while both surely live
            executor.cancel_all()
    try:
        [result] = results
        assert result.error_class is ErrorClass.CANCELLED
        # Ray reported the task over only once its worker was killed; the
        # worker and the tool's child end with it (a pidfd turns readable
        # when its process exits).
        with trio.fail_after(HANG_GUARD):
            for pidfd in pidfds:
                await trio.lowlevel.wait_readable(pidfd)
        assert not any(process_alive(pid) for pid in pids)
    finally:
        for pidfd in pidfds:  # on failure, leave nothing behind
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)


async def test_a_tree_of_sub_agents_on_ray_keeps_serial_mutators_serial(
    cluster: str, tmp_path: Path
) -> None:
    log, state = str(tmp_path / "log"), str(tmp_path / "state")

    def leaf_turn(agent: int) -> list[Any]:
        return [
            tool_call(
                "put",
                {
                    "log": log,
                    "state": state,
                    "key": f"k{agent}",
                    "value": f"{agent}.{j}",
                    "call": f"a{agent}w{j}",
                },
                id=f"a{agent}w{j}",
            )
            for j in range(2)
        ] + [
            tool_call(
                "get",
                {"log": log, "state": state, "key": "k0", "call": f"a{agent}r"},
                id=f"a{agent}r",
            )
        ]

    def child_model() -> Any:
        agent = next(counter)
        return ScriptedModel([leaf_turn(agent), "done"])

    counter = iter(range(100))
    worker = SubAgentTool(
        name="worker",
        description="Does its part.",
        system_prompt="Work.",
        model=child_model,
        tools=["put", "get"],
    )
    executor = make_executor(
        put, get, worker, config=ConcurrencyConfig(serial_mut_width=1, read_width=4)
    )
    root = ScriptedModel(
        [[tool_call("worker", {"task": f"part {i}"}) for i in range(3)], "all done"]
    )
    with trio.fail_after(HANG_GUARD):
        result = await AgentLoop(root, executor).run("go")
    assert result.text == "all done"
    found = spans(tmp_path / "log")
    writes = [c for c in found if "w" in c]
    assert len(writes) == 6  # every leaf call ran once, on the cluster
    assert len(found) == 9
    assert overlapping(found, writes) == []  # serial across the whole tree
    assert executor.service(AgentTree) is not None


CLI_TOOLS = """
import os
from toolexec import SideEffects, function_tool

@function_tool(side_effects=SideEffects.READ)
def where(tag: str) -> str:
    "Say which process ran the call."
    return f"{tag} ran in {os.getpid()}"

TOOLS = [where]
"""


def test_the_cli_runs_a_batch_on_the_cluster(cluster: str, tmp_path: Path) -> None:
    (tmp_path / "cli_tools.py").write_text(CLI_TOOLS)
    (tmp_path / "ws").mkdir()
    calls = [("where", {"tag": "first"}), ("echo", {"text": "hi"}), ("where", {"tag": "last"})]
    response = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": f"c{i}",
                            "type": "function",
                            "function": {"name": n, "arguments": json.dumps(a)},
                        }
                        for i, (n, a) in enumerate(calls)
                    ],
                }
            }
        ]
    }
    (tmp_path / "response.json").write_text(json.dumps(response))
    base = [sys.executable, "-m", "toolexec", "exec", "response.json", "-w", "ws", "-q"]
    with subprocess.Popen(
        [*base, "--tools", "cli_tools:TOOLS", "--backend", "ray", "--ray-address", cluster],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    ) as cli:
        stdout, stderr = cli.communicate(timeout=HANG_GUARD)
    done = subprocess.CompletedProcess(cli.args, cli.returncode, stdout, stderr)
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    assert [m["tool_call_id"] for m in output] == ["c0", "c1", "c2"]
    assert output[1]["content"] == "hi"
    pids = {int(m["content"].split()[-1]) for m in (output[0], output[2])}
    assert len(pids) >= 1
    assert cli.pid not in pids  # the calls ran in Ray's workers, not in the CLI's process


def test_the_cli_refuses_backend_ray_without_an_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "response.json").write_text(json.dumps({"choices": [{"message": {}}]}))
    args = ["exec", str(tmp_path / "response.json"), "-w", str(tmp_path / "ws")]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--backend", "ray"])
    assert exited.value.code == 2
    assert "--backend ray needs --ray-address ADDR" in capsys.readouterr().err


def _pid() -> int:
    """The pid of the process that ran the call."""
    return os.getpid()


pid_on_ray = function_tool(name="pid_on_ray")(_pid)
pid_here = function_tool(name="pid_here")(_pid)


async def test_a_policy_file_rule_sends_one_tool_to_ray(cluster: str) -> None:
    policy = RulePolicy.from_dict(
        {
            "default": "deny",
            "rules": [
                {"action": "allow", "tool": "pid_on_ray", "sandbox": "ray"},
                {"action": "allow", "tool": "pid_here"},
            ],
        }
    )
    executor = make_executor(pid_on_ray, pid_here, policy=policy)
    calls = [tool_call("pid_on_ray", {}, id="a"), tool_call("pid_here", {}, id="b")]
    on_ray, here = (await executor.execute_batch(calls)).results
    assert not on_ray.is_error, on_ray.text
    assert not here.is_error, here.text
    assert int(here.text) == os.getpid()
    assert int(on_ray.text) != os.getpid()


async def test_a_tool_that_cannot_be_sent_to_ray_is_an_error_result(cluster: str) -> None:
    lock = threading.Lock()  # a closure over a lock does not pickle

    def holds_a_lock() -> str:
        """Say whether the lock is held."""
        return str(lock.locked())

    tool = function_tool(name="holds_a_lock")(holds_a_lock)
    [result] = (await make_executor(tool).execute_batch([tool_call("holds_a_lock", {})])).results
    assert result.is_error
    assert "Tool 'holds_a_lock' could not be sent to Ray" in result.text

"""Fixtures that start the MCP servers the tests talk to.

* ``sdk_server_entry()``: the ``mcpServers`` entry of the SDK test server
  over stdio; ``raw_server_entry()``: the same for the hand-written one
  (``raw_server.py``), which sends schemas and failures the SDK would not.
* ``http_server_url``: the same server over streamable HTTP on 127.0.0.1,
  on a port the OS picked; killed with its process group afterwards.
* ``filesystem_server``: the path of the reference filesystem server from
  npm, installed once into the pytest cache (or the temp directory when the
  cache plugin is off) and kept between runs, so one CI job installs it
  once; skipped when Node.js or npm is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

SDK_SERVER = Path(__file__).with_name("sdk_server.py")
RAW_SERVER = Path(__file__).with_name("raw_server.py")
FILESYSTEM_PACKAGE = "@modelcontextprotocol/server-filesystem@2026.8.31"


def sdk_server_entry() -> dict[str, Any]:
    """The ``mcpServers`` entry that starts the SDK test server over stdio."""
    return {"command": sys.executable, "args": [str(SDK_SERVER)]}


def raw_server_entry() -> dict[str, Any]:
    """The ``mcpServers`` entry that starts the hand-written test server over stdio."""
    return {"command": sys.executable, "args": [str(RAW_SERVER)]}


def process_gone(pid: int) -> bool:
    """Whether a process no longer runs (reaped, or a zombie nobody has reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


@pytest.fixture
async def http_server_url() -> AsyncIterator[str]:
    """Start the SDK test server over streamable HTTP; yield its endpoint URL."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(SDK_SERVER), "http"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        buffer = b""
        with trio.fail_after(120):  # a hang guard: a loaded machine starts it in seconds
            while b"\n" not in buffer:
                chunk = await process.stdout.receive_some()
                assert chunk, "the HTTP test server exited before listening"
                buffer += chunk
        word, port = buffer.split(b"\n", 1)[0].split()
        assert word == b"PORT"
        yield f"http://127.0.0.1:{int(port)}/mcp"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with trio.CancelScope(shield=True):
            await process.wait()


@pytest.fixture(scope="session")
def filesystem_server(request: pytest.FixtureRequest) -> Path:
    """Install the reference filesystem server from npm (cached); return its executable."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are needed for the reference filesystem MCP server")
    # The cache is absent under -p no:cacheprovider.
    cache: pytest.Cache | None = getattr(request.config, "cache", None)
    if cache is not None:
        prefix = cache.mkdir("mcp-server-filesystem")
    else:
        prefix = Path(tempfile.gettempdir()) / "toolexec-mcp-server-filesystem"
    binary = prefix / "node_modules" / ".bin" / "mcp-server-filesystem"
    if not binary.exists():
        subprocess.run(
            [
                "npm",
                "install",
                "--prefix",
                str(prefix),
                "--no-audit",
                "--no-fund",
                "--silent",
                FILESYSTEM_PACKAGE,
            ],
            check=True,
            timeout=300,
        )
    return binary

"""The tooling gates run with the tests: ruff lint and mypy strict on src/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(
    shutil.which("ruff", path=str(Path(sys.executable).parent)) is None
    and shutil.which("ruff") is None,
    reason="ruff is part of the test extra",
)
def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or "ruff"
    result = _run(ruff, "check", "src", "tests", "stress", "benchmarks", "examples", "docs")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean():
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr

"""The tooling gates run with the tests.

Ruff lint and mypy strict on src/; branch coverage has a floor that only goes up.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
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


# Branch coverage of the whole suite when the floor was set. The floor in
# pyproject.toml starts here and only goes up: when coverage rises, raise
# fail_under to the new total rounded down; never lower it.
FLOOR_WHEN_SET = 89


def test_branch_coverage_is_measured_with_a_floor_that_only_goes_up():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    addopts = config["pytest"]["ini_options"]["addopts"]
    assert {"--cov=toolexec", "--cov-branch"} <= set(addopts)
    assert config["coverage"]["run"] == {"branch": True, "source": ["toolexec"]}
    floor = config["coverage"]["report"]["fail_under"]
    assert isinstance(floor, int)
    assert floor >= FLOOR_WHEN_SET, "the coverage floor is raised, never lowered"

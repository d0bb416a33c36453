"""The tooling gates run with the tests.

Ruff lint, and mypy strict on src/ and on the tests, stress tests,
benchmarks and examples that use it; CI runs the README's test command
against the pins in constraints.txt; branch coverage has a floor that only
goes up; collecting the suite imports none of the optional SDKs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

# Slow (tests/README.md): ruff and mypy over the whole tree, and a collection of the suite.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).parent.parent


# A hang guard only, far above the work: mypy over the whole tree takes about
# 45 s on a quiet two-core machine and several times that with a cold cache on
# a loaded one; no check here is about speed.
HANG_GUARD = 1800  # seconds


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD)


@pytest.mark.skipif(
    shutil.which("ruff", path=str(Path(sys.executable).parent)) is None
    and shutil.which("ruff") is None,
    reason="ruff is part of the test extra",
)
def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or "ruff"
    result = _run(ruff, "check", "src", "tests", "stress", "benchmarks", "examples", "docs")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_checks_the_tests_as_strictly_as_the_library() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True
    assert {"src/toolexec", "tests", "stress", "benchmarks", "examples"} <= set(config["files"])
    assert "ignore-without-code" in config["enable_error_code"]
    for override in config.get("overrides", []):
        # Only third-party packages without types may be let off, and only their imports.
        assert set(override) == {"module", "ignore_missing_imports"}, override


def _readme_test_commands() -> list[str]:
    """The README's test command (pinned) and the one under it (latest releases)."""
    section = (ROOT / "README.md").read_text().split("Run the tests")[1].split("\n## ")[0]
    pinned = section.split("```sh\n")[1].split("\n")[0]
    latest = section.split("Against the latest releases instead: `")[1].split("`")[0]
    return [pinned, latest]


def test_ci_runs_exactly_the_readme_test_command_against_the_pins() -> None:
    pinned, latest = _readme_test_commands()
    assert '-c constraints.txt -e ".[test]"' in pinned
    assert pinned.endswith("&& .venv/bin/python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "set -euo pipefail" in ci  # a failing test, floor or exit 5 fails CI
    assert ci[-1] == pinned
    assert "constraints" not in latest
    assert "-U --upgrade-strategy eager" in latest
    assert latest in (ROOT / "tests" / "README.md").read_text()


def _name(requirement: str) -> str:
    """A requirement's project name, normalized (PEP 503)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group()).lower()


def test_constraints_pin_every_dependency_of_the_test_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = [line for line in lines if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+==\S+", pin) for pin in pins), pins
    pinned = {_name(pin) for pin in pins}
    assert "toolexec" not in pinned
    wanted = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]}
    assert wanted <= pinned, f"run tools/pin-constraints.sh: {sorted(wanted - pinned)} unpinned"


# Branch coverage of the whole suite when the floor was set. The floor in
# pyproject.toml starts here and only goes up: when coverage rises, raise
# fail_under to the new total rounded down; never lower it.
FLOOR_WHEN_SET = 94


def test_branch_coverage_is_measured_with_a_floor_that_only_goes_up() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    addopts = config["pytest"]["ini_options"]["addopts"]
    assert {"--cov=toolexec", "--cov-branch"} <= set(addopts)
    assert config["coverage"]["run"] == {"branch": True, "source": ["toolexec"]}
    floor = config["coverage"]["report"]["fail_under"]
    assert isinstance(floor, int)
    assert floor >= FLOOR_WHEN_SET, "the coverage floor is raised, never lowered"


# The optional SDKs (and toolexec's modules that import them on import), each
# a fraction of a second to seconds to import. Collection, which every worker
# process repeats for the whole suite, imports none of them: a test file
# imports them in the tests or fixtures that use them.
OPTIONAL_SDKS = (
    "agents",
    "anthropic",
    "langchain_core",
    "langgraph",
    "mcp",
    "openai",
    "psycopg",
    "pydantic_ai",
    "ray",
    "wasmtime",
    "toolexec.langgraph",
    "toolexec.mcp",
    "toolexec.openai_agents",
    "toolexec.pydantic_ai",
)

_REPORT_MODULES = """
import json, os, sys

def pytest_collection_finish(session):
    with open(os.environ["TOOLEXEC_TEST_MODULES_OUT"], "w") as out:
        json.dump(sorted(sys.modules), out)
"""


def test_collecting_the_suite_imports_no_optional_sdk(tmp_path: Path) -> None:
    (tmp_path / "report_collected_modules.py").write_text(_REPORT_MODULES)
    out = tmp_path / "modules.json"
    paths = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "TOOLEXEC_TEST_MODULES_OUT": str(out),
    }
    argv = ["--collect-only", "-q", "-n0", "--no-cov", "-p", "no:cacheprovider"]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", *argv, "-p", "report_collected_modules"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    loaded = json.loads(out.read_text())
    heavy = [n for n in OPTIONAL_SDKS if any(m == n or m.startswith(n + ".") for m in loaded)]
    assert not heavy, f"collecting imported {heavy}: import them in the tests that use them"

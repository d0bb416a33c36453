"""The fuzz harnesses in fuzz/: their seed corpus replays clean, and each
one fuzzes clean for a few seconds under libFuzzer (atheris).

A harness is a file ``fuzz/fuzz_NAME.py`` with ``test_one_input(data)``,
and seeds in ``fuzz/corpus/NAME/``. A failure here is a finding: the seed
or the crash input (written to the test's temporary directory, named in
the failure) becomes a seed file, and its cause gets a regression test
next to the code it concerns.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

# Slow (tests/README.md): libFuzzer runs of every harness.
pytestmark = pytest.mark.slow

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
HARNESSES = sorted(p.stem.removeprefix("fuzz_") for p in FUZZ.glob("fuzz_*.py"))
SECONDS = 3


def test_every_harness_has_a_seed_corpus() -> None:
    assert {"formats", "ipc_lines", "remote_stream", "workspace_paths"} <= set(HARNESSES)
    for name in HARNESSES:
        seeds = list((FUZZ / "corpus" / name).iterdir())
        assert len(seeds) >= 5, f"fuzz/corpus/{name} needs seeds"


@pytest.mark.parametrize("name", HARNESSES)
def test_seed_corpus_replays_clean(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FUZZ))
    harness = importlib.import_module(f"fuzz_{name}")
    for seed in sorted((FUZZ / "corpus" / name).iterdir()):
        harness.test_one_input(seed.read_bytes())


@pytest.mark.parametrize("name", HARNESSES)
def test_harness_fuzzes_clean(name: str, tmp_path: Path) -> None:
    found = tmp_path / "found"
    found.mkdir()
    command = [
        sys.executable,
        str(FUZZ / "run.py"),
        name,
        f"-max_total_time={SECONDS}",
        "-timeout=20",
        "-rss_limit_mb=2048",
        f"-artifact_prefix={tmp_path}/",
        str(found),
        str(FUZZ / "corpus" / name),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    crashes = sorted(p.name for p in tmp_path.iterdir() if p.name != "found")
    assert run.returncode == 0, (crashes, run.stderr[-3000:])
    assert "Done" in run.stderr, run.stderr[-2000:]

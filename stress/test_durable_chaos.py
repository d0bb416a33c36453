"""Crash chaos: hosts killed with SIGKILL at random points, then resumed (docs/durable.md).

Each trial runs ``tests/durable_chaos_host.py`` (a seeded session of reads,
appended lines, idempotent upserts, sub-agents that append and appends that
wait for an approval) in a real child process, and kills its process group
with SIGKILL after a random number of the events it prints: while it plans,
in a run, with a write in flight, while an approval pends, inside a
sub-agent. It starts the host again on the same journal until one finishes.
Then the append-only marker files and the results must show:

- zero repeated non-idempotent side effects: every appended line at most once;
- zero lost finished results: every batch's results the host received before a
  kill are the results the finishing host received (replayed);
- every interrupted write reported as interrupted: a write's final result is
  its success (its line written exactly once) or ``interrupted``, nothing else;
- idempotent upserts saw one idempotency key per call, on every attempt.

``STRESS=long`` runs 200 trials; the default runs a few.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from stress.conftest import stress_profile

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.slow  # real processes started and killed, many times

HOST = Path(__file__).resolve().parent.parent / "tests" / "durable_chaos_host.py"
TRIALS = 200 if stress_profile() == "stress-long" else 3
HANG_GUARD = 120.0  # seconds one host may take; far above the second it needs


@attrs.define
class Attempt:
    """What one host printed before it finished or was killed."""

    events: list[str] = attrs.field(factory=list)
    done: dict[int, list[dict[str, Any]]] = attrs.field(factory=dict)
    finished: bool = False
    killed_at: str | None = None


def run_host(
    journal: str,
    markers: Path,
    seed: int,
    kill_at: tuple[str, int] | None,
    store_spec: str | None = None,
) -> Attempt:
    """Run one host; kill its group with SIGKILL at the ``n``-th event of a kind
    (``kill_at = (kind, n)``; the kind ``"any"`` counts every event; ``None``: never)."""
    attempt = Attempt()
    seen = 0
    with open(markers / "stderr", "a") as err:
        proc = subprocess.Popen(
            [sys.executable, str(HOST), store_spec or journal, str(markers), str(seed)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        guard = threading.Timer(HANG_GUARD, _kill, (proc,))
        guard.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                kind = _note(attempt, line.rstrip("\n"))
                if kill_at is not None and kill_at[0] in (kind, "any"):
                    seen += 1
                    if seen >= kill_at[1]:
                        _kill(proc)
                        attempt.killed_at = kind
                        break
            proc.wait()
        finally:
            guard.cancel()
            _kill(proc)
            if proc.stdout is not None:
                proc.stdout.close()
    return attempt


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is gone already
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _note(attempt: Attempt, line: str) -> str:
    """Record a line the host printed; its kind (``plan``, ``run``, ``ask``, ...)."""
    attempt.events.append(line)
    if line.startswith("done "):
        _, k, results = line.split(" ", 2)
        attempt.done[int(k)] = json.loads(results)
    elif line == "finished":
        attempt.finished = True
    return line.split(" ")[0]


#: Where a kill is aimed: the issue's points (planning, in a run, a write in
#: flight, an approval pending, inside a sub-agent), or any event at all.
KILL_POINTS = ("plan", "run", "wrote", "ask", "child", "any")


def _essence(results: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["id"], r["text"], r["error_class"], r["interrupted"]) for r in results]


def trial(seed: int, where: Path, store_spec: str | None = None) -> collections.Counter[str]:
    """One session, killed at random points until a host finishes; the kill points seen."""
    rng = random.Random(seed)
    journal = str(where / "journal.db")
    received: dict[int, list[tuple[Any, ...]]] = {}
    kill_points: collections.Counter[str] = collections.Counter()
    kills = rng.randint(1, 3)
    for _ in range(kills + 5):
        kill_at = None
        if kills > 0:
            kind = KILL_POINTS[(seed + kills) % len(KILL_POINTS)]
            kill_at = (kind, rng.randint(1, 30 if kind == "any" else 4))
        attempt = run_host(journal, where, seed, kill_at, store_spec)
        for k, results in attempt.done.items():
            assert received.setdefault(k, _essence(results)) == _essence(results), (
                f"seed {seed}: batch {k}'s results changed after a resume"
            )
        if attempt.finished:
            break
        assert kill_at is not None, f"seed {seed}: the host died on its own:\n{_stderr(where)}"
        kill_points[attempt.killed_at or "?"] += 1
        kills -= 1
    else:
        pytest.fail(f"seed {seed}: no host finished")
    check_effects(seed, where, attempt)
    return kill_points


def check_effects(seed: int, where: Path, final: Attempt) -> None:
    """The marker files against the final results (the module docstring's promises)."""
    appends = collections.Counter(_lines(where / "appends"))
    repeated = {line: n for line, n in appends.items() if n > 1}
    assert not repeated, f"seed {seed}: side effects repeated: {repeated}"
    upserts: dict[str, set[str]] = collections.defaultdict(set)
    for line in _lines(where / "upserts"):
        key, idem = line.split(" ")
        upserts[key].add(idem)
    assert all(len(keys) == 1 for keys in upserts.values()), f"seed {seed}: {dict(upserts)}"
    for results in final.done.values():
        for r in results:
            _check_result(seed, r, appends, upserts)


def _check_result(
    seed: int, r: dict[str, Any], appends: collections.Counter[str], upserts: dict[str, set[str]]
) -> None:
    cid, text = r["id"], r["text"]
    checks: dict[str, Callable[[], bool]] = {
        "appended": lambda: appends[cid] == 1,
        "set": lambda: cid in upserts,
        "value": lambda: True,
        "done": lambda: True,
    }
    if r["interrupted"]:
        assert appends[cid] <= 1, f"seed {seed}: {cid} interrupted, yet written twice"
        return
    kind = text.split(" ")[0]
    assert kind in checks, f"seed {seed}: {cid} ended neither done nor interrupted: {r}"
    assert checks[kind](), f"seed {seed}: {cid} says {text!r} but its effect is not there once"


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _stderr(where: Path) -> str:
    path = where / "stderr"
    return path.read_text()[-3000:] if path.exists() else ""


def test_killed_hosts_resume_without_repeating_or_losing_anything(tmp_path: Path) -> None:
    landed: collections.Counter[str] = collections.Counter()
    for seed in range(TRIALS):
        where = tmp_path / str(seed)
        where.mkdir()
        landed += trial(seed, where)
    print(f"{TRIALS} trials; kills landed at: {dict(landed)}")
    assert sum(landed.values()) >= TRIALS


def test_killed_hosts_resume_on_a_postgresql_journal_too(pg_cluster: Any, tmp_path: Path) -> None:
    """The same trials with the journal in PostgreSQL, a fresh database for each."""
    landed: collections.Counter[str] = collections.Counter()
    for seed in range(TRIALS):
        where = tmp_path / str(seed)
        where.mkdir()
        landed += trial(seed, where, store_spec=pg_cluster.create_database())
    print(f"{TRIALS} trials on PostgreSQL; kills landed at: {dict(landed)}")
    assert sum(landed.values()) >= TRIALS

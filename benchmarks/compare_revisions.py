"""Per-call overhead of this checkout against an earlier revision, in one run.

Run: ``python benchmarks/compare_revisions.py --base HEAD~3`` from the
repository root. The base revision's ``src/`` is exported to a temporary
directory; then a benchmark (this checkout's copy, so both sides run the
same measurement) runs alternately against the base and the working tree,
``--rounds`` times each, so machine noise hits both alike. Each run
measures toolexec against its plain baseline in its own process.

``--bench executor`` (the default) runs ``bench_executor.py --quick``: per
batch size, the median executor time per call, the median floor time, and
the median executor/floor ratio. ``--bench shell`` runs ``bench_builtins.py``
for its shell pairs: ``shell`` running ``true`` against
``trio.run_process(["true"])``, and the same against ``bash -c true``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

Row = tuple[float, float, float]


def _executor(src: Path) -> dict[str, Row]:
    out = _run(src, "bench_executor.py", "--quick")
    line = re.compile(r"no-op call, N=(\d+) \(us/call\)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x")
    found = {f"N={n}": (float(a), float(b), float(r)) for n, a, b, r in line.findall(out)}
    return {key: found[key] for key in ("N=10", "N=100", "N=1000")}


def _shell(src: Path) -> dict[str, Row]:
    out = _run(src, "bench_builtins.py", "--reads", "10", "--shells", "300")
    line = re.compile(
        r"^(shell\S*)\s+median: toolexec\s+([\d.]+) us, plain\s+([\d.]+) us, ratio\s+([\d.]+)x",
        re.MULTILINE,
    )
    return {name: (float(a), float(b), float(r)) for name, a, b, r in line.findall(out)}


BENCHES = {"executor": _executor, "shell": _shell}


def _run(src: Path, script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, str(ROOT / "benchmarks" / script), *args]
    return subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout


def export(rev: str, into: Path) -> Path:
    """Write ``rev``'s ``src/`` under ``into``; return that ``src`` directory."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="runs per side (default 5)")
    parser.add_argument(
        "--this", default=None, help="a revision to measure instead of the working tree"
    )
    parser.add_argument("--bench", choices=sorted(BENCHES), default="executor")
    args = parser.parse_args()
    measure = BENCHES[args.bench]
    sides: dict[str, list[dict[str, Row]]] = {"base": [], "this": []}
    with tempfile.TemporaryDirectory() as tmp:
        base_dir, this_dir = Path(tmp) / "base", Path(tmp) / "this"
        base_dir.mkdir()
        this_dir.mkdir()
        this_src = ROOT / "src" if args.this is None else export(args.this, this_dir)
        srcs = {"base": export(args.base, base_dir), "this": this_src}
        for i in range(args.rounds):
            order = ("base", "this") if i % 2 == 0 else ("this", "base")
            for side in order:
                sides[side].append(measure(srcs[side]))
                print(f"round {i + 1}/{args.rounds}: {side} done", file=sys.stderr)
    load = os.getloadavg()
    this = args.this or "working tree"
    print(f"base = {args.base}, this = {this}; {args.rounds} alternating runs per side")
    print(f"load average after the runs: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for side in ("base", "this"):
        print(f"\n{side}:")
        print(f"{'case':>12}{'toolexec us/call':>18}{'plain us/call':>15}{'ratio':>8}")
        for key in sides[side][0]:
            runs = [r[key] for r in sides[side]]
            ours, floor, ratio = (statistics.median(x[k] for x in runs) for k in range(3))
            print(f"{key:>12}{ours:>18.1f}{floor:>15.1f}{ratio:>7.2f}x")


if __name__ == "__main__":
    main()

"""Cold start: ``import toolexec`` and ``toolexec --help`` against ``import trio``.

Run: ``python benchmarks/bench_startup.py [--runs N]``

Each measurement is the wall time of one fresh process, from spawn to exit,
taken with ``time.perf_counter`` around ``subprocess.run``:

- ``python -c "import trio"``: the floor; toolexec cannot start faster than
  the library it is built on;
- ``python -c "import toolexec"``: what every embedder pays;
- ``toolexec --help``: the console script next to this interpreter (the one
  ``pip install`` writes), or ``python -m toolexec --help`` when there is
  none.

The three are interleaved, round after round, so machine noise hits them
alike, after one untimed round that warms the bytecode caches. Prints the
median of each and the two ratios (targets: import <= 1.3x, --help <= 1.6x),
with the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 10
IMPORT_TARGET = 1.3
HELP_TARGET = 1.6


def help_command() -> list[str]:
    """``toolexec --help`` as the user runs it: the console script, else ``-m``."""
    script = Path(sys.executable).with_name("toolexec")
    if script.exists():
        return [str(script), "--help"]
    return [sys.executable, "-m", "toolexec", "--help"]


def commands() -> dict[str, list[str]]:
    """The measured commands, by label."""
    return {
        "import trio": [sys.executable, "-c", "import trio"],
        "import toolexec": [sys.executable, "-c", "import toolexec"],
        "toolexec --help": help_command(),
    }


def run_once(command: list[str]) -> float:
    """The wall time of one fresh process running ``command``, in seconds."""
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(runs: int) -> dict[str, float]:
    """The median wall time of each command over ``runs`` interleaved rounds."""
    measured = commands()
    for command in measured.values():  # warm the bytecode caches, untimed
        run_once(command)
    times: dict[str, list[float]] = {label: [] for label in measured}
    for _ in range(runs):
        for label, command in measured.items():
            times[label].append(run_once(command))
    return {label: statistics.median(values) for label, values in times.items()}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=RUNS, help=f"rounds (default {RUNS})")
    args = parser.parse_args()
    print("load average before:", _load())
    medians = measure(args.runs)
    print("load average after: ", _load())
    for label, seconds in medians.items():
        print(f"{label:<16} {seconds * 1000:7.1f} ms (median of {args.runs})")
    floor = medians["import trio"]
    print(
        f"import toolexec vs import trio: {medians['import toolexec'] / floor:.2f}x "
        f"(target <= {IMPORT_TARGET}x)"
    )
    print(
        f"toolexec --help vs import trio: {medians['toolexec --help'] / floor:.2f}x "
        f"(target <= {HELP_TARGET}x)"
    )


if __name__ == "__main__":
    main()

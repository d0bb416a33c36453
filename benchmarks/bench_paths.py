"""How path resolution scales with depth: the time per component, 100 to 4,000 levels deep.

Run: ``python benchmarks/bench_paths.py [--quick]``

Builds one chain of directories ``d/d/.../d`` 4,000 levels deep, and
``ok.txt`` at the root, then resolves two kinds of path through
``Workspace.resolve_sync`` at each depth N:

- ``down``: ``d/`` N times (N components);
- ``down+up``: ``d/`` N times, ``../`` N times, then ``ok.txt``
  (2N + 1 components): every ``..`` climbs back to a directory the walk
  left long ago, the shape whose cost once grew with N squared.

Prints the median time per resolution and per component. Resolution is
linear in the depth when the per-component column stays flat as N grows.

The workspace refuses paths over 256 components or 4,096 bytes; the
benchmark lifts those limits (``max_path_depth``, ``max_path_bytes``) to
measure the walk itself. Under a toolexec that has no such limits, the
plain constructor is used.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from toolexec import Workspace

DEPTHS = (100, 250, 500, 1000, 2000, 3000, 4000)
#: Stop repeating a measurement once this many seconds went into it.
BUDGET = 2.0


def build_chain(root: Path, levels: int) -> None:
    """``d/d/.../d``, ``levels`` deep, under ``root`` (opened level by level)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    (root / "ok.txt").write_text("ok\n")


def open_workspace(root: Path, levels: int) -> Workspace:
    """A workspace whose path limits let ``levels``-deep paths through."""
    limits = {"max_path_depth": 2 * levels + 1, "max_path_bytes": 6 * levels + 16}
    try:
        return Workspace(root, **limits)
    except TypeError:  # a toolexec without path limits
        return Workspace(root)


def median_seconds(ws: Workspace, path: str, expected: str, repeats: int) -> float:
    """The median time of ``ws.resolve_sync(path)`` over up to ``repeats`` runs."""
    times: list[float] = []
    spent = 0.0
    while len(times) < repeats and (not times or spent < BUDGET):
        start = time.perf_counter()
        got = ws.resolve_sync(path)
        took = time.perf_counter() - start
        assert got == expected, (got, expected)
        times.append(took)
        spent += took
    return statistics.median(times)


def main(repeats: int, depths: tuple[int, ...]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        build_chain(root, max(depths))
        try:
            ws = open_workspace(root, max(depths))
            print(
                f"{'depth':>6} {'path':>8} {'components':>10} {'ms/call':>10} {'us/component':>13}"
            )
            for depth in depths:
                shapes = {
                    "down": ("d/" * depth, "/".join(["d"] * depth)),
                    "down+up": ("d/" * depth + "../" * depth + "ok.txt", "ok.txt"),
                }
                for shape, (path, expected) in shapes.items():
                    components = len([p for p in path.split("/") if p])
                    seconds = median_seconds(ws, path, expected, repeats)
                    print(
                        f"{depth:>6} {shape:>8} {components:>10} {seconds * 1e3:>10.2f} "
                        f"{seconds / components * 1e6:>13.2f}",
                        flush=True,
                    )
        finally:  # shutil.rmtree recurses per level: remove the chain with rm
            subprocess.run(["rm", "-rf", str(root / "d")], check=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 9")
    parser.add_argument(
        "--max-depth", type=int, default=max(DEPTHS), help="the deepest N measured (4000)"
    )
    args = parser.parse_args()
    main(3 if args.quick else 9, tuple(d for d in DEPTHS if d <= args.max_depth))

"""Per-call cost of the ``remote`` and ``ray`` backends against the host, in one run.

    python benchmarks/bench_scaleout.py [--quick]

For batches of N = 1, 100 and 1000 no-op calls, in one process: the host
(the call runs in this trio run), a ``toolexec serve --http`` worker on
127.0.0.1 through ``RemoteBackend`` (``bench_remote.py``), and a local
two-CPU Ray cluster through ``RayBackend`` (``bench_ray.py``). The three
are measured one after the other for each N, and the host twice (once
beside each), so that load changes during the run hit them alike; the
ratios are the figures to read. The 50 ms CPU-bound comparison is in
``bench_ray.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

import bench_ray
import bench_remote

SIZES = (1, 100, 1000)


def main(repeats: int) -> None:
    print("toolexec backends vs host: microseconds per no-op call, one process")
    print(f"load average before: {bench_ray.loadavg()}")
    bench_ray.start_ray()
    rows = []
    with bench_remote.remote_worker() as url:
        for n in SIZES:
            samples = bench_remote.CALLS_PER_SAMPLE if n > 1 else bench_remote.CALLS_PER_SAMPLE // 4
            host, remote = [], []
            for _ in range(repeats):
                host.append(bench_remote.measure_host(n, samples))
                remote.append(bench_remote.measure_remote(n, url, samples))
            on_ray = trio.run(bench_ray.per_call, n, repeats)
            host.append(on_ray["host"] * 1e6)
            rows.append(
                (n, statistics.median(host), statistics.median(remote), on_ray["ray"] * 1e6)
            )
    print()
    print(
        f"{'N':>6}{'host us':>10}{'remote us':>12}{'remote/host':>13}{'ray us':>10}{'ray/host':>10}"
    )
    for n, host_us, remote_us, ray_us in rows:
        print(
            f"{n:>6}{host_us:>10.0f}{remote_us:>12.0f}{remote_us / host_us:>12.1f}x"
            f"{ray_us:>10.0f}{ray_us / host_us:>9.1f}x"
        )
    print(f"load average after: {bench_ray.loadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 repeats instead of 3")
    main(2 if parser.parse_args().quick else 3)

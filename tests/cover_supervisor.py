"""Run the reaper's supervisor under coverage, so the suite's figure includes it.

The supervisor program (``toolexec/_supervisor.py``) only runs in a child
process, and its workers in children of that. When the suite measures
coverage, ``conftest.py`` has the reaper start it through this script::

    python cover_supervisor.py DATA_FILE PROGRAM ARGS...

(``test_sandbox_parts.py`` runs the subprocess sandbox's launcher the same way.)

The supervisor, and each worker it forks (coverage restarts in the child),
save their data next to the suite's (``DATA_FILE`` plus a suffix) when they
exit, including through ``os._exit``; pytest-cov combines every such file
with its own when the run ends, and ``conftest.py`` makes them exit before.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import NoReturn

import coverage


def _start(data_file: str, package: str) -> coverage.Coverage:
    # The package by directory: the program runs as __main__, not by its module name.
    cov = coverage.Coverage(data_file=data_file, data_suffix=True, source=[package], branch=True)
    cov.start()
    return cov


def main() -> None:
    data_file, program, *args = sys.argv[1:]
    package = os.path.dirname(program)
    measuring = [_start(data_file, package)]

    def restart_in_child() -> None:
        measuring[0].stop()  # the parent's data is the parent's to save
        measuring[0] = _start(data_file, package)

    def save() -> None:
        measuring[0].stop()
        measuring[0].save()

    real_exit = os._exit

    def exit_saving(status: int) -> NoReturn:
        save()
        real_exit(status)

    os.register_at_fork(after_in_child=restart_in_child)
    os._exit = exit_saving
    sys.argv = [program, *args]
    try:
        runpy.run_path(program, run_name="__main__")
    finally:
        save()


if __name__ == "__main__":
    main()

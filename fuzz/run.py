"""Run one harness under libFuzzer (atheris).

    python fuzz/run.py NAME [libFuzzer flags] [corpus dirs]


``NAME`` is a harness file's name without ``fuzz_`` and ``.py`` (for example
``formats``). toolexec is instrumented for coverage; libFuzzer's flags and
corpus directories pass through (see fuzz/README.md).
"""

from __future__ import annotations

import importlib
import os
import sys

import atheris

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} NAME [libFuzzer flags] [corpus dirs]")
    name = sys.argv[1]
    if not os.path.exists(os.path.join(HERE, f"fuzz_{name}.py")):
        known = sorted(f[5:-3] for f in os.listdir(HERE) if f.startswith("fuzz_"))
        sys.exit(f"no harness fuzz/fuzz_{name}.py; harnesses: {', '.join(known)}")
    sys.path.insert(0, HERE)
    with atheris.instrument_imports(include=["toolexec"]):
        harness = importlib.import_module(f"fuzz_{name}")
    atheris.Setup([sys.argv[0], *sys.argv[2:]], harness.test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

"""Run the ``toolexec`` command: ``python -m toolexec exec RESPONSE.json --workspace DIR``."""

from __future__ import annotations

import sys

from ._cli._main import main

if __name__ == "__main__":
    sys.exit(main())

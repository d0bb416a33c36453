"""Hypothesis profiles for the stress suite.

``stress-short`` runs with the normal test command; ``stress-long`` runs
thousands of examples and is chosen by setting ``STRESS=long``. The profiles
are applied per test (``stress_settings()``), not loaded globally, so the
fast property tests under ``tests/`` keep their own settings.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# The session fixture that starts the reaper's supervisor under coverage, in
# force for stress/ as for tests/: a worker process whose first file is a
# stress file would otherwise start the supervisor unmeasured, for the rest of
# its session. And the throwaway PostgreSQL cluster (tests/_pg.py), for the
# PostgreSQL half of the crash test.
from conftest import _measured_supervisor, pg_cluster  # noqa: F401

_COMMON = settings(
    deadline=None,  # one example is a whole trio run; wall time varies
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)

settings.register_profile("stress-short", _COMMON, max_examples=60)
settings.register_profile("stress-long", _COMMON, max_examples=5000)


def stress_profile() -> str:
    """Name the profile this run uses: ``stress-long`` when ``STRESS=long``."""
    return "stress-long" if os.environ.get("STRESS", "").lower() == "long" else "stress-short"

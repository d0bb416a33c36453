"""The PostgreSQL journal: a real server started by the tests (``_pg``), several hosts on it.

Every test here gets a fresh database in a throwaway cluster that this test
process starts (as ``nobody`` when it runs as root, which PostgreSQL
refuses) and stops; where the machine has no server binaries or no psycopg,
the tests skip and say what is missing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import _pg

if TYPE_CHECKING:
    import pytest


def test_the_cluster_serves_a_fresh_database_per_test(pg_cluster: _pg.Cluster, pg_dsn: str) -> None:
    import psycopg

    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            "SELECT current_database(), current_setting('listen_addresses')"
        ).fetchone()
    assert row is not None
    assert row[0] != "postgres"
    assert row[1] == ""  # a unix socket in the cluster's folder, no TCP port
    assert pg_cluster.create_database() != pg_dsn
    server_uid = (pg_cluster.folder / "data").stat().st_uid
    assert server_uid != 0 or os.geteuid() != 0  # never root, which PostgreSQL refuses


def test_a_machine_without_server_binaries_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pg, "server_bin", lambda: None)
    reason = _pg.missing()
    assert reason is not None
    assert "initdb" in reason
    assert "apt-get install postgresql" in reason

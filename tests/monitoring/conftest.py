"""The monitoring store's backends: SQLite always, PostgreSQL when its server binaries and psycopg are installed."""

from __future__ import annotations

import importlib.util
import uuid

import pytest

from ._stream import postgres_binaries, postgres_server


@pytest.fixture(scope="session")
def postgres_url():
    """One throwaway PostgreSQL server for the session (skips when there is none to start)."""
    if postgres_binaries() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl; CI installs the Debian package 'postgresql'): "
                    "the SQLite tests ran")
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is not installed (pip install 'monai-unc[monitor]'): the SQLite tests ran")
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A fresh, empty store of each backend (PostgreSQL: a new schema of the session's server)."""
    if request.param == "sqlite":
        return str(tmp_path / "monitor.db")
    import psycopg

    base = request.getfixturevalue("postgres_url")
    schema = "t" + uuid.uuid4().hex[:12]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{base}?options=-csearch_path%3D{schema}"

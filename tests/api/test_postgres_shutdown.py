"""A PostgreSQL "smart" shutdown (SIGTERM to the postmaster) does not leave the service half
serving: readiness says so, reads answer 503 instead of coming from connections that happen to
survive, every pool lets go so the server can actually stop, and all recovers once it is back."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from marketplace.storage.migrations import migrate_dsn
from marketplace.storage.pool import ServerState, probe_server
from marketplace_devstack.embedded.postgres import EmbeddedPostgres
from tests.conftest import Servers, make_settings, new_user
from tests.support.waiting import eventually


@pytest.fixture
def own_postgres() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this test's own: the session's shared one is never stopped."""
    data_dir = Path(tempfile.mkdtemp(prefix="mkt-pg-shutdown-", dir="/tmp"))
    os.chmod(data_dir, 0o755)
    server = EmbeddedPostgres(data_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


async def test_smart_shutdown_is_reported_released_and_recovered(
    aiohttp_client: Any,
    servers: Servers,
    module_namespace: str,
    own_postgres: EmbeddedPostgres,
) -> None:
    from marketplace.http.app import create_app

    await migrate_dsn(own_postgres.dsn)
    settings = make_settings(
        servers,
        database_url=own_postgres.dsn,
        ray_namespace=module_namespace,
        readiness_cache_ms=0,
    )
    client = await aiohttp_client(create_app(settings))
    user = new_user()
    # Readiness makes the shard actors' pools connect too: every process holds connections.
    # (The shard actors of this namespace are new: starting them may outlast one check.)
    await eventually(
        lambda: _status_is(client, "/v1/health/ready", 200), within=60, interval=0.1, what="ready"
    )
    assert (await client.get("/v1/projects")).status == 200
    assert (await client.get("/v1/api-keys", headers=user.headers)).status == 200

    assert own_postgres.pid is not None
    os.kill(own_postgres.pid, signal.SIGTERM)  # smart shutdown: sessions may go on, new ones not
    await eventually(
        lambda: _probe_is(own_postgres, ServerState.SHUTTING_DOWN),
        within=5,
        interval=0.1,
        what="the server to refuse connections",
    )

    resp = await client.get("/v1/health/ready")
    assert resp.status == 503
    body = await resp.json()
    assert body["error"] == "service_unavailable"
    assert body["checks"]["postgres"] in ("shuttingDown", "unreachable")
    assert "127.0.0.1" not in body["message"] and str(own_postgres.port) not in body["message"]
    assert resp.headers["Retry-After"]
    # Reads do not come from the connections that would still work: the pool let them go.
    for path, headers in (("/v1/projects", {}), ("/v1/api-keys", user.headers)):
        resp = await client.get(path, headers=headers)
        assert resp.status == 503, (path, await resp.text())
        assert (await resp.json())["error"] == "service_unavailable"

    # Every pool (this frontend's and each shard actor's) closed its idle connections and the
    # dedicated ones (the event relay's) were closed, so the server finished its shutdown
    # instead of waiting for them forever.
    await eventually(
        lambda: _exited(own_postgres),
        within=15,
        interval=0.1,
        what="postgres to exit (not wait for our connections)",
    )

    own_postgres.start()
    # Once it is back, everything recovers without a restart.
    await eventually(
        lambda: _status_is(client, "/v1/health/ready", 200), within=20, interval=0.1, what="ready"
    )
    assert (await client.get("/v1/projects")).status == 200
    assert (await client.get("/v1/api-keys", headers=user.headers)).status == 200


async def _probe_is(server: EmbeddedPostgres, state: ServerState) -> bool:
    return await probe_server(server.dsn) is state


async def _exited(server: EmbeddedPostgres) -> bool:
    return server.exit_status() is not None


async def _status_is(client: Any, path: str, status: int) -> bool:
    return bool((await client.get(path)).status == status)


def test_only_a_dsn_naming_one_server_is_probed() -> None:
    from marketplace.storage.pool import _probe_target

    assert _probe_target("postgresql://app:pw@10.0.0.5:6432/market") == (
        "10.0.0.5",
        6432,
        "app",
        "market",
    )
    assert _probe_target("postgresql://app@/market?host=/run/pg") == (
        "/run/pg/.s.PGSQL.5432",
        5432,
        "app",
        "market",
    )
    # Several hosts, no host (libpq's socket directory varies) or another scheme: not probed.
    for dsn in ("postgresql://app@h1,h2/market", "postgresql:///market", "mysql://h/db"):
        assert _probe_target(dsn) is None

"""Session fixtures: real PostgreSQL, Redis and Ray started by the suite itself.

Servers start once per session in a temporary directory; each API test gets a fresh app and a
database emptied with TRUNCATE (actor processes use their own connections, so transaction
rollback could not isolate them).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import ray
import redis as redis_sync
from aiohttp import web
from pydantic import SecretStr

from marketplace.auth import issue_session_token
from marketplace.config import Settings
from marketplace.http.server import JsonErrorsTestServer
from marketplace.storage.migrations import migrate_dsn
from marketplace_devstack.embedded.postgres import EmbeddedPostgres
from marketplace_devstack.embedded.redis import EmbeddedRedis
from tests.support.apps import app_routes, client, make_client  # noqa: F401  (fixtures)
from tests.support.smtp import smtp_server  # noqa: F401  (a fixture for every suite)

pytest_plugins = ["tests.support.completeness"]

# Under pytest-xdist (`--dist loadgroup`), a test file runs on one worker, so module-scoped
# fixtures (a module's app, chain deployment, Ray namespace) are built once. The files below run
# one at a time on a single worker: they start Ray clusters of their own (`ray start`) or whole
# `marketplace up` stacks and kill processes on purpose, and their timings assume one such test
# at a time. They were two groups that could run at once on the two workers; on a slower day of
# this 2-core machine an `up` starting beside a Ray head restarting from Redis kept the head
# past Ray's fixed 30 s node start-up wait (`ray start` failed, so did the head-loss tests). One
# group costs no wall time: the other worker runs the rest of the suite meanwhile.
HEAVY = "heavy-stacks"
SERIAL_GROUPS = {
    "tests/integration/multinode/": HEAVY,
    "tests/integration/verifier/test_two_node.py": HEAVY,
    # Only the files that start `marketplace up` (test_cli_data_dir.py and test_guardian.py
    # start none: each is a group of its own).
    "tests/integration/up/test_running.py": HEAVY,
    "tests/integration/up/test_supervision.py": HEAVY,
    "tests/integration/up/test_signals.py": HEAVY,
    "tests/integration/devnet/test_walkthrough.py": HEAVY,
}


def group_of(path: str) -> str:
    """The xdist group of a test file (its path relative to the root, in posix form)."""
    return next((g for prefix, g in SERIAL_GROUPS.items() if path.startswith(prefix)), path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup`, grouping by :func:`group_of` here and handing the serial groups out
    first.

    xdist (3.8) groups by a ``@group`` suffix that its worker hook appends to each marked item's
    node id through ``item._nodeid``, which pytest 9 no longer reads: no id carries the suffix,
    so every test was a work unit of its own (a file's tests spread over both workers, each
    building the module's fixtures; the two multinode tests each built a whole deployment, at the
    same time). The scheduler sees only node ids, so it derives the group from the id's path.

    xdist hands out its units by test count, most first: the serial groups (few tests, minutes
    each) would start near the end while the other worker ran out of work. Longest first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

    first = list(dict.fromkeys(SERIAL_GROUPS.values()))

    class FileGroupsSerialFirst(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope: str = super()._split_scope(nodeid)
            if scope != nodeid:  # a real `@group` suffix (a later xdist)
                return scope
            return group_of(nodeid.split("::", 1)[0])

        def _assign_work_unit(self, node: Any) -> None:
            for group in reversed(first):
                if group in self.workqueue:
                    self.workqueue.move_to_end(group, last=False)
            super()._assign_work_unit(node)

    return FileGroupsSerialFirst(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        item.add_marker(pytest.mark.xdist_group(group_of(item.path.relative_to(root).as_posix())))


JWT_SECRET = "test-session-secret-" + "x" * 24
SCHEDULER_SECRET = "test-scheduler-secret-" + "y" * 24
UNSUBSCRIBE_SECRET = "test-unsubscribe-secret-" + "z" * 24


@dataclass
class Servers:
    data_dir: Path
    postgres: EmbeddedPostgres
    redis: EmbeddedRedis

    @property
    def database_url(self) -> str:
        return self.postgres.dsn

    @property
    def redis_url(self) -> str:
        return self.redis.url


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    data_dir = Path(tempfile.mkdtemp(prefix="mkt-test-", dir="/tmp"))
    os.chmod(data_dir, 0o755)
    postgres = EmbeddedPostgres(data_dir)
    redis_server = EmbeddedRedis(data_dir)
    postgres.start()
    try:
        redis_server.start()
        asyncio.run(migrate_dsn(postgres.dsn))
        yield Servers(data_dir, postgres, redis_server)
    finally:
        redis_server.stop()
        postgres.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    temp_dir = tempfile.mkdtemp(prefix="mkt-ray-", dir="/tmp")
    ray.init(
        namespace="marketplace-test",
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=temp_dir,
        logging_level=logging.WARNING,
    )
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def make_settings(servers: Servers, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": servers.data_dir,
        "database_url": servers.database_url,
        "redis_url": servers.redis_url,
        "ray_namespace": "marketplace-test",
        "jwt_secret": SecretStr(JWT_SECRET),
        "scheduler_secret": SecretStr(SCHEDULER_SECRET),
        "notification_unsubscribe_secret": SecretStr(UNSUBSCRIBE_SECRET),
        "project_shards": 2,
        "rate_limit_default": "10000/60",
        # Tests send many bad credentials on purpose; the limit itself has its own tests.
        "rate_limit_auth_failures": "10000/60",
        "log_json": False,
        # The notifications consumer takes a database-wide lock and reads every test's events:
        # only the tests about it start one (tests/integration/notifications/).
        "notification_pipeline_enabled": False,
        # Likewise the leaderboards consumer: its tests start one or drive it directly
        # (tests/api/leaderboards/).
        "leaderboard_consumer_enabled": False,
        # Freshness as of each request: tests change the lag and read it back at once.
        "leaderboard_freshness_cache_ms": 0,
        # Nor do apps start `notifications` or `verifier` job workers: detached, they would
        # outlive the app and run other tests' jobs with the settings they were created with
        # (sender, chain). Tests of those queues run a worker themselves.
        "jobs_workers": {"notifications": 0, "verifier": 0},
        # A test app's context that has not stopped after 10 s is stuck (they normally stop
        # within a second or two): abandon it (the log names it) rather than wait 30 s.
        "context_stop_seconds": 10.0,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return make_settings(servers)


TRUNCATE_ALL = """
SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')
FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations'
"""


BLOCKERS = """
SELECT pid, application_name, state, now() - xact_start AS open_for, left(query, 200) AS query
FROM pg_stat_activity WHERE pid = any(pg_blocking_pids($1))
"""
# A TRUNCATE waits for every transaction on the tables; longer than this means a leftover.
RESET_PATIENCE_SECONDS = 15.0


async def reset_state(servers: Servers) -> None:
    conn = await asyncpg.connect(servers.database_url)
    try:
        tables = await conn.fetchval(TRUNCATE_ALL)
        if tables:
            truncate = asyncio.ensure_future(
                conn.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
            )
            done, _ = await asyncio.wait({truncate}, timeout=RESET_PATIENCE_SECONDS)
            if not done:
                await _end_blockers(servers, conn.get_server_pid())
            await truncate
    finally:
        await conn.close()
    redis_client = redis_sync.Redis.from_url(servers.redis_url)
    redis_client.flushdb()
    redis_client.close()


async def _end_blockers(servers: Servers, pid: int) -> None:
    """A test's reset must not wait on what an earlier test left holding a lock (an actor's
    transaction, say): log it and end its connection."""
    other = await asyncpg.connect(servers.database_url)
    try:
        for row in await other.fetch(BLOCKERS, pid):
            logging.getLogger("tests").warning(
                "reset_state: ended a connection that blocked the TRUNCATE: %s", dict(row)
            )
            await other.execute("SELECT pg_terminate_backend($1)", row["pid"])
    finally:
        await other.close()


@pytest.fixture
async def clean_state(servers: Servers) -> None:
    await reset_state(servers)


@pytest.fixture
def aiohttp_client(aiohttp_client: Any) -> Callable[..., Awaitable[Any]]:
    """pytest-aiohttp's client, serving apps with our request handler (as `marketplace serve`
    does), so errors of aiohttp's own HTTP parser come back as JSON here too."""

    async def client_for(app_or_server: Any, **kwargs: Any) -> Any:
        if isinstance(app_or_server, web.Application):
            app_or_server = JsonErrorsTestServer(app_or_server)
        return await aiohttp_client(app_or_server, **kwargs)

    return client_for


def make_token(
    user_id: uuid.UUID | str | None = None,
    *,
    email_verified: bool = True,
    ttl: int = 600,
    secret: str = JWT_SECRET,
    **extra_claims: Any,
) -> str:
    import jwt

    now = int(time.time())
    if not extra_claims:
        return issue_session_token(
            secret,
            uuid.UUID(str(user_id or uuid.uuid4())),
            email_verified=email_verified,
            ttl_seconds=ttl,
            now=now,
        )
    claims = {
        "sub": str(user_id or uuid.uuid4()),
        "email_verified": email_verified,
        "iat": now,
        "exp": now + ttl,
        **extra_claims,
    }
    return jwt.encode(claims, secret, algorithm="HS256")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class User:
    user_id: uuid.UUID
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.token)


def new_user(*, email_verified: bool = True) -> User:
    user_id = uuid.uuid4()
    return User(user_id, make_token(user_id, email_verified=email_verified))


def kill_namespace_actors(namespace: str) -> None:
    """Stop the detached actors of a test-only Ray namespace (they would outlive the test)."""
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == namespace:
            ray.kill(ray.get_actor(entry["name"], namespace=namespace), no_restart=True)


@pytest.fixture(scope="module")
def module_namespace(ray_cluster: None, request: pytest.FixtureRequest) -> Iterator[str]:
    """A Ray namespace of this test module's own, so its actors get this module's settings
    (named actors keep the settings they were created with)."""
    namespace = f"test-{request.module.__name__.rsplit('.', 1)[-1]}-{uuid.uuid4().hex[:8]}"
    yield namespace
    kill_namespace_actors(namespace)

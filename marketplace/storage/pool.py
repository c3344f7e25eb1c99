"""The asyncpg pool every component shares within one process.

The pool lets go of a server that is shutting down. A PostgreSQL "smart" shutdown (``SIGTERM``
to the postmaster, ``pg_ctl stop -m smart``) refuses new connections but lets existing sessions
run until their clients leave, and tells them nothing: a pool holding idle connections would go
on serving from them indefinitely while every new connection fails, and the server would never
finish stopping. So each pool watches its server: every :data:`PROBE_INTERVAL_SECONDS` it sends
a bare startup packet (answered before authentication: an authentication request means the
server accepts connections, SQLSTATE 57P03 means it refuses them), and a new pool connection
refused with 57P03 counts the same. While the server refuses, the pool expires its connections
(those in use close when released, so running requests finish) and closes the idle ones; requests
then fail fast with 503 and the server can complete its shutdown. Once it accepts connections
again the pool reconnects on demand. Dedicated connections from :func:`connect` (a LISTEN, a
session-level lock) are terminated then too; their owners reconnect. One :class:`ServerWatch` per
event loop and server probes for all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import getpass
import json
import logging
import os
import re
import struct
import weakref
from collections.abc import Mapping
from typing import Any, TypeAlias
from urllib.parse import parse_qs, unquote, urlsplit

import asyncpg
from asyncpg.pool import PoolConnectionProxy

log = logging.getLogger(__name__)

# One connection, as asyncpg.connect() or pool.acquire() hands it out: what a transaction runs on.
Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
# Anything a single statement can run on: a connection, or the pool (which borrows one).
Conn: TypeAlias = "asyncpg.Pool[asyncpg.Record] | Connection"
# A row as the row -> model mappers read it: an asyncpg.Record straight from a query, or a plain
# mapping (a dict a caller assembled). Record is no Mapping, neither at runtime nor in its stubs.
Row: TypeAlias = "asyncpg.Record | Mapping[str, Any]"


async def fetch_one(conn: Conn, query: str, *args: Any) -> asyncpg.Record:
    """The row of a statement that always returns one (``INSERT ... RETURNING``, an aggregate)."""
    row = await conn.fetchrow(query, *args)
    if row is None:
        raise RuntimeError("statement returned no row")
    return row


# Stored JSON is validated on the way in (free-form objects are at most 32 levels deep), but a
# read must not fail because of what some older code or a manual edit stored: a value nested
# deeper than this is withheld (decoded as null, with a warning) instead of failing every read
# of its row. Far above any accepted value, far below what would strain a serializer.
STORED_JSON_MAX_DEPTH = 64
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_nesting_depth(text: str) -> int:
    """Deepest nesting of arrays and objects in a JSON text (without recursion)."""
    depth = deepest = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def decode_stored_json(text: str) -> Any:
    # Counting brackets is a C-speed upper bound on the depth: the scan runs only when needed.
    if (
        text.count("[") + text.count("{") > STORED_JSON_MAX_DEPTH
        and json_nesting_depth(text) > STORED_JSON_MAX_DEPTH
    ):
        log.warning(
            "stored JSON value nested deeper than %d levels withheld", STORED_JSON_MAX_DEPTH
        )
        return None
    return json.loads(text)


async def _init_connection(conn: asyncpg.Connection) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=json.dumps, decoder=decode_stored_json, schema="pg_catalog"
        )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool reset without asyncpg's default reset query (one extra round trip per release).

    Safe because pooled connections never carry session state: locks are transaction-scoped
    (``pg_advisory_xact_lock``), nothing uses LISTEN, SET or cursors outside a transaction, and
    asyncpg itself rolls back a transaction left open before calling this.
    """


# How often each pool asks its server whether it still accepts connections.
PROBE_INTERVAL_SECONDS = 2.0
PROBE_TIMEOUT_SECONDS = 1.0
_PROTOCOL_3_0 = 196608


class ServerState(enum.StrEnum):
    OK = "ok"  # accepts connections
    SHUTTING_DOWN = "shuttingDown"  # refuses new connections: shutting down
    REFUSING = "refusing"  # refuses new connections otherwise (starting up, in recovery)
    UNREACHABLE = "unreachable"  # no answer at all

    @property
    def refuses(self) -> bool:
        return self in (ServerState.SHUTTING_DOWN, ServerState.REFUSING)


def _probe_target(dsn: str) -> tuple[str, int, str, str] | None:
    """(host or socket path, port, user, database) of a single-host DSN, or None."""
    try:
        parts = urlsplit(dsn)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        host = unquote(parts.hostname or "") or query.get("host", "")
        port = parts.port or int(query.get("port", "5432"))
    except ValueError:
        return None
    if parts.scheme not in ("postgres", "postgresql") or "," in (parts.netloc + host):
        return None
    user = unquote(parts.username or "") or query.get("user") or os.environ.get("PGUSER", "")
    user = user or getpass.getuser()
    database = unquote(parts.path.lstrip("/")) or query.get("dbname") or user
    if not host:
        return None  # libpq's default socket directory differs between builds: do not guess
    if host.startswith("/"):
        host = f"{host}/.s.PGSQL.{port}"
    return host, port, user, database


async def probe_server(dsn: str) -> ServerState | None:
    """Whether the server accepts connections, from its answer to a bare startup packet.

    Costs the server a backend start but no authentication: the probe hangs up when asked for
    credentials (which PostgreSQL does not log). None when the DSN names no single server.
    """
    target = _probe_target(dsn)
    if target is None:
        return None
    host, port, user, database = target
    params = b"".join(
        key + b"\0" + value.encode() + b"\0"
        for key, value in ((b"user", user), (b"database", database))
    )
    packet = struct.pack("!ii", 8 + len(params) + 1, _PROTOCOL_3_0) + params + b"\0"
    writer = None
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
            if host.startswith("/"):
                reader, writer = await asyncio.open_unix_connection(host)
            else:
                reader, writer = await asyncio.open_connection(host, port)
            writer.write(packet)
            kind = await reader.readexactly(1)
            if kind != b"E":
                return ServerState.OK  # an authentication request (or protocol negotiation)
            (length,) = struct.unpack("!i", await reader.readexactly(4))
            fields = await reader.readexactly(min(length - 4, 8192))
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return ServerState.UNREACHABLE
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    error = {f[:1]: f[1:].decode(errors="replace") for f in fields.split(b"\0") if f}
    if error.get(b"C") != "57P03":
        return ServerState.OK  # e.g. no pg_hba entry for this probe: the server is up
    if "shutting down" in error.get(b"M", ""):
        return ServerState.SHUTTING_DOWN
    return ServerState.REFUSING


def _refusal(exc: asyncpg.CannotConnectNowError) -> ServerState:
    return ServerState.SHUTTING_DOWN if "shutting down" in str(exc) else ServerState.REFUSING


class ServerWatch:
    """Everything this process holds open to one server, and one probe loop for all of it.

    Pools let go of their connections while the server refuses new ones (see the module doc);
    dedicated connections (a LISTEN, a session-level lock) are terminated, and their owners'
    reconnect loops take it from there. The probe runs only while something is registered.
    """

    def __init__(self, dsn: str, interval: float) -> None:
        self.dsn = dsn
        self.interval = interval
        self.state = ServerState.OK
        self.pools: weakref.WeakSet[Pool] = weakref.WeakSet()
        self.connections: weakref.WeakSet[asyncpg.Connection] = weakref.WeakSet()
        self._task: asyncio.Task[None] | None = None

    def add_pool(self, pool: Pool) -> None:
        self.pools.add(pool)
        self._ensure_running()

    def add_connection(self, conn: asyncpg.Connection) -> None:
        self.connections.add(conn)
        conn.add_termination_listener(self._connection_closed)
        self._ensure_running()

    def discard_pool(self, pool: Pool) -> None:
        self.pools.discard(pool)
        self._stop_if_idle()

    def _connection_closed(self, conn: Connection) -> None:
        if isinstance(conn, asyncpg.Connection):
            self.connections.discard(conn)
        self._stop_if_idle()

    def _ensure_running(self) -> None:
        if self._task is None and self.interval > 0 and _probe_target(self.dsn) is not None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def _stop_if_idle(self) -> None:
        if not self.pools and not self.connections and self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            state = await probe_server(self.dsn)
            if state is not None:
                self.observe(state)

    def observe(self, state: ServerState) -> None:
        """Record what the server said; while it refuses, let go of every connection to it."""
        if state is not self.state:
            log.log(
                logging.INFO if state is ServerState.OK else logging.WARNING,
                "postgres server %s (was %s)",
                state.value,
                self.state.value,
                extra={"server_state": state.value},
            )
            self.state = state
        for pool in list(self.pools):
            pool.observe(state)
        if state.refuses:
            dedicated = [conn for conn in self.connections if not conn.is_closed()]
            for conn in dedicated:
                conn.terminate()
            if dedicated:
                log.warning(
                    "closed %d dedicated postgres connections: server refuses", len(dedicated)
                )


_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, ServerWatch]] = (
    weakref.WeakKeyDictionary()
)


def server_watch(dsn: str, interval: float = PROBE_INTERVAL_SECONDS) -> ServerWatch:
    """The watch of ``dsn`` in the running event loop (tasks belong to one loop)."""
    watches = _WATCHES.setdefault(asyncio.get_running_loop(), {})
    watch = watches.get(dsn)
    if watch is None:
        watch = watches[dsn] = ServerWatch(dsn, interval)
    return watch


def observe_server(dsn: str, state: ServerState) -> None:
    """Report what ``dsn``'s server answered (e.g. to a readiness probe) to its watch."""
    server_watch(dsn).observe(state)


class Pool(asyncpg.Pool):
    """asyncpg's pool that lets go of a server refusing connections (see the module doc)."""

    def __init__(self, dsn: str, **options: Any) -> None:
        super().__init__(dsn, connect=self._connect_watched, **options)
        self.dsn = dsn
        self.server_state = ServerState.OK
        self._watch: ServerWatch | None = None
        self._letting_go: asyncio.Task[None] | None = None

    async def _connect_watched(self, *args: Any, **kwargs: Any) -> asyncpg.Connection:
        try:
            return await asyncpg.connect(*args, **kwargs)
        except asyncpg.CannotConnectNowError as exc:
            (self._watch or server_watch(self.dsn)).observe(_refusal(exc))
            raise

    def observe(self, state: ServerState) -> None:
        """While the server refuses, let go of the pool's connections."""
        self.server_state = state
        if state.refuses and self._letting_go is None and not self.is_closing():
            self._letting_go = asyncio.get_running_loop().create_task(self._let_go())

    async def _let_go(self) -> None:
        try:
            await self.expire_connections()  # connections in use close when released
            closed = 0
            # asyncpg has no public way to close just the idle connections: its holders do (the
            # smart-shutdown test fails if a new asyncpg version moves them).
            holders: list[Any] = getattr(self, "_holders", [])
            for holder in holders:
                if holder.is_connected() and holder.is_idle():
                    holder.terminate()
                    closed += 1
            if closed:
                log.warning("closed %d idle postgres connections: server refuses", closed)
        finally:
            self._letting_go = None

    def start_watch(self, interval: float = PROBE_INTERVAL_SECONDS) -> None:
        self._watch = server_watch(self.dsn, interval)
        self._watch.add_pool(self)

    def _stop_watch(self) -> None:
        if self._watch is not None:
            self._watch.discard_pool(self)
            self._watch = None
        if self._letting_go is not None:
            self._letting_go.cancel()

    async def close(self) -> None:
        self._stop_watch()
        await super().close()

    def terminate(self) -> None:
        self._stop_watch()
        super().terminate()


async def create_pool(
    dsn: str,
    *,
    min_size: int = 2,
    max_size: int = 20,
    probe_interval: float = PROBE_INTERVAL_SECONDS,
) -> Pool:
    pool = Pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        max_queries=50_000,
        max_inactive_connection_lifetime=300.0,
        setup=None,
        init=_init_connection,
        reset=_keep_session,
        loop=None,
        connection_class=asyncpg.Connection,
        record_class=asyncpg.Record,
        # A statement cache keyed by text is safe here: the schema only changes through
        # migrations, which run before any pool serves requests.
        command_timeout=30,
    )
    await pool
    pool.start_watch(probe_interval)
    return pool


async def connect(dsn: str, *, application_name: str | None = None) -> asyncpg.Connection:
    """A dedicated connection (outside any pool), terminated while the server refuses new ones:
    whoever holds it must expect it to close and reconnect. ``application_name`` shows in
    ``pg_stat_activity`` (for a lock holder: which process holds it)."""
    watch = server_watch(dsn)
    server_settings = {"application_name": application_name} if application_name else None
    try:
        conn = await asyncpg.connect(dsn, server_settings=server_settings)
    except asyncpg.CannotConnectNowError as exc:
        watch.observe(_refusal(exc))
        raise
    await _init_connection(conn)
    watch.add_connection(conn)
    return conn

"""Connects to Ray and hands out named actors; the only module that calls ``ray.init``.

Local mode (no ``MARKETPLACE_RAY_ADDRESS``) starts a private Ray runtime with its files under a
short temporary directory, listening on loopback only and requiring Ray's token authentication
(a random token held in this process's environment, which Ray's processes inherit); ``auto`` or
``ray://host:port`` join an existing cluster, which the operator protects (docs/architecture.md,
"Supervision"). Actor calls from the frontend go through :meth:`ActorRuntime.call`, which bounds
them with a timeout, records their latency and turns Ray failures into 503s while letting domain
errors raised inside the actor through unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import logging
import os
import secrets
import shutil
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import ray
from ray._private import ray_constants
from ray._private.authentication.authentication_utils import is_token_auth_enabled
from ray._raylet import NodeID
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from marketplace.actors.options import ActorSpec
from marketplace.actors.ray_env import RAY_CLUSTERS_ENV
from marketplace.actors.settings import ActorSettings
from marketplace.config import Settings
from marketplace.errors import MarketplaceError, ServiceUnavailable
from marketplace.metrics import ACTOR_CALL_LATENCY

log = logging.getLogger(__name__)
LOOPBACK = "127.0.0.1"
# The address of this frontend's own Ray node (deploy/docker/marketplace-frontend.sh).
NODE_IP_ENV = "RAY_NODE_IP"
PROBE_INTERVAL_SECONDS = 2.0
PROBE_TIMEOUT_SECONDS = 2.0
# Well inside Ray's own limit (gcs_rpc_server_reconnect_timeout_s, 60 s), after which a driver
# that cannot reach its GCS exits the whole process.
PROBE_FAILURES_BEFORE_RECONNECT = 3
# How long a driver waits for its GCS before Ray ends the process: Ray's setting, which the
# deployments raise to 600 s on every node (deploy/README.md, "GCS fault tolerance").
GCS_RECONNECT_TIMEOUT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
GCS_RECONNECT_TIMEOUT_DEFAULT_SECONDS = 60.0
RECONNECT_BACKOFF_SECONDS = (1.0, 30.0)
RECONNECT_RETRY_AFTER_SECONDS = 5
RECONNECTING = "the actor runtime is reconnecting; retry shortly"
# Pauses between the attempts of ``ShardRouter.run_idempotent`` after the shard died or was
# unreachable mid-call. Ray restarts a killed actor in about 0.5-1.5 s; together these wait about
# 5 s, which leaves room for a slow restart on a loaded machine before the caller gets its 503.
RESTART_RETRY_DELAYS = (0.1, 0.2, 0.4, 0.8, 1.6, 2.0)


class Probe(enum.Enum):
    """What one look at this process's Ray connection found."""

    OK = "ok"
    # The GCS did not answer (the head is away, restarting, or unreachable).
    GCS_UNREACHABLE = "gcs_unreachable"
    # The GCS answered that this driver's node is dead.
    NODE_DEAD = "node_dead"


class ActorStarting(ServiceUnavailable):
    """The actor's process did not start within ``actor_start_timeout_seconds``; nothing was
    sent to it."""


class ActorRestarting(ServiceUnavailable):
    """The actor died or could not be reached during the call (Ray restarts it). The call may or
    may not have taken effect, so only a call that is safe to repeat may be sent again."""


def local_runtime_options() -> dict[str, Any]:
    """Environment and ``ray.init`` arguments that keep a private runtime to this machine.

    Node IP 127.0.0.1, so every gRPC server, agent and worker binds to loopback. Ray replaces a
    loopback node IP with the machine's external address while it believes clusters are enabled
    (``ray._private.services.get_node_ip_address``), hence the flag. Ray's daemons and workers
    start with our environment, so what is set here reaches them too.
    """
    os.environ[RAY_CLUSTERS_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    # The driver read its authentication mode when Ray was imported; its daemons must agree.
    if is_token_auth_enabled():
        os.environ["RAY_AUTH_MODE"] = "token"
        if not os.environ.get("RAY_AUTH_TOKEN"):
            os.environ["RAY_AUTH_TOKEN"] = secrets.token_urlsafe(32)
    else:
        if os.environ.get("RAY_AUTH_MODE") == "token":
            log.warning("ray was imported before token authentication was configured; it is off")
        os.environ["RAY_AUTH_MODE"] = "disabled"
    return {"_node_ip_address": LOOPBACK}


class ActorRuntime:
    """This process's connection to Ray, and the actors it uses.

    When this runtime made the connection (``ray.init``), :meth:`supervise` watches it: if the Ray
    runtime is lost (its GCS or this node's raylet stops answering, or a private runtime's head
    process dies), actor calls fail fast with 503 while a background thread shuts the old
    connection down and connects again (a private runtime is started afresh), with backoff, and
    re-creates every actor this process had asked for (detached actors that survived a head
    restart under GCS fault tolerance are found again by name). Nothing here touches
    Postgres-only reads.

    While only the GCS is away (the head restarting) and this node's raylet still answers, the
    connection is kept: calls to running actors go straight to them, and the driver's GCS client
    reconnects by itself once a head with the same GCS store is back (GCS fault tolerance).

    :meth:`lost_for` says how long the connection has been unusable (0 while it works); liveness
    fails once that exceeds ``ray_reconnect_grace_seconds``, so an orchestrator restarts a
    frontend that cannot rejoin by itself (its own raylet gave up on the head: docs/operations.md,
    "Losing the Ray head").
    """

    def __init__(self, settings: Settings, *, database_url: str) -> None:
        self.settings = settings
        self.namespace = settings.ray_namespace
        self.database_url = database_url
        self._actor_settings: ActorSettings | None = None
        self._handles: dict[str, Any] = {}
        # Every actor asked for, so a reconnect can bring each back (the indexer has no caller).
        self._wanted: dict[str, tuple[ActorSpec, tuple[Any, ...]]] = {}
        self._local_temp_dir: str | None = None
        self._owns_connection = False
        self._available = True
        # Monotonic time of the first failed probe of the current outage; None while it works.
        self._failing_since: float | None = None
        # One long-lived thread runs every (re)connect: a private runtime's head processes get a
        # parent-death signal tied to the thread that started them, so it must not come and go.
        self._connector: ThreadPoolExecutor | None = None
        # Actors this runtime created whose process may not run yet (``__ray_ready__`` not
        # answered): their first calls wait for the start under its own budget, so a worker
        # process starting slowly on a loaded machine is not taken for an actor that hangs.
        self._starting: dict[str, Future[Any]] = {}

    @property
    def available(self) -> bool:
        return self._available

    def lost_for(self) -> float:
        """Seconds since the Ray connection became unusable: its probes fail and this node's
        raylet is gone too (or the GCS calls the node dead), until it works again. 0 while it
        works, while only the GCS is away (the raylet waits for it), and for a connection this
        runtime does not supervise."""
        since = self._failing_since
        return 0.0 if since is None else time.monotonic() - since

    def connect(self) -> None:
        if ray.is_initialized():
            return
        address = self.settings.ray_address or None
        kwargs: dict[str, Any] = {
            "namespace": self.namespace,
            "include_dashboard": False,
            "log_to_driver": True,
            "logging_level": logging.WARNING,
        }
        if address is None:
            kwargs.update(local_runtime_options())
            # Ray puts Unix sockets under its temp dir; keep the path short (108-byte limit).
            self._local_temp_dir = tempfile.mkdtemp(prefix="mkt-ray-", dir="/tmp")
            kwargs["_temp_dir"] = self._local_temp_dir
            kwargs["num_cpus"] = max(2, os.cpu_count() or 2)
        elif os.environ.get(NODE_IP_ENV) and not address.startswith("ray://"):
            # The node this driver joins through (marketplace-frontend.sh started its raylet with
            # this address): where a machine runs several raylets, the one of this frontend.
            kwargs["_node_ip_address"] = os.environ[NODE_IP_ENV]
        ray.init(address=address, **kwargs)
        self._owns_connection = True
        log.info("connected to ray", extra={"ray_address": address or "local"})

    def _connector_thread(self) -> ThreadPoolExecutor:
        if self._connector is None:
            self._connector = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ray-connect")
        return self._connector

    async def connect_async(self) -> None:
        """:meth:`connect` on the connector thread (where reconnects happen too)."""
        await asyncio.get_running_loop().run_in_executor(self._connector_thread(), self.connect)

    def shutdown(self) -> None:
        if self._connector is not None:
            # On the connector thread, before it ends (and the kernel kills what it started).
            self._connector.submit(self._shutdown).result()
            self._connector.shutdown(wait=True)
            self._connector = None
        else:
            self._shutdown()

    def _shutdown(self, *, lost: bool = False) -> None:
        handles, self._handles = self._handles, {}
        if self._local_temp_dir is not None:
            if ray.is_initialized():
                if not lost:
                    # Our private runtime goes away with us: stop its actors first so none of
                    # them is left talking to dependencies that are being shut down.
                    for handle in handles.values():
                        with contextlib.suppress(Exception):
                            ray.kill(handle, no_restart=True)
                ray.shutdown()
            shutil.rmtree(self._local_temp_dir, ignore_errors=True)
            self._local_temp_dir = None
        elif lost and ray.is_initialized():
            ray.shutdown()

    async def supervise(self) -> None:
        """Watch the connection this runtime made; reconnect when the Ray runtime is lost."""
        if not self._owns_connection:
            return  # someone else's connection (tests share one): theirs to look after
        if ray.util.client.ray.is_connected():
            # Ray Client (`ray://`) has no local GCS client to probe and its own reconnect grace.
            log.info("ray client connection: not probed")
            return
        failures = 0
        waiting_since: float | None = None
        # Reconnect before Ray would end this process for having lost its GCS too long.
        wait_limit = gcs_reconnect_timeout() - (PROBE_FAILURES_BEFORE_RECONNECT + 2) * (
            PROBE_INTERVAL_SECONDS + PROBE_TIMEOUT_SECONDS
        )
        while True:
            await asyncio.sleep(PROBE_INTERVAL_SECONDS)
            probe = await self._probe()
            if probe is Probe.OK:
                if self._failing_since is not None or waiting_since is not None:
                    log.warning("ray runtime answers again")
                failures = 0
                waiting_since = None
                self._failing_since = None
                continue
            if (
                probe is Probe.GCS_UNREACHABLE
                and (waiting_since is None or time.monotonic() - waiting_since < wait_limit)
                and await self._raylet_answers()
            ):
                # The head is away but this node's raylet waits for it (GCS fault tolerance:
                # the restarted GCS reloads its tables), and calls to running actors still go
                # straight to them: keep the connection rather than turn them into 503s. Not
                # counted as lost: the raylet gives up by itself after its own
                # RAY_gcs_rpc_server_reconnect_timeout_s, and this one is lost from then on.
                if waiting_since is None:
                    log.warning("ray GCS unreachable; this node's raylet is up: waiting for it")
                    waiting_since = time.monotonic()
                failures = 0
                self._failing_since = None
                continue
            if self._failing_since is None:
                self._failing_since = time.monotonic()
            failures += 1
            if (
                probe is Probe.NODE_DEAD
                or failures >= PROBE_FAILURES_BEFORE_RECONNECT
                or self._local_head_died()
            ):
                await self._reconnect()
                failures = 0
                waiting_since = None
                self._failing_since = None

    async def _probe(self) -> Probe:
        if self._local_head_died():
            return Probe.GCS_UNREACHABLE
        try:
            # Ray's private client (no public async liveness check); typed loosely by Ray.
            worker: Any = ray._private.worker.global_worker
            gcs = worker.gcs_client
            node = NodeID.from_hex(ray.get_runtime_context().get_node_id())
            alive = await asyncio.wait_for(
                gcs.async_check_alive([node], PROBE_TIMEOUT_SECONDS), PROBE_TIMEOUT_SECONDS + 1
            )
        except Exception as exc:
            log.warning("ray health probe failed: %s", type(exc).__name__)
            return Probe.GCS_UNREACHABLE
        # The GCS answered: a node it calls dead (its raylet died, or a restarted head does not
        # know it) will not come back, whatever its process does.
        return Probe.OK if alive and alive[0] else Probe.NODE_DEAD

    async def _raylet_answers(self) -> bool:
        """Whether this driver's own raylet still accepts connections (joined clusters only: a
        private runtime's head is watched through its processes)."""
        if self._local_temp_dir is not None:
            return False
        node: Any = getattr(ray._private.worker, "_global_node", None)
        try:
            address, port = node.node_ip_address, int(node.node_manager_port)
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(address, port), PROBE_TIMEOUT_SECONDS
            )
        except Exception:
            return False
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        return True

    def _local_head_died(self) -> bool:
        if self._local_temp_dir is None:
            return False
        node = getattr(ray._private.worker, "_global_node", None)
        processes = getattr(node, "all_processes", None) or {}
        return any(
            info.process.poll() is not None
            for name in ("gcs_server", "raylet")
            for info in processes.get(name, ())
        )

    async def _reconnect(self) -> None:
        self._available = False
        log.error("ray runtime lost; actor-backed routes answer 503 until it is back")
        started = time.monotonic()
        delay = RECONNECT_BACKOFF_SECONDS[0]
        loop = asyncio.get_running_loop()
        while True:
            try:
                await loop.run_in_executor(self._connector_thread(), self._connect_again)
                break
            except Exception:
                log.exception("reconnecting to ray failed; retrying in %g s", delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_BACKOFF_SECONDS[1])
        self._available = True
        since = self._failing_since if self._failing_since is not None else started
        log.warning(
            "ray runtime reconnected", extra={"outage_s": round(time.monotonic() - since, 1)}
        )

    def _connect_again(self) -> None:
        with contextlib.suppress(Exception):
            self._shutdown(lost=True)
        self.connect()
        for spec, args in list(self._wanted.values()):
            self._create(spec, args)

    def actor_settings(self) -> ActorSettings:
        """The settings every actor is created with, built once: every shard call looks its
        handle up with them (Ray pickles them only when it creates the actor), and building
        them per call showed in the frontend's CPU profile of chat sends."""
        if self._actor_settings is None:
            self._actor_settings = ActorSettings.of(self.settings, database_url=self.database_url)
        return self._actor_settings

    def handle(self, spec: ActorSpec, *args: Any) -> Any:
        self._wanted.setdefault(spec.name, (spec, args))
        cached = self._handles.get(spec.name)
        if cached is None:
            if not self._available:
                # No Ray calls now: Ray would quietly start a runtime of its own.
                raise ServiceUnavailable(RECONNECTING, retry_after=RECONNECT_RETRY_AFTER_SECONDS)
            cached = self._create(spec, args)
        return cached

    def _create(self, spec: ActorSpec, args: tuple[Any, ...]) -> Any:
        options = spec.ray_options(self.namespace, actor_resource=self.settings.ray_actor_resource)
        remote_cls: Any = ray.remote(spec.cls).options(**options)
        handle = remote_cls.remote(*args)
        self._handles[spec.name] = handle
        self._starting[spec.name] = handle.__ray_ready__.remote().future()
        return handle

    async def started(self, actor_name: str) -> None:
        """Wait until ``actor_name`` (an actor this runtime created) runs, at most
        ``actor_start_timeout_seconds``; at once for one known to run. Raises
        :class:`ActorStarting` on timeout, and Ray's error if its creation failed."""
        pending = self._starting.get(actor_name)
        if pending is None:
            return
        # asyncio.wait, which never cancels what it waits on: a caller that gives up (or is
        # cancelled) must not cancel the start that other callers wait on too.
        waiter = asyncio.wrap_future(pending)
        waiter.add_done_callback(_retrieve)
        done, _ = await asyncio.wait({waiter}, timeout=self.settings.actor_start_timeout_seconds)
        if not done:
            raise ActorStarting(
                f"{actor_name} is still starting", retry_after=RECONNECT_RETRY_AFTER_SECONDS
            )
        if self._starting.get(actor_name) is pending:
            del self._starting[actor_name]
        waiter.result()

    def forget(self, name: str) -> None:
        self._handles.pop(name, None)

    async def call(
        self, actor_name: str, handle: Any, method: str, *args: Any, timeout_s: float | None = None
    ) -> Any:
        if not self._available:
            ACTOR_CALL_LATENCY.labels(actor_name, method, "unavailable").observe(0)
            raise ServiceUnavailable(RECONNECTING, retry_after=RECONNECT_RETRY_AFTER_SECONDS)
        started = time.perf_counter()
        outcome = "ok"
        try:
            if actor_name in self._starting:  # only an actor's first calls: not on every call
                await self.started(actor_name)
            ref = getattr(handle, method).remote(*args)
            return await asyncio.wait_for(
                ref, timeout_s or self.settings.actor_call_timeout_seconds
            )
        except ActorStarting:
            outcome = "starting"
            raise
        except MarketplaceError:
            outcome = "domain_error"
            raise
        except (TimeoutError, GetTimeoutError) as exc:
            outcome = "timeout"
            raise ServiceUnavailable(f"{actor_name} did not answer in time") from exc
        except RayActorError as exc:
            outcome = "unavailable"
            raise ActorRestarting(f"{actor_name} is restarting") from exc
        except RayError as exc:
            outcome = "error"
            log.exception("actor call failed", extra={"actor": actor_name, "method": method})
            raise ServiceUnavailable(f"{actor_name} failed") from exc
        finally:
            ACTOR_CALL_LATENCY.labels(actor_name, method, outcome).observe(
                time.perf_counter() - started
            )


def _retrieve(waiter: asyncio.Future[Any]) -> None:
    """Mark a start waiter's outcome as seen: a start that failed after its callers gave up
    is not worth asyncio's "exception was never retrieved" error line."""
    if not waiter.cancelled():
        waiter.exception()


def gcs_reconnect_timeout() -> float:
    """Seconds this process's Ray waits for a lost GCS (its ``RAY_<setting>`` override, else
    Ray's default)."""
    try:
        return float(
            os.environ.get(GCS_RECONNECT_TIMEOUT_ENV, GCS_RECONNECT_TIMEOUT_DEFAULT_SECONDS)
        )
    except ValueError:
        return GCS_RECONNECT_TIMEOUT_DEFAULT_SECONDS


def stable_shard(key: str, shard_count: int) -> int:
    """Shard of a key that every process computes alike (Python's hash() is salted per run)."""
    digest = hashlib.blake2b(key.lower().encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count

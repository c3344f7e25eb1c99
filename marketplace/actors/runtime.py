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
import hashlib
import logging
import os
import secrets
import shutil
import tempfile
import time
from typing import Any

import ray
from ray._private import ray_constants
from ray._private.authentication.authentication_utils import is_token_auth_enabled
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from marketplace.actors.options import ActorSpec
from marketplace.actors.ray_env import RAY_CLUSTERS_ENV
from marketplace.config import Settings
from marketplace.errors import MarketplaceError, ServiceUnavailable
from marketplace.metrics import ACTOR_CALL_LATENCY

log = logging.getLogger(__name__)
LOOPBACK = "127.0.0.1"


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


def settings_for_actor(settings: Settings, **overrides: Any) -> dict[str, Any]:
    """Settings as plain data for an actor constructor (actors rebuild their own Settings)."""
    data = settings.model_dump(mode="json")
    for secret in ("jwt_secret", "scheduler_secret"):
        data.pop(secret, None)
    data.update(overrides)
    return data


class ActorRuntime:
    def __init__(self, settings: Settings, *, database_url: str) -> None:
        self.settings = settings
        self.namespace = settings.ray_namespace
        self.database_url = database_url
        self._handles: dict[str, Any] = {}
        self._local_temp_dir: str | None = None

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
        ray.init(address=address, **kwargs)
        log.info("connected to ray", extra={"ray_address": address or "local"})

    def shutdown(self) -> None:
        handles, self._handles = self._handles, {}
        if self._local_temp_dir is not None:
            if ray.is_initialized():
                # Our private runtime goes away with us: stop its actors first so none of them
                # is left talking to dependencies that are being shut down.
                for handle in handles.values():
                    with contextlib.suppress(Exception):
                        ray.kill(handle, no_restart=True)
                ray.shutdown()
            shutil.rmtree(self._local_temp_dir, ignore_errors=True)
            self._local_temp_dir = None

    def actor_settings(self) -> dict[str, Any]:
        return settings_for_actor(self.settings, database_url=self.database_url)

    def handle(self, spec: ActorSpec, *args: Any) -> Any:
        cached = self._handles.get(spec.name)
        if cached is None:
            remote_cls = ray.remote(spec.cls).options(**spec.ray_options(self.namespace))
            cached = remote_cls.remote(*args)
            self._handles[spec.name] = cached
        return cached

    def forget(self, name: str) -> None:
        self._handles.pop(name, None)

    async def call(
        self, actor_name: str, handle: Any, method: str, *args: Any, timeout_s: float | None = None
    ) -> Any:
        started = time.perf_counter()
        outcome = "ok"
        try:
            ref = getattr(handle, method).remote(*args)
            return await asyncio.wait_for(
                ref, timeout_s or self.settings.actor_call_timeout_seconds
            )
        except MarketplaceError:
            outcome = "domain_error"
            raise
        except (TimeoutError, GetTimeoutError) as exc:
            outcome = "timeout"
            raise ServiceUnavailable(f"{actor_name} did not answer in time") from exc
        except RayActorError as exc:
            outcome = "unavailable"
            raise ServiceUnavailable(f"{actor_name} is restarting") from exc
        except RayError as exc:
            outcome = "error"
            log.exception("actor call failed", extra={"actor": actor_name, "method": method})
            raise ServiceUnavailable(f"{actor_name} failed") from exc
        finally:
            ACTOR_CALL_LATENCY.labels(actor_name, method, outcome).observe(
                time.perf_counter() - started
            )


def stable_shard(key: str, shard_count: int) -> int:
    """Shard of a key that every process computes alike (Python's hash() is salted per run)."""
    digest = hashlib.blake2b(key.lower().encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count

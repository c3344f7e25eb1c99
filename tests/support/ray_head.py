"""A Ray cluster on this machine whose head can be lost and restarted: GCS fault tolerance on a
Redis of its own (as deploy/ configures it), a CPU-less head on 127.0.0.2 that hosts no actor
and a worker node on 127.0.0.3 advertising ``marketplace_actors``, so the service's actors live
on the worker and outlive the head.

The head is killed with SIGKILL to its own processes only (its ``ray start`` process group and
whatever names its temp dir: :meth:`tests.support.ray_cluster.Cluster.kill_node`), and started
again with the same GCS port and the same Redis, under a new node name (``head-2``...), so each
incarnation can be told apart and stopped. Never Ray's CLI ``stop``: other Ray instances on this
machine belong to other people.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from marketplace_devstack.embedded.redis import EmbeddedRedis
from tests.support.ray_cluster import (
    ACTOR_RESOURCE,
    HEAD_IP,
    SECOND_IP,
    Cluster,
    node_ports,
)
from tests.support.verifier_fixtures import free_port

# The namespace of the GCS's tables in Redis (KubeRay's externalStorageNamespace).
STORAGE_NAMESPACE = "head-loss"


@dataclass
class RestartableHead:
    """The cluster, its GCS Redis and the head's current incarnation."""

    cluster: Cluster
    redis: EmbeddedRedis
    gcs_port: int
    extra_env: dict[str, str]
    head_name: str = "head"
    incarnations: int = 1
    taken: set[int] = field(default_factory=set)

    def _head_env(self) -> dict[str, str]:
        return {
            **self.extra_env,
            # GCS fault tolerance: the GCS keeps its tables in this Redis and reloads them when
            # it starts again (what KubeRay's gcsFaultToleranceOptions and compose set).
            "RAY_REDIS_ADDRESS": f"127.0.0.1:{self.redis.port}",
            "RAY_external_storage_namespace": STORAGE_NAMESPACE,
        }

    def start_head(self) -> float:
        """Start the head (again, under a new name after the first time); the seconds
        ``ray start --head`` took."""
        started = time.monotonic()
        self.cluster.start_node(
            self.head_name,
            [
                "--head",
                f"--port={self.gcs_port}",
                f"--node-ip-address={HEAD_IP}",
                "--num-cpus=0",
                f"--redis-password={self.redis.password}",
                "--include-dashboard=false",
                *node_ports(self.taken),
            ],
            self._head_env(),
        )
        return time.monotonic() - started

    def kill_head(self) -> int:
        """SIGKILL every process of the head's current incarnation (its GCS, raylet, agents and
        workers); the number signalled. The next :meth:`restart_head` starts a new one."""
        return self.cluster.kill_node(self.head_name)

    def restart_head(self) -> float:
        self.incarnations += 1
        self.head_name = f"head-{self.incarnations}"
        return self.start_head()


@contextlib.contextmanager
def restartable_head_cluster(
    prefix: str, *, extra_env: dict[str, str] | None = None, worker_cpus: int = 1
) -> Iterator[RestartableHead]:
    """The GCS Redis, a head with GCS fault tolerance and one worker node hosting the actors;
    all stopped and removed when the block ends. ``extra_env`` goes to both nodes (Ray's
    ``RAY_<setting>`` overrides). The worker waits for a lost GCS up to
    ``RAY_gcs_rpc_server_reconnect_timeout_s`` (pass it in ``extra_env``; Ray's default is 60 s)."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    cluster = Cluster(root)
    cluster.home.mkdir()
    redis = EmbeddedRedis(root / "gcs-redis")
    try:
        redis.start()
        port = free_port()
        cluster.head_address = f"{HEAD_IP}:{port}"
        head = RestartableHead(cluster, redis, port, dict(extra_env or {}), taken={port})
        head.start_head()
        cluster.start_node(
            "worker",
            [
                f"--address={cluster.head_address}",
                f"--node-ip-address={SECOND_IP}",
                f"--num-cpus={worker_cpus}",
                f"--resources={json.dumps({ACTOR_RESOURCE: 1000})}",
                *node_ports(head.taken),
            ],
            head.extra_env,
        )
        yield head
    finally:
        try:
            cluster.stop()
        finally:
            redis.stop()
            shutil.rmtree(root, ignore_errors=True)

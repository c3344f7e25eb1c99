"""Ray options of every named actor, in one place.

Actor classes stay plain Python (unit-testable without Ray); this module turns a class into a
named, restartable Ray actor. ``get_if_exists=True`` makes creation race-free across frontends:
whoever comes first creates it, everyone else gets a handle to the same one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypedDict

# How much of MARKETPLACE_RAY_ACTOR_RESOURCE one actor takes: one slot, so what a node
# advertises (Ray wants whole numbers there) is how many actors it may host at most.
ACTOR_RESOURCE_UNITS = 1


class RayActorOptions(TypedDict, total=False):
    """The ``ray.remote(...).options(...)`` keywords the marketplace's actors use."""

    name: str
    namespace: str
    get_if_exists: bool
    lifetime: Literal["detached"]
    max_restarts: int
    max_task_retries: int
    max_concurrency: int
    num_cpus: float
    scheduling_strategy: str
    resources: dict[str, float]


@dataclass(frozen=True)
class ActorSpec:
    """How to find or create one named long-lived actor."""

    name: str
    cls: type
    # Only calls that are idempotent may be retried by Ray after a crash (at-least-once).
    idempotent_calls: bool = False
    max_concurrency: int = 64
    num_cpus: float = 0
    # "SPREAD" (every kind's default) spreads shards, job workers, the indexer and the limiter
    # over a cluster's nodes instead of piling them onto the node of the frontend that happened
    # to create them first (Ray's default prefers the caller's node). Best effort only: one
    # family can still land on one node (seen for the 4 verifier workers of a two-node test).
    # A detached actor whose node dies is restarted (max_restarts -1) on a node that is still
    # alive. None leaves the choice to Ray.
    scheduling_strategy: str | None = "SPREAD"
    # Options that override the ones above (an executor's own resource, say).
    extra: RayActorOptions = field(default_factory=lambda: RayActorOptions())

    def ray_options(self, namespace: str, *, actor_resource: str = "") -> RayActorOptions:
        options: RayActorOptions = {
            "name": self.name,
            "namespace": namespace,
            "get_if_exists": True,
            "lifetime": "detached",
            "max_restarts": -1,
            "max_task_retries": -1 if self.idempotent_calls else 0,
            "max_concurrency": self.max_concurrency,
            "num_cpus": self.num_cpus,
        }
        if self.scheduling_strategy:
            options["scheduling_strategy"] = self.scheduling_strategy
        if actor_resource:
            options["resources"] = {actor_resource: ACTOR_RESOURCE_UNITS}
        options.update(self.extra)
        return options

"""Ray options of every named actor, in one place.

Actor classes stay plain Python (unit-testable without Ray); this module turns a class into a
named, restartable Ray actor. ``get_if_exists=True`` makes creation race-free across frontends:
whoever comes first creates it, everyone else gets a handle to the same one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ActorSpec:
    """How to find or create one named long-lived actor."""

    name: str
    cls: type
    # Only calls that are idempotent may be retried by Ray after a crash (at-least-once).
    idempotent_calls: bool = False
    max_concurrency: int = 64
    num_cpus: float = 0
    # "SPREAD" places the actors of one kind on different nodes where it can (job workers).
    scheduling_strategy: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def ray_options(self, namespace: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": namespace,
            "get_if_exists": True,
            "lifetime": "detached",
            "max_restarts": -1,
            "max_task_retries": -1 if self.idempotent_calls else 0,
            "max_concurrency": self.max_concurrency,
            "num_cpus": self.num_cpus,
            **(
                {"scheduling_strategy": self.scheduling_strategy}
                if self.scheduling_strategy
                else {}
            ),
            **self.extra,
        }
